package bundle_test

import (
	"bytes"
	"maps"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// The tests of Plan are one file per rule, as the product code is
// (create_test.go, rotate_test.go, switch_test.go, ...): each case is a
// gateway Secret as found, a root, the clients and a time, and what the
// decision must be (runPlan, helpers_test.go). This file holds what is
// about Plan as a whole; generated histories live in model_test.go.

// TestPlanIsIdempotent plans again on the Secret a decision produced, its
// annotations round-tripped through their text form as on the API server:
// nothing may change and nothing may be reported (invariant 6).
func TestPlanIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	onR1 := newClient(t, "ns/a", f.r1, f.r1)
	onR2 := newClient(t, "ns/b", f.r2, f.r2, f.r1)
	steady := gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}
	renewing := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-2 * h)}
	retiring := gatewaySecret{server: f.r2, roots: list(f.r2, f.r1, f.r0), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-50 * time.Minute)}
	garbage, replaced := renewing, renewing
	garbage.caPEM = []byte("garbage")
	replaced.certPEM, replaced.keyPEM = f.foreign.CertPEM, f.foreign.KeyPEM
	clockBack := renewing
	clockBack.addedAt = testNow.Add(time.Hour)

	tests := map[string]struct {
		gw      bundle.Gateway
		root    *certs.CA
		clients bundle.Clients
		now     time.Time
	}{
		"a created gateway": {gw: bundle.Gateway{}, root: f.r1, clients: tracked(onR1), now: testNow},
		"a steady gateway":  {gw: steady.gateway(), root: f.r1, clients: tracked(onR1), now: testNow},
		"a rotation":        {gw: steady.gateway(), root: f.r2, clients: tracked(onR1, onR2), now: testNow},
		"a rotation at a time with a fraction of a second": {gw: steady.gateway(), root: f.r2, clients: tracked(onR1), now: testNow.Add(500 * time.Millisecond)},
		"clients due for renewal":                          {gw: renewing.gateway(), root: f.r2, clients: tracked(onR1, onR2), now: testNow.Add(-59 * time.Minute)},
		"a switch when every client is ready":              {gw: renewing.gateway(), root: f.r2, clients: tracked(onR2), now: testNow.Add(-59 * time.Minute)},
		"a switch forced by the grace period":              {gw: renewing.gateway(), root: f.r2, clients: tracked(onR1, onR2), now: testNow},
		"an untracked switch at the grace period":          {gw: renewing.gateway(), root: f.r2, clients: bundle.Clients{}, now: testNow},
		"retirement of an unused and an expired root":      {gw: retiring.gateway(), root: f.r2, clients: tracked(onR2), now: testNow},
		"a repaired ca.crt":                                {gw: garbage.gateway(), root: f.r2, clients: tracked(onR1), now: testNow.Add(-59 * time.Minute)},
		"a repaired server credential":                     {gw: replaced.gateway(), root: f.r2, clients: tracked(onR1), now: testNow.Add(-59 * time.Minute)},
		"a clock that went back":                           {gw: clockBack.gateway(), root: f.r2, clients: tracked(onR1), now: testNow},
		"an adopted legacy copy":                           {gw: legacyCopy(t, f.r1), root: f.r2, clients: tracked(onR1), now: testNow},
		"an overlapping rotation":                          {gw: renewing.gateway(), root: f.r3, clients: tracked(onR1, onR2), now: testNow},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := validRoot(t, tc.root, tc.now)
			first := bundle.Plan(tc.gw, root, tc.clients, testTimings, tc.now)
			again := bundle.Plan(written(first), root, tc.clients, testTimings, tc.now)
			g.Expect(again.Events).To(BeEmpty(), "a second decision reports nothing")
			g.Expect(bytes.Equal(again.CertPEM, first.CertPEM)).To(BeTrue(), "tls.crt is the same")
			g.Expect(bytes.Equal(again.KeyPEM, first.KeyPEM)).To(BeTrue(), "tls.key is the same")
			g.Expect(bytes.Equal(again.CAPEM, first.CAPEM)).To(BeTrue(), "ca.crt is the same")
			g.Expect(maps.Equal(again.State.Annotations(), first.State.Annotations())).To(BeTrue(),
				"annotations are the same: %v then %v", first.State.Annotations(), again.State.Annotations())
			g.Expect(again.Renew).To(Equal(first.Renew), "the same clients are due")
			g.Expect(again.NextCheck).To(BeTemporally("==", first.NextCheck))
		})
	}
}

