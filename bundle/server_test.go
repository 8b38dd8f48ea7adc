package bundle_test

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanServerCredentialServesEveryClientPopulation follows the server
// credential through an overlapping rotation: the leaf stays while clients
// move, each new root adds its cross-certificate, and clients that trust only
// R1, only R2 or only R3 all verify the server at every step.
func TestPlanServerCredentialServesEveryClientPopulation(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	on1, on2, on3 := newClient(t, "ns/a", f.r1, f.r1), newClient(t, "ns/b", f.r2, f.r2), newClient(t, "ns/c", f.r3, f.r3)
	crosses := func(d bundle.Decision) []string {
		chain := parsed(t, d.CertPEM)
		var out []string
		for _, c := range chain[1:] {
			out = append(out, c.Issuer.CommonName)
		}
		return out
	}
	verifiedBy := func(d bundle.Decision, now time.Time, roots ...*certs.CA) {
		for _, r := range roots {
			g.Expect(verifyServer(d.CertPEM, r.Cert, now)).To(Succeed(), "a client trusting only %s verifies the server", r.Cert.Subject.CommonName)
		}
	}

	now := testNow
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, f.r1, now), tracked(on1), testTimings, now)
	g.Expect(crosses(d)).To(BeEmpty(), "a new gateway serves a leaf of the root alone")
	verifiedBy(d, now, f.r1)
	g.Expect(bytes.Equal(d.KeyPEM, f.r1.KeyPEM)).To(BeFalse(), "the gateway never holds the root's key")
	leaf := parsed(t, d.CertPEM)[0]
	g.Expect(leaf.IsCA).To(BeFalse())
	g.Expect(leaf.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
	g.Expect(leaf.Subject.String()).NotTo(Equal(leaf.Issuer.String()),
		"a leaf named like its issuer is taken for self-signed by OpenSSL")
	g.Expect(leaf.Subject.CommonName).To(Equal("root-1 server"))
	g.Expect(leaf.NotAfter).To(Equal(f.r1.Cert.NotAfter), "valid as long as its root")

	now = now.Add(time.Minute)
	d = bundle.Plan(written(d), validRoot(t, f.r2, now), tracked(on1, on2), testTimings, now)
	g.Expect(crosses(d)).To(Equal([]string{"root-2"}), "R2 cross-signs the server root")
	g.Expect(parsed(t, d.CertPEM)[0].Raw).To(Equal(leaf.Raw), "the leaf stays while clients move")
	verifiedBy(d, now, f.r1, f.r2)

	now = now.Add(time.Minute)
	d = bundle.Plan(written(d), validRoot(t, f.r3, now), tracked(on1, on2, on3), testTimings, now)
	g.Expect(crosses(d)).To(Equal([]string{"root-2", "root-3"}),
		"R3 certifies R2, extending the path R1 <- R2; R1 by R3 directly would be valid only while the path is, so it is not sent")
	chain := parsed(t, d.CertPEM)
	g.Expect(chain[2].Subject.CommonName).To(Equal("root-2"), "the second link certifies R2")
	g.Expect(chain[2].AuthorityKeyId).To(Equal(f.r3.Cert.SubjectKeyId), "links name their signer's key")
	verifiedBy(d, now, f.r1, f.r2, f.r3)

	// Every client moves to R3: after the propagation delay twice (the
	// gateway, then the clients) the server switches to a leaf of R3.
	on1, on2 = newClient(t, "ns/a", f.r3, f.r3), newClient(t, "ns/b", f.r3, f.r3)
	for range 3 {
		now = now.Add(time.Minute)
		d = bundle.Plan(written(d), validRoot(t, f.r3, now), tracked(on1, on2, on3), testTimings, now)
	}
	g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(f.r3.Cert)), "the server switched to R3")
	g.Expect(crosses(d)).To(BeEmpty(), "a leaf of the newest root needs no cross-certificate")
	verifiedBy(d, now, f.r3)
}

// TestPlanKeepsTheServerWhenTheRootIsRenewedWithTheSameKey: cert-manager
// re-issues a root with the same subject and key when its private key
// rotation policy is Never. The server leaf of the old root then verifies
// with the new one too, and must still be read as on the root dualca
// recorded: not taken for a credential replaced by hand, which forces the
// switch with a Warning. Found by FuzzPlan (a cross-certificate in ca.crt,
// which also shares the root's subject and key, re-issued the credential at
// every decision).
func TestPlanKeepsTheServerWhenTheRootIsRenewedWithTheSameKey(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	old := certs.MustNew(t, "root", testNow.Add(-2*time.Hour), testNow.Add(10*time.Hour), certs.Options{IsCA: true}, nil)
	renewed := certs.MustNew(t, "root", testNow.Add(-time.Hour), testNow.Add(20*time.Hour), certs.Options{IsCA: true, Key: old.Key}, nil)
	clients := tracked(newClient(t, "ns/a", old, old))

	now := testNow.Add(-30 * time.Minute)
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, old, now), clients, testTimings, now)
	for _, step := range []time.Duration{time.Minute, time.Second} {
		now = now.Add(step)
		prev := d
		d = bundle.Plan(written(d), validRoot(t, renewed, now), clients, testTimings, now)
		expectConsistent(t, d, validRoot(t, renewed, now), now)
		g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(old.Cert)), "the server stays on the old root at %s", now)
		g.Expect(bytes.Equal(parsed(t, d.CertPEM)[0].Raw, parsed(t, prev.CertPEM)[0].Raw)).To(BeTrue(), "the server leaf is kept at %s", now)
		g.Expect(bytes.Equal(d.KeyPEM, prev.KeyPEM)).To(BeTrue(), "the server key is kept at %s", now)
		for _, e := range d.Events {
			g.Expect(e.Reason).NotTo(Equal(bundle.ReasonServerSwitchForced), "at %s: %s", now, e.Message)
		}
	}
	g.Expect(names(parsed(t, d.CAPEM))).To(Equal([]string{"root", "root"}), "both roots are trusted")
}
