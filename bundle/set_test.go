package bundle_test

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root")
	// Same name, same validity, different key: a different root.
	b := certs.MustNew(t, "root", a.Cert.NotBefore, a.Cert.NotAfter, certs.Options{IsCA: true}, nil)
	sum := sha256.Sum256(a.Cert.Raw)

	tests := map[string]struct {
		cert *x509.Certificate
		want string
	}{
		"the fingerprint is the lowercase hex SHA-256 of the DER": {
			cert: a.Cert,
			want: hex.EncodeToString(sum[:]),
		},
		"no certificate has no fingerprint": {
			cert: nil,
			want: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.Fingerprint(tc.cert)).To(Equal(tc.want))
		})
	}
	t.Run("a re-issued root with the same name has another fingerprint", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		g.Expect(bundle.Fingerprint(b.Cert)).To(MatchRegexp(`^[0-9a-f]{64}$`))
		g.Expect(bundle.Fingerprint(b.Cert)).NotTo(Equal(bundle.Fingerprint(a.Cert)))
	})
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	mk := func(cn string, notBefore, notAfter time.Duration) *x509.Certificate {
		return certs.MustNew(t, cn, testNow.Add(notBefore), testNow.Add(notAfter), certs.Options{IsCA: true}, nil).Cert
	}
	h := time.Hour
	oldest := mk("oldest", -30*24*h, 30*24*h)
	older := mk("older", -20*24*h, 60*24*h)
	current := mk("current", -h, 90*24*h)
	expired := mk("expired", -90*24*h, -h)
	expiresNow := mk("expires now", -90*24*h, 0)
	// Same NotBefore: the one that lives longer comes first.
	sameStartShort := mk("same start, short", -2*h, 10*24*h)
	sameStartLong := mk("same start, long", -2*h, 20*24*h)
	// Same validity: only the fingerprint orders them.
	twinA := mk("twin", -3*h, 5*24*h)
	twinB := mk("twin", -3*h, 5*24*h)
	twins := []*x509.Certificate{twinA, twinB}
	slices.SortFunc(twins, func(a, b *x509.Certificate) int {
		return strings.Compare(bundle.Fingerprint(a), bundle.Fingerprint(b))
	})

	tests := map[string]struct {
		in   []*x509.Certificate
		want []*x509.Certificate
	}{
		"nothing normalizes to an empty set": {
			in:   nil,
			want: []*x509.Certificate{},
		},
		"duplicates are removed": {
			in:   []*x509.Certificate{current, older, current, older, current},
			want: []*x509.Certificate{current, older},
		},
		"an expired old root is dropped but the current one stays": {
			in:   []*x509.Certificate{expired, current},
			want: []*x509.Certificate{current},
		},
		"a root that expires exactly now is kept": {
			in:   []*x509.Certificate{expiresNow, current},
			want: []*x509.Certificate{current, expiresNow},
		},
		"roots are ordered newest first": {
			in:   []*x509.Certificate{oldest, current, older},
			want: []*x509.Certificate{current, older, oldest},
		},
		"roots issued at the same time are ordered by expiry, latest first": {
			in:   []*x509.Certificate{sameStartShort, sameStartLong},
			want: []*x509.Certificate{sameStartLong, sameStartShort},
		},
		"roots with the same validity are ordered by fingerprint": {
			in:   []*x509.Certificate{twinB, twinA},
			want: twins,
		},
		"nil entries are dropped": {
			in:   []*x509.Certificate{nil, current, nil},
			want: []*x509.Certificate{current},
		},
		"a realistic mix is deduplicated, pruned and ordered": {
			in: []*x509.Certificate{
				expired, oldest, twinA, sameStartShort, current, older, twinB, sameStartLong, current, expiresNow, oldest,
			},
			want: append(append([]*x509.Certificate{current, sameStartLong, sameStartShort}, twins...), older, oldest, expiresNow),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			wantPEM := bundle.Encode(tc.want)
			// The order must not depend on the input order, or the gateway
			// would reload whenever a list came back from the API server in
			// another order.
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.in))))
			for i := range 20 {
				in := slices.Clone(tc.in)
				if i > 0 {
					rng.Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
				}
				before := slices.Clone(in)

				got := bundle.Normalize(in, testNow)

				g.Expect(got).NotTo(BeNil())
				g.Expect(fingerprints(got)).To(Equal(fingerprints(tc.want)), "input order %v", names(before))
				g.Expect(bundle.Encode(got)).To(Equal(wantPEM))
				g.Expect(in).To(Equal(before), "the input slice must not be modified")
			}
		})
	}
}