// TestPlanWalksARotationThroughItsPhases follows one rotation from the
// creation of the gateway to the retirement of the old root, each decision
// written before the next is made.
func TestPlanWalksARotationThroughItsPhases(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	a1, b1 := newClient(t, "ns/a", f.r1, f.r1), newClient(t, "ns/b", f.r1, f.r1)
	a2, b2 := newClient(t, "ns/a", f.r2, f.r2), newClient(t, "ns/b", f.r2, f.r2, f.r1)
	m := time.Minute

	steps := []struct {
		what    string
		at      time.Duration
		root    *certs.CA
		clients []bundle.Client
		server  *certs.CA
		bundle  []*certs.CA
		phase   bundle.Phase
		events  []string
		renew   []string
	}{
		{"the gateway is created", 0, f.r1, []bundle.Client{a1, b1}, f.r1, list(f.r1), bundle.PhaseSteady, []string{bundle.ReasonBundleUpdated}, nil},
		{"nothing happens", 5 * m, f.r1, []bundle.Client{a1, b1}, f.r1, list(f.r1), bundle.PhaseSteady, nil, nil},
		{"the root rotates", 10 * m, f.r2, []bundle.Client{a1, b1}, f.r1, list(f.r2, f.r1), bundle.PhaseBundle, []string{bundle.ReasonRootRotated, bundle.ReasonBundleUpdated}, nil},
		{"the gateway loads the bundle", 10*m + 59*time.Second, f.r2, []bundle.Client{a1, b1}, f.r1, list(f.r2, f.r1), bundle.PhaseBundle, nil, nil},
		{"the clients are due", 11 * m, f.r2, []bundle.Client{a1, b1}, f.r1, list(f.r2, f.r1), bundle.PhaseRenewing, nil, []string{"ns/a", "ns/b"}},
		{"one client has renewed", 12 * m, f.r2, []bundle.Client{a2, b1}, f.r1, list(f.r2, f.r1), bundle.PhaseRenewing, nil, []string{"ns/b"}},
		{"every client has renewed: they get time to load it", 13 * m, f.r2, []bundle.Client{a2, b2}, f.r1, list(f.r2, f.r1), bundle.PhaseRenewing, nil, nil},
		{"the server switches", 14 * m, f.r2, []bundle.Client{a2, b2}, f.r2, list(f.r2, f.r1), bundle.PhaseRetiring, []string{bundle.ReasonServerSwitched}, nil},
		{"the clients reload", 14*m + 59*time.Second, f.r2, []bundle.Client{a2, b2}, f.r2, list(f.r2, f.r1), bundle.PhaseRetiring, nil, nil},
		{"the old root is retired", 15 * m, f.r2, []bundle.Client{a2, b2}, f.r2, list(f.r2), bundle.PhaseSteady, []string{bundle.ReasonRootRetired, bundle.ReasonBundleUpdated}, nil},
		{"nothing more happens", 60 * m, f.r2, []bundle.Client{a2, b2}, f.r2, list(f.r2), bundle.PhaseSteady, nil, nil},
	}
	gw := bundle.Gateway{}
	for _, s := range steps {
		now := testNow.Add(s.at)
		root := validRoot(t, s.root, now)
		d := bundle.Plan(gw, root, tracked(s.clients...), testTimings, now)
		expectConsistent(t, d, root, now)
		var reasons []string
		for _, e := range d.Events {
			g.Expect(e.Warning).To(BeFalse(), "%s: no Warning in a smooth rotation, got %+v", s.what, e)
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(Equal(s.events), "%s: events", s.what)
		g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(s.server.Cert)), "%s: server", s.what)
		for _, c := range s.clients {
			for _, trusted := range c.CA {
				if bundle.Fingerprint(trusted) == d.State.Server || bundle.Fingerprint(trusted) == root.Fingerprint {
					g.Expect(verifyServer(d.CertPEM, trusted, now)).To(Succeed(), "%s: %s verifies the server", s.what, c.Name)
				}
			}
		}
		g.Expect(names(parsed(t, d.CAPEM))).To(Equal(caNames(s.bundle)), "%s: bundle", s.what)
		g.Expect(d.State.Phase).To(Equal(s.phase), "%s: phase", s.what)
		g.Expect(d.Renew).To(Equal(s.renew), "%s: renew", s.what)
		gw = written(d)
	}
	g.Expect(strings.Join(gw.State.BundleRoots, ",")).To(Equal(bundle.Fingerprint(f.r2.Cert)))
}
