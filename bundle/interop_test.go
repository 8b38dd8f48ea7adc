package bundle_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestServerChainVerifiesWithOpenSSL checks the server credential with
// another verifier than Go's: OpenSSL builds chains without backtracking and
// takes a certificate whose subject equals its issuer's for self-signed
// unless the key identifiers say otherwise. The roots share one subject, as
// the successive roots of one cert-manager CA do. openssl comes with Debian's
// ca-certificates, which the Go module proxy needs anyway; .ci/run installs
// it where it is missing.
func TestServerChainVerifiesWithOpenSSL(t *testing.T) {
	t.Parallel()
	openssl := lookOpenSSL(t)
	g := NewWithT(t)
	dir := t.TempDir()
	now := testNow
	root := func(age, life time.Duration) *certs.CA {
		return certs.MustNew(t, "agents-root-ca", now.Add(-age), now.Add(life-age), certs.Options{IsCA: true}, nil)
	}
	r1, r2, r3 := root(3*time.Hour, 30*time.Hour), root(2*time.Hour, 2*time.Hour+10*time.Minute), root(time.Hour, 30*time.Hour)
	r4 := root(0, 30*time.Hour)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, data, 0o600)).To(Succeed())
		return p
	}
	// verify runs openssl verify as a client trusting only trust would.
	verify := func(d bundle.Decision, trust *certs.CA) error {
		chain := parsed(t, d.CertPEM)
		args := []string{"verify", "-purpose", "sslserver", "-attime", itoa(now.Add(time.Second).Unix()), "-CAfile", write("trust.pem", trust.CertPEM)}
		if len(chain) > 1 {
			args = append(args, "-untrusted", write("untrusted.pem", bundle.Encode(chain[1:])))
		}
		out, err := exec.Command(openssl, append(args, write("leaf.pem", bundle.Encode(chain[:1])))...).CombinedOutput()
		if err != nil {
			return &opensslError{string(out)}
		}
		return nil
	}

	d := bundle.Plan(bundle.Gateway{}, validRoot(t, r1, now), bundle.Clients{}, testTimings, now)
	g.Expect(verify(d, r1)).To(Succeed(), "the server alone")
	d = bundle.Plan(written(d), validRoot(t, r2, now), bundle.Clients{}, testTimings, now)
	for _, r := range []*certs.CA{r1, r2} {
		g.Expect(verify(d, r)).To(Succeed(), "one rotation: a client trusting only root %s", bundle.Short(bundle.Fingerprint(r.Cert)))
	}
	d = bundle.Plan(written(d), validRoot(t, r3, now), bundle.Clients{}, testTimings, now)
	for i, r := range []*certs.CA{r1, r2, r3} {
		g.Expect(verify(d, r)).To(Succeed(), "overlapping rotations: a client trusting only R%d", i+1)
	}

	// R2 expires: the path R1 <- R2 <- R3 breaks and starts again from the
	// direct R1 <- R3, then R4 extends it.
	now = now.Add(20 * time.Minute)
	d = bundle.Plan(written(d), validRoot(t, r3, now), bundle.Clients{}, testTimings, now)
	g.Expect(bundle.Contains(parsed(t, d.CAPEM), r2.Cert)).To(BeFalse(), "R2 expired and was retired")
	d = bundle.Plan(written(d), validRoot(t, r4, now), bundle.Clients{}, testTimings, now)
	for i, r := range []*certs.CA{r1, r3, r4} {
		g.Expect(verify(d, r)).To(Succeed(), "after R2 expired: a client trusting only R%d", []int{1, 3, 4}[i])
	}
}

type opensslError struct{ out string }

func (e *opensslError) Error() string { return "openssl verify: " + e.out }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestAFullServerChainVerifiesWithOpenSSL: with as many cross-certificates
// as dualca sends (roots of one CA piled up, the server on the first),
// clients trusting only the first, a middle or the newest root verify the
// server with OpenSSL, which takes the path link by link.
func TestAFullServerChainVerifiesWithOpenSSL(t *testing.T) {
	t.Parallel()
	openssl := lookOpenSSL(t)
	g := NewWithT(t)
	dir := t.TempDir()
	gw, cas, _, _ := pileUp(t, bundle.MaxServerChainLinks+1, 1, 1000*time.Hour)
	chain := parsed(t, gw.CertPEM)
	g.Expect(chain).To(HaveLen(bundle.MaxServerChainLinks+1), "the leaf and a full chain")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, data, 0o600)).To(Succeed())
		return p
	}
	leaf, untrusted := write("leaf.pem", bundle.Encode(chain[:1])), write("untrusted.pem", bundle.Encode(chain[1:]))
	for _, i := range []int{0, bundle.MaxServerChainLinks / 2, bundle.MaxServerChainLinks} {
		out, err := exec.Command(openssl, "verify", "-purpose", "sslserver", "-attime", itoa(testNow.Unix()),
			"-CAfile", write("trust.pem", cas[i].CertPEM), "-untrusted", untrusted, leaf).CombinedOutput()
		g.Expect(err).NotTo(HaveOccurred(), "a client trusting only root %d: %s", i+1, out)
	}
}

// lookOpenSSL finds openssl, the verifier the chain is checked with besides
// Go's.
func lookOpenSSL(t *testing.T) string {
	t.Helper()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl is needed to check the server chain with another verifier than Go's: apt-get install openssl")
	}
	return openssl
}
