package gateways

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"
)

// row is one line of the report: a gateway, a client stack, a shape and a
// root key algorithm.
type row struct {
	Gateway, Stack, Shape, Algorithm string
}

// cell is what one strategy did on a row.
type cell struct {
	Handshakes, Failed, Rotations, Refused int
	ran                                    bool
}

// table collects the scenarios' figures.
type table struct {
	mu   sync.Mutex
	rows map[row][2]cell // [zero-downtime, legacy]
}

func (t *table) add(r row, legacy bool, c cell) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = map[row][2]cell{}
	}
	cells := t.rows[r]
	c.ran = true
	if legacy {
		cells[1] = c
	} else {
		cells[0] = c
	}
	t.rows[r] = cells
}

// uncutByLegacy is the gateway × stack pairs that ran legacy scenarios and
// failed no handshake in any of them, sorted.
func (t *table) uncutByLegacy() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	failed := map[string]int{}
	for r, cells := range t.rows {
		if cells[1].ran {
			failed[r.Gateway+" × "+r.Stack] += cells[1].Failed
		}
	}
	var pairs []string
	for pair, n := range failed {
		if n == 0 {
			pairs = append(pairs, pair)
		}
	}
	slices.Sort(pairs)
	return pairs
}

// unsupported records r as a row whose gateway cannot read the shape.
func (t *table) unsupported(r row) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.rows == nil {
		t.rows = map[row][2]cell{}
	}
	if _, ok := t.rows[r]; !ok {
		t.rows[r] = [2]cell{}
	}
}

// order sorts rows by shape, gateway, stack, then algorithm as the suite
// lists them.
func order(a, b row) int {
	rank := func(list []string, s string) int { return slices.Index(list, s) }
	algs := make([]string, len(Algorithms))
	for i, alg := range Algorithms {
		algs[i] = alg.Name
	}
	stacks := make([]string, len(Stacks))
	for i, st := range Stacks {
		stacks[i] = st.Name
	}
	shapes := make([]string, len(Shapes))
	for i, sh := range Shapes {
		shapes[i] = sh.Name
	}
	for _, d := range []int{
		rank(shapes, a.Shape) - rank(shapes, b.Shape),
		rank(gatewayNames(), a.Gateway) - rank(gatewayNames(), b.Gateway),
		rank(stacks, a.Stack) - rank(stacks, b.Stack),
		rank(algs, a.Algorithm) - rank(algs, b.Algorithm),
	} {
		if d != 0 {
			return d
		}
	}
	return 0
}

// markdown is the report: how it was made, then the table.
func (t *table) markdown(traefikVersion string, elapsed time.Duration) []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Real gateways and TLS stacks through root rotations

Written by `+"`make gateways-report`"+` (test/gateways, `+"`-gateways.report`"+`); `+"`make test`"+` runs the same
suite and asserts the same counts without writing this page.

Each row is one gateway serving dualca's gateway credential in one target
shape to one client of one TLS stack, while cert-manager rotates a root of
one key algorithm %d times, each rotation once the one before is over
everywhere (dualca done, every volume holding the new version, every pair
through twice since). Every scenario runs at once against one control
plane: kube-apiserver and etcd, cert-manager's controller issuing the root
and the clients and renewing the clients, dualca with a trust propagation
delay of %s (longer than the slowest volume's lag). The whole suite took
%s on this project's 2-core machine, at commit %s.

- **nginx** (Debian's package, OpenSSL) and **HAProxy** (Debian's package,
  OpenSSL, master-worker mode) read projected files that a kubelet-like
  projector writes atomically (a new timestamped directory, the `+"`..data`"+`
  symlink swapped by a rename) 1-3 s after each change, and are reloaded
  the way each is in production (`+"`nginx -t`"+` then `+"`nginx -s reload`"+`;
  `+"`haproxy -c`"+` then SIGUSR2 to the master, checked with the master CLI's
  `+"`show proc`"+`). A refused reload is counted in *refused*.
- **Traefik** %s reads Kubernetes itself (CRD provider): an IngressRoute whose
  `+"`tls.secretName`"+` is the server credential, a TLSOption whose
  `+"`clientAuth.secretNames`"+` is the bundle's Secret
  (`+"`RequireAndVerifyClientCert`"+`). *refused* counts the errors in its log
  (a CA or certificate it could not load, a TLS option it could not build).
- Clients: **curl** (OpenSSL) and **gnutls-cli** (GnuTLS), each loading its
  own projected Secret (tls.crt, tls.key, ca.crt; 1-10 s late), one
  handshake and request every %s, verifying the server's chain and its
  name `+"`%s`"+`, and requiring the gateway's answer. Every attempt counts:
  no retry; counting starts once every pair got through twice.

The zero-downtime strategy must fail no handshake; the legacy strategy
(`+"`--cert-management-legacy`"+`) must cut some pair off in every scenario, and every pair in some scenario. Two tests of
the same suite show that the counts can be other than zero:
`+"`TestRefusedReloadsAreCounted`"+` gives every gateway a credential whose key is
not its certificate's (each refuses it and it is counted; nginx and HAProxy
keep serving the version before, while Traefik drops the certificate and
serves its own default one, which no client trusts), and
`+"`TestClientsCheckTheServersChainAndName`"+` has both client stacks refuse a
trusted certificate for another name and the right name on a chain they do
not trust.

`, *rotations, trustPropagationDelay, elapsed.Round(time.Second), commit(), traefikVersion, *interval, ServerName)
	b.WriteString("| gateway | client TLS stack | target shape | root key | zero-downtime: handshakes | failed | rotations | legacy: handshakes | failed | rotations | refused reloads (both) |\n")
	b.WriteString("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	rows := make([]row, 0, len(t.rows))
	for r := range t.rows {
		rows = append(rows, r)
	}
	slices.SortFunc(rows, order)
	for _, r := range rows {
		c := t.rows[r]
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Gateway, r.Stack, r.Shape, r.Algorithm,
			strings.Join([]string{figures(c[0]), figures(c[1])}, " | "), refused(c))
	}
	return b.Bytes()
}

// figures are a cell's three columns.
func figures(c cell) string {
	if !c.ran {
		return "n/a (cannot read the shape) | | "
	}
	return fmt.Sprintf("%d | %d | %d", c.Handshakes, c.Failed, c.Rotations)
}

// refused is the refusals of both strategies.
func refused(c [2]cell) string {
	return fmt.Sprint(c[0].Refused + c[1].Refused)
}

// commit is the commit the suite ran at, "-dirty" added when the tree
// differs from it (untracked files included), as git tells it.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain").Output(); err != nil || len(bytes.TrimSpace(st)) > 0 {
		rev += "-dirty"
	}
	return rev
}
