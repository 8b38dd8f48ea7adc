package bundle_test

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// Roots piling up: a root Certificate renewed faster than the server can
// switch (misconfigured to renew every minute, or clients stuck on the first
// root) leaves every root in the bundle and the server on the first one.
// What that costs per handshake is bounded (crosschain.go), and what it
// costs per decision is measured by BenchmarkPlanRootsPiledUp.

// pileUpTimings keep the server on the first root for the whole pile-up.
var pileUpTimings = bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: 24 * time.Hour}

// pileUp is a gateway after n-1 rotations of one cert-manager CA (every root
// the same subject, a new key each time, one minute apart, each valid for
// life) that the server followed only when its chain was full: clients
// trusting only the first root (clients of them) and one client stuck on
// each later root are tracked and never renew, so every root stays in the
// bundle. It returns the gateway, the roots, oldest first, the clients and
// the events of every decision.
func pileUp(tb testing.TB, n, clients int, life time.Duration) (bundle.Gateway, []*certs.CA, bundle.Clients, []bundle.Event) {
	tb.Helper()
	var cas []*certs.CA
	for i := range n {
		at := testNow.Add(time.Duration(i-n) * time.Minute)
		cas = append(cas, certs.MustNew(tb, "agents-root-ca", at, at.Add(life), certs.Options{IsCA: true}, nil))
	}
	cl := bundle.Clients{Tracked: true, Memory: bundle.NewMemory()}
	stuck := func(name string, r *certs.CA) {
		leaf := certs.MustNew(tb, "client", r.Cert.NotBefore, testNow.Add(100*time.Hour), certs.Options{}, r)
		cl.Items = append(cl.Items, bundle.Client{Name: name, Leaf: bundle.NewClientLeaf(leaf.Cert, []*x509.Certificate{r.Cert}), CA: []*x509.Certificate{r.Cert}})
	}
	for i := range clients {
		stuck(fmt.Sprintf("agents/client-%d", i), cas[0])
	}
	for i, r := range cas[1:] {
		stuck(fmt.Sprintf("agents/stuck-on-%d", i+2), r)
	}
	gw := bundle.Gateway{}
	var events []bundle.Event
	for i, ca := range cas {
		at := testNow.Add(time.Duration(i-n+1) * time.Minute)
		d := bundle.Plan(gw, validRoot(tb, ca, at), cl, pileUpTimings, at)
		gw, events = written(d), append(events, d.Events...)
	}
	return gw, cas, cl, events
}

// TestPlanServerChainIsBounded: roots of one CA pile up; tls.crt carries the
// leaf and one cross-certificate per root current since the server's, and
// clients trusting any one of them verify the server with Go's verifier
// (OpenSSL's: interop_test.go), until the chain holds MaxServerChainLinks;
// the next rotation switches the server, with a Warning.
func TestPlanServerChainIsBounded(t *testing.T) {
	t.Parallel()
	forced := func(events []bundle.Event) int {
		n := 0
		for _, e := range events {
			if e.Reason == bundle.ReasonServerSwitchForced {
				n++
			}
		}
		return n
	}
	tests := map[string]struct {
		roots, server int // server: the root the server is on, counted from 1
	}{
		"one root: no cross-certificate":                      {roots: 1, server: 1},
		"a full chain: one link per unswitched rotation":      {roots: bundle.MaxServerChainLinks + 1, server: 1},
		"one rotation more: the server switches":              {roots: bundle.MaxServerChainLinks + 2, server: bundle.MaxServerChainLinks + 2},
		"sixty roots: the chain starts again from the switch": {roots: 60, server: bundle.MaxServerChainLinks + 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			gw, cas, _, events := pileUp(t, tc.roots, 1, 1000*time.Hour)
			server := cas[tc.server-1]
			g.Expect(gw.State.Server).To(Equal(bundle.Fingerprint(server.Cert)), "the server is on root %d", tc.server)
			g.Expect(forced(events)).To(Equal(min(1, tc.server-1)), "a full chain forces one switch, with a Warning")
			g.Expect(parsed(t, gw.CAPEM)).To(HaveLen(tc.roots), "every root a client uses stays in the bundle")
			chain := parsed(t, gw.CertPEM)
			g.Expect(chain).To(HaveLen(1+tc.roots-tc.server), "the leaf and one link per later root: no direct link, the path is valid as long as they would be")
			for i, c := range chain[1:] {
				g.Expect(bundle.ChainsTo(c, cas[tc.server+i].Cert)).To(BeTrue(), "link %d is signed by the root after the one it certifies", i+1)
				g.Expect(c.RawSubjectPublicKeyInfo).To(Equal(cas[tc.server-1+i].Cert.RawSubjectPublicKeyInfo), "link %d certifies the next root of the path", i+1)
			}
			for i, r := range cas[tc.server-1:] {
				g.Expect(verifyServer(gw.CertPEM, r.Cert, testNow)).To(Succeed(), "a client trusting only root %d verifies the server", tc.server+i)
			}
		})
	}
}