func TestChainsTo(t *testing.T) {
	t.Parallel()
	root := newRoot(t, "dualca root")
	// A re-issued root: same subject name, new key.
	reissued := newRoot(t, "dualca root")
	unrelated := newRoot(t, "unrelated root")
	child := newCert(t, "gateway.example.com", certs.Options{}, root)
	childOfReissued := newCert(t, "gateway.example.com", certs.Options{}, reissued)
	intermediate := newCert(t, "intermediate", certs.Options{IsCA: true}, root)
	grandchild := newCert(t, "deep.example.com", certs.Options{}, intermediate)
	// A leaf used as an issuer: names and signature match, but it is not a
	// CA, so nothing can chain to it.
	notCA := newCert(t, "not a ca", certs.Options{}, nil)
	childOfLeaf := newCert(t, "child.example.com", certs.Options{}, notCA)

	tests := map[string]struct {
		leaf, root *x509.Certificate
		want       bool
	}{
		"a root chains to itself": {
			leaf: root.Cert, root: root.Cert, want: true,
		},
		"a certificate signed directly by the root chains to it": {
			leaf: child.Cert, root: root.Cert, want: true,
		},
		"an intermediate CA signed by the root chains to it": {
			leaf: intermediate.Cert, root: root.Cert, want: true,
		},
		"a child of another CA with the same subject name does not chain": {
			leaf: childOfReissued.Cert, root: root.Cert, want: false,
		},
		"a child does not chain to another CA with the same subject name": {
			leaf: child.Cert, root: reissued.Cert, want: false,
		},
		"a re-issued root does not chain to the old one": {
			leaf: reissued.Cert, root: root.Cert, want: false,
		},
		"an unrelated certificate does not chain": {
			leaf: child.Cert, root: unrelated.Cert, want: false,
		},
		"only direct children count, not grandchildren": {
			leaf: grandchild.Cert, root: root.Cert, want: false,
		},
		"a root does not chain to its child": {
			leaf: root.Cert, root: child.Cert, want: false,
		},
		"a certificate signed by a non-CA does not chain to it": {
			leaf: childOfLeaf.Cert, root: notCA.Cert, want: false,
		},
		"nil certificates never chain": {
			leaf: nil, root: root.Cert, want: false,
		},
		"nothing chains to a nil root": {
			leaf: child.Cert, root: nil, want: false,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.ChainsTo(tc.leaf, tc.root)).To(Equal(tc.want))
			// A Memory gives the same answer, the first time and when it
			// remembers it; a nil one and an empty one check afresh.
			sigs := bundle.NewMemory()
			g.Expect(sigs.ChainsTo(tc.leaf, tc.root)).To(Equal(tc.want), "checked")
			g.Expect(sigs.ChainsTo(tc.leaf, tc.root)).To(Equal(tc.want), "remembered")
			var none *bundle.Memory
			g.Expect(none.ChainsTo(tc.leaf, tc.root)).To(Equal(tc.want), "a nil Memory")
			g.Expect(new(bundle.Memory).ChainsTo(tc.leaf, tc.root)).To(Equal(tc.want), "an empty Memory")
		})
	}
}

// TestMemoryRemembersPerPair: a check remembered for one pair of
// certificates never answers for another, whatever their names share.
func TestMemoryRemembersPerPair(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := newRoot(t, "dualca root")
	reissued := newRoot(t, "dualca root") // same subject name, new key
	child := newCert(t, "gateway.example.com", certs.Options{}, root)
	childOfReissued := newCert(t, "gateway.example.com", certs.Options{}, reissued)
	sigs := bundle.NewMemory()
	for range 2 {
		g.Expect(sigs.ChainsTo(child.Cert, root.Cert)).To(BeTrue())
		g.Expect(sigs.ChainsTo(child.Cert, reissued.Cert)).To(BeFalse())
		g.Expect(sigs.ChainsTo(childOfReissued.Cert, reissued.Cert)).To(BeTrue())
		g.Expect(sigs.ChainsTo(childOfReissued.Cert, root.Cert)).To(BeFalse())
	}
}

