package bundle_test

import (
	"crypto/x509"
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanKeepsTheGatewayWithinItsBudget checks the rule budget
// (budget.go): a plan over the budget is trimmed of the roots no client
// uses, oldest first, never of one in use, the current root or the
// server's; one that still does not fit is refused as a whole, the
// gateway left exactly as found.
func TestPlanKeepsTheGatewayWithinItsBudget(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	ca := func(cn string, notBefore time.Duration) *certs.CA {
		return certs.MustNew(t, cn, testNow.Add(notBefore), testNow.Add(10*h), certs.Options{IsCA: true}, nil)
	}
	// Older roots piled up behind the server's: rA the oldest.
	rA, rB := ca("root-a", -4*h), ca("root-b", -3*h)
	// R3 arrives while the server is on R1 and the clients move to R2.
	piled := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1, rB, rA), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-5 * h)}.gateway()
	onR1, onRA, onRB := newClient(t, "ns/on-r1", f.r1, f.r1), newClient(t, "ns/on-ra", rA, rA), newClient(t, "ns/on-rb", rB, rB)
	size := func(cas ...*certs.CA) int {
		var cs []*x509.Certificate
		for _, c := range cas {
			cs = append(cs, c.Cert)
		}
		return bundle.EncodedLen(cs)
	}
	// credential is the size of tls.crt and tls.key R3's rotation writes
	// into piled, found by planning it without a budget.
	credential := func(clients bundle.Clients) int {
		d := bundle.Plan(piled, validRoot(t, f.r3, testNow), clients, testTimings, testNow)
		return len(d.CertPEM) + len(d.KeyPEM)
	}
	unknown := bundle.Client{Name: "ns/unknown", Unknown: true}

	tests := map[string]struct {
		gw      bundle.Gateway
		root    *certs.CA
		clients bundle.Clients
		budget  bundle.Budget
		// wantBundle is the bundle written; nil: the plan is refused.
		wantBundle []*certs.CA
		wantEvents []wantEvent
		// over: the bundle written is over the budget (no larger than found).
		over bool
	}{
		"a plan within the budget is written whole": {
			gw: piled, root: f.r3, clients: tracked(onR1, onRA, onRB),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA)},
			wantBundle: list(f.r3, f.r2, f.r1, rB, rA),
			wantEvents: []wantEvent{{reason: bundle.ReasonRootRotated}, {reason: bundle.ReasonBundleUpdated, contains: "5 roots"}},
		},
		"over it, the oldest root no client uses is trimmed first": {
			gw: piled, root: f.r3, clients: tracked(onR1, onRB),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA) - 1},
			wantBundle: list(f.r3, f.r2, f.r1, rB),
			wantEvents: []wantEvent{{reason: bundle.ReasonRootRotated}, {reason: bundle.ReasonRootTrimmed, warning: true, contains: `"root-a"`},
				{reason: bundle.ReasonBundleUpdated, contains: "4 roots"}},
		},
		"a root a client uses is never trimmed, however old: the next unused one goes": {
			gw: piled, root: f.r3, clients: tracked(onR1, onRA),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA) - 1},
			wantBundle: list(f.r3, f.r2, f.r1, rA),
			wantEvents: []wantEvent{{reason: bundle.ReasonRootRotated}, {reason: bundle.ReasonRootTrimmed, warning: true, contains: `"root-b"`},
				{reason: bundle.ReasonBundleUpdated, contains: "4 roots"}},
		},
		"as many as it takes: the previous root too, unused, but never the server's": {
			gw: piled, root: f.r3, clients: tracked(onRB),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r1, rB)},
			wantBundle: list(f.r3, f.r1, rB),
			wantEvents: []wantEvent{{reason: bundle.ReasonRootRotated}, {reason: bundle.ReasonRootTrimmed, warning: true, contains: `"root-a"`},
				{reason: bundle.ReasonRootTrimmed, warning: true, contains: `"root-2"`}, {reason: bundle.ReasonBundleUpdated, contains: "3 roots"}},
		},
		"tls.crt and tls.key count toward the data budget": {
			gw: piled, root: f.r3, clients: tracked(onR1, onRB),
			// Room for the credential and four roots, less than a fifth.
			budget:     bundle.Budget{Data: size(f.r3, f.r2, f.r1, rB) + credential(tracked(onR1, onRB)) + 64},
			wantBundle: list(f.r3, f.r2, f.r1, rB),
			wantEvents: []wantEvent{{reason: bundle.ReasonRootRotated}, {reason: bundle.ReasonRootTrimmed, warning: true, contains: "tls.crt, tls.key and ca.crt would be"},
				{reason: bundle.ReasonBundleUpdated, contains: "4 roots"}},
		},
		"when the roots in use do not fit, the plan is refused": {
			gw: piled, root: f.r3, clients: tracked(onR1, onRA, onRB, newClient(t, "ns/on-r2", f.r2, f.r2)),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA) - 1},
			wantEvents: []wantEvent{{reason: bundle.ReasonBundleTooLarge, warning: true, contains: "not trusted: ca.crt would be"}},
		},
		"without client tracking no root is known unused: refused rather than trimmed": {
			gw: piled, root: f.r3, clients: bundle.Clients{},
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA) - 1},
			wantEvents: []wantEvent{{reason: bundle.ReasonBundleTooLarge, warning: true, contains: "keeping every root"}},
		},
		"an unknown client may use any root: refused rather than trimmed": {
			gw: piled, root: f.r3, clients: tracked(onR1, unknown),
			budget:     bundle.Budget{Bundle: size(f.r3, f.r2, f.r1, rB, rA) - 1},
			wantEvents: []wantEvent{{reason: bundle.ReasonBundleTooLarge, warning: true}},
		},
		"a gateway found over the budget (an older dualca wrote it) is not frozen: a plan no larger is written": {
			gw:   gatewaySecret{server: f.r1, roots: list(f.r2, f.r1, rB, rA), root: f.r2, addedAt: testNow.Add(-10 * time.Minute), switchedAt: testNow.Add(-5 * h)}.gateway(),
			root: f.r2, clients: tracked(onR1, onRA, onRB),
			budget:     bundle.Budget{Bundle: size(f.r2, f.r1, rB, rA) - 1},
			wantBundle: list(f.r2, f.r1, rB, rA), over: true,
		},
		"a new gateway holds the current root alone and is never refused": {
			gw: bundle.Gateway{}, root: f.r3, clients: tracked(onR1),
			budget:     bundle.Budget{Bundle: 1, Data: 1},
			wantBundle: list(f.r3),
			wantEvents: []wantEvent{{reason: bundle.ReasonBundleUpdated, contains: "created"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := validRoot(t, tc.root, testNow)
			timings := testTimings
			timings.Budget = tc.budget
			d := bundle.Plan(tc.gw, root, tc.clients, timings, testNow)
			var got []string
			for _, e := range d.Events {
				got = append(got, e.Reason)
			}
			g.Expect(d.Events).To(HaveLen(len(tc.wantEvents)), "events %v", got)
			for i, e := range tc.wantEvents {
				g.Expect(d.Events[i].Reason).To(Equal(e.reason), "event %d of %v", i, got)
				g.Expect(d.Events[i].Warning).To(Equal(e.warning), "event %d is a Warning", i)
				g.Expect(d.Events[i].Message).To(ContainSubstring(e.contains), "event %d", i)
				g.Expect(d.Events[i].Message).NotTo(ContainSubstring("-----"), "no PEM in events")
			}
			if tc.wantBundle == nil {
				expectRefused(g, d, tc.gw, root)
				return
			}
			g.Expect(d.Refused).To(BeEmpty())
			expectConsistent(t, d, root, testNow)
			g.Expect(names(parsed(t, d.CAPEM))).To(Equal(caNames(tc.wantBundle)), "the roots in ca.crt")
			b := timings.Budget
			if b.Bundle > 1 && !tc.over {
				g.Expect(len(d.CAPEM)).To(BeNumerically("<=", b.Bundle), "ca.crt within its budget")
			}
			if b.Data > 1 {
				g.Expect(len(d.CAPEM)+len(d.CertPEM)+len(d.KeyPEM)).To(BeNumerically("<=", b.Data), "the data within its budget")
			}
			// What was trimmed stays out: deciding again on what was
			// written changes nothing and tells nothing.
			again := bundle.Plan(written(d), root, tc.clients, timings, testNow)
			g.Expect(again.CAPEM).To(Equal(d.CAPEM))
			g.Expect(again.CertPEM).To(Equal(d.CertPEM))
			g.Expect(again.Events).To(BeEmpty())
		})
	}
}