// TestPlanServerChainKeepsDirectLinksWhereThePathFails: a direct link of the
// server root is sent only when it serves a client at a moment the path
// cannot.
func TestPlanServerChainKeepsDirectLinksWhereThePathFails(t *testing.T) {
	t.Parallel()
	root := func(cn string, from, life time.Duration) *certs.CA {
		return certs.MustNew(t, cn, testNow.Add(from), testNow.Add(from+life), certs.Options{IsCA: true}, nil)
	}
	tests := map[string]struct {
		r2         *certs.CA
		wantDirect bool
	}{
		"a middle root that expires after the server root and the newest: no direct link": {
			r2: root("root-2", -2*time.Hour, 40*time.Hour)},
		"a middle root that expires before them: the newest certifies the server root directly": {
			r2: root("root-2", -2*time.Hour, 2*time.Hour+10*time.Minute), wantDirect: true},
		"a middle root not valid yet (its issuer's clock runs ahead): a direct link serves meanwhile": {
			r2: root("root-2", time.Minute, 40*time.Hour), wantDirect: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			r1, r3 := root("root-1", -3*time.Hour, 30*time.Hour), root("root-3", -time.Hour, 30*time.Hour)
			stuck := tracked(newClient(t, "ns/a", r1, r1))
			d := bundle.Plan(bundle.Gateway{}, validRoot(t, r1, testNow), stuck, pileUpTimings, testNow)
			for _, r := range []*certs.CA{tc.r2, r3} {
				d = bundle.Plan(written(d), validRoot(t, r, testNow), stuck, pileUpTimings, testNow)
			}
			chain := parsed(t, d.CertPEM)
			want := 3 // the leaf, R1 by R2, R2 by R3
			if tc.wantDirect {
				want = 4
				g.Expect(bundle.ChainsTo(chain[3], r3.Cert) && chain[3].Subject.CommonName == "root-1").To(BeTrue(), "the last link is R1 by R3")
			}
			g.Expect(chain).To(HaveLen(want))
			for _, r := range []*certs.CA{r1, r3} {
				at := testNow
				if tc.r2.Cert.NotBefore.After(at) {
					at = tc.r2.Cert.NotBefore.Add(-time.Second) // the path through R2 is not valid yet
				}
				g.Expect(verifyServer(d.CertPEM, r.Cert, at)).To(Succeed(), "a client trusting only %s verifies the server", r.Cert.Subject.CommonName)
			}
		})
	}
}

// BenchmarkPlanRootsPiledUp is the decision that brings one more root to a
// pile of n (the cost on the propagation path) and the decision at rest on
// it, with 100 tracked clients: close to flat, where it once grew with the
// square of the roots at every path the cross-chain search walked.
func BenchmarkPlanRootsPiledUp(b *testing.B) {
	for _, n := range []int{1, 2, 3, 10, 30, 60} {
		gw, cas, cl, _ := pileUp(b, n, 100, 1000*time.Hour)
		gw.Parsed = bundle.NewParsed() // the syncer keeps one for as long as it runs
		next := certs.MustNew(b, "agents-root-ca", testNow, testNow.Add(1000*time.Hour), certs.Options{IsCA: true}, nil)
		nextRoot, lastRoot := validRoot(b, next, testNow), validRoot(b, cas[n-1], testNow)
		b.Run(fmt.Sprintf("new-root/roots=%d", n), func(b *testing.B) {
			for b.Loop() {
				if d := bundle.Plan(gw, nextRoot, cl, pileUpTimings, testNow); d.State.Root != nextRoot.Fingerprint {
					b.Fatal("the new root is not current")
				}
			}
			b.ReportMetric(float64(len(gw.CertPEM)), "tls.crt-bytes")
		})
		b.Run(fmt.Sprintf("at-rest/roots=%d", n), func(b *testing.B) {
			for b.Loop() {
				bundle.Plan(gw, lastRoot, cl, pileUpTimings, testNow)
			}
		})
		// A rotation as the syncer lives it: the decision, then the
		// reconcile that its own write triggers, reading it back.
		b.Run(fmt.Sprintf("new-root-read-back/roots=%d", n), func(b *testing.B) {
			for b.Loop() {
				d := bundle.Plan(gw, nextRoot, cl, pileUpTimings, testNow)
				back := written(d)
				back.Parsed = gw.Parsed
				bundle.Plan(back, nextRoot, cl, pileUpTimings, testNow)
			}
		})
	}
}