// TestMemoryRemembersTheKeyThatSigned: once a certificate verified under
// one key, roots with another key are answered without a check, and a root
// renewed with the same key still verifies it, in whichever order they
// are asked about.
func TestMemoryRemembersTheKeyThatSigned(t *testing.T) {
	t.Parallel()
	root := newRoot(t, "dualca root")
	sameKey := newCert(t, "dualca root", certs.Options{IsCA: true, Key: root.Key}, nil) // renewed, key kept
	other := newRoot(t, "dualca root")                                                  // renewed, new key
	leaf := newCert(t, "client", certs.Options{}, root)
	tests := map[string][]*certs.CA{
		"the signer first":       {root, other, sameKey},
		"another key first":      {other, root, sameKey},
		"the same key first":     {sameKey, other, root},
		"another key on its own": {other},
	}
	for name, order := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			sigs := bundle.NewMemory()
			for range 2 {
				for _, r := range order {
					g.Expect(sigs.ChainsTo(leaf.Cert, r.Cert)).To(Equal(r != other), "root with the signing key: %v", r != other)
				}
			}
		})
	}
}

// TestMemoryForgetsWhatNoDecisionAsksAbout: a syncer runs for months,
// and every rotation replaces every client's leaf and brings a root. A
// Memory that starts a generation before each decision holds what the
// last decisions asked about, a few times over, not every leaf it ever
// checked; and it still answers right after forgetting.
func TestMemoryForgetsWhatNoDecisionAsksAbout(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rng := rand.New(rand.NewPCG(15, 60))
	roots := []*certs.CA{newRoot(t, "dualca root"), newRoot(t, "dualca root"), newRoot(t, "dualca root")}
	const clients, renewedPerDecision, decisions = 40, 8, 150
	leaves := make([]*certs.CA, clients)
	signer := make([]int, clients)
	renew := func(i int) {
		signer[i] = rng.IntN(len(roots))
		leaves[i] = newCert(t, "agent", certs.Options{}, roots[signer[i]])
	}
	for i := range leaves {
		renew(i)
	}
	// What one decision asks about: every leaf against every root.
	workingPairs, workingCerts := clients*len(roots), clients+len(roots)
	sigs := bundle.NewMemory()
	asked := 0
	for d := range decisions {
		sigs.Advance()
		for range renewedPerDecision {
			renew(rng.IntN(clients))
		}
		for i, leaf := range leaves {
			for j, root := range roots {
				g.Expect(sigs.ChainsTo(leaf.Cert, root.Cert)).To(Equal(j == signer[i]), "decision %d: leaf %d against root %d", d, i, j)
				asked++
			}
		}
		pairs, certificates := bundle.MemorySize(sigs)
		g.Expect(pairs).To(BeNumerically("<=", 3*workingPairs+bundle.MinSweep), "decision %d: pairs remembered", d)
		g.Expect(certificates).To(BeNumerically("<=", 3*workingCerts+bundle.MinSweep), "decision %d: certificates remembered", d)
		g.Expect(bundle.MemoryAsked(sigs)).To(BeNumerically("<=", workingPairs), "decision %d: answers kept for the generation", d)
	}
	// The run asked about far more than the bound: without forgetting, the
	// bound would not have held.
	distinct := (clients + decisions*renewedPerDecision) * len(roots)
	g.Expect(distinct).To(BeNumerically(">", 3*workingPairs+bundle.MinSweep))
	g.Expect(asked).To(Equal(decisions * workingPairs))
}

func TestContainsAndFind(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root")
	b := newRoot(t, "root")
	c := newRoot(t, "other")
	set := []*x509.Certificate{nil, a.Cert, b.Cert}

	tests := map[string]struct {
		set  []*x509.Certificate
		cert *x509.Certificate
		want *x509.Certificate
	}{
		"a member is found": {
			set: set, cert: b.Cert, want: b.Cert,
		},
		"a member is found through a separately parsed copy": {
			set: set, cert: reparse(t, a.Cert), want: a.Cert,
		},
		"a certificate with the same name but other bytes is not a member": {
			set: []*x509.Certificate{a.Cert}, cert: b.Cert, want: nil,
		},
		"a non-member is not found": {
			set: set, cert: c.Cert, want: nil,
		},
		"nothing is found in an empty set": {
			set: nil, cert: a.Cert, want: nil,
		},
		"nil is never a member": {
			set: set, cert: nil, want: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.Contains(tc.set, tc.cert)).To(Equal(tc.want != nil))
			got := bundle.Find(tc.set, bundle.Fingerprint(tc.cert))
			if tc.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).To(BeIdenticalTo(tc.want))
		})
	}
	t.Run("an unknown or malformed fingerprint finds nothing", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		g.Expect(bundle.Find(set, "")).To(BeNil())
		g.Expect(bundle.Find(set, "sha256:00")).To(BeNil())
	})
}