// expectRefused checks a refused decision: the gateway as found, byte for
// byte and state included, nothing renewed, the new root not trusted but
// remembered as read from the root Secret.
func expectRefused(g Gomega, d bundle.Decision, gw bundle.Gateway, root *bundle.Root) {
	g.Expect(d.Refused).NotTo(BeEmpty(), "the plan is refused")
	g.Expect(d.CAPEM).To(Equal(gw.CAPEM), "ca.crt as found")
	g.Expect(d.CertPEM).To(Equal(gw.CertPEM), "tls.crt as found")
	g.Expect(d.KeyPEM).To(Equal(gw.KeyPEM), "tls.key as found")
	g.Expect(maps.Equal(d.State.Annotations(), gw.State.Annotations())).To(BeTrue(), "the state as found")
	for _, c := range gw.Known {
		g.Expect(bundle.Contains(d.Known, c)).To(BeTrue(), "the roots remembered as found: %s", c.Subject.CommonName)
	}
	g.Expect(bundle.Contains(d.Known, root.Cert)).To(BeTrue(), "and the current root, read from the root Secret though kept out")
	for _, c := range d.Known {
		g.Expect(bundle.Contains(gw.Known, c) || c == root.Cert).To(BeTrue(), "nothing else remembered: %s", c.Subject.CommonName)
	}
	g.Expect(d.Renew).To(BeEmpty(), "no client moved to a root the gateway does not trust")
	g.Expect(bundle.Contains(d.Roots, root.Cert)).To(BeFalse(), "the new root is not trusted")
}

// A refusal that ends: once the clients holding the old roots have moved
// on (cert-manager renewed them from the new root on its own), the next
// decision trims what they left and trusts the new root; meanwhile the
// refusal is told at every decision, and its next check is when a root or
// a leaf it waits on expires.
func TestARefusedPlanFitsOnceTheRootsInUseDo(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	gw := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-time.Hour), switchedAt: testNow.Add(-5 * time.Hour)}.gateway()
	root := validRoot(t, f.r3, testNow)
	timings := testTimings
	timings.Budget = bundle.Budget{Bundle: bundle.EncodedLen([]*x509.Certificate{f.r3.Cert, f.r1.Cert}) + 16}
	onR2 := newClient(t, "ns/a", f.r2, f.r2)
	refused := bundle.Plan(gw, root, tracked(onR2), timings, testNow)
	expectRefused(g, refused, gw, root)
	g.Expect(refused.NextCheck).To(BeTemporally("==", onR2.Leaf.NotAfter().Add(time.Second)), "checked again when the leaf holding root-2 expires")
	again := bundle.Plan(gw, root, tracked(onR2), timings, testNow.Add(time.Second))
	g.Expect(again.Events).To(Equal(refused.Events), "told again, the same")

	onR3 := newClient(t, "ns/a", f.r3, f.r3)
	d := bundle.Plan(gw, root, tracked(onR3), timings, testNow)
	g.Expect(d.Refused).To(BeEmpty())
	g.Expect(names(parsed(t, d.CAPEM))).To(Equal([]string{"root-3", "root-1"}), "root-2, unused, trimmed; root-1 the server's")
	expectConsistent(t, d, root, testNow)
}

// The issuing Secret never moves to a root a refused plan left out of the
// gateway, however long the refusal lasts: cert-manager keeps signing
// with a root the gateway trusts.
func TestIssuingDoesNotMoveToARootARefusedPlanLeftOut(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	gw := gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-2 * time.Hour), switchedAt: testNow.Add(-time.Hour)}.gateway()
	root := validRoot(t, f.r3, testNow)
	timings := testTimings
	timings.Budget = bundle.Budget{Bundle: 1}
	d := bundle.Plan(gw, root, bundle.Clients{}, timings, testNow.Add(time.Hour))
	g.Expect(d.Refused).NotTo(BeEmpty())
	a := bundle.Issuing(bundle.IssuingFound{Exists: true, Root: validRoot(t, f.r2, testNow)}, d, root, testNow.Add(time.Hour))
	g.Expect(a.Write).To(BeFalse(), "the issuing Secret keeps root-2: %s", a.Reason)
	g.Expect(a.Holds).To(Equal(bundle.Fingerprint(f.r2.Cert)))
}
