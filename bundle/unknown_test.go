package bundle_test

import (
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// unknownClient is a selected client whose credential dualca cannot see:
// the CertificateRequest of its current revision was garbage-collected
// and dualca has no memory of it.
func unknownClient(name string) bundle.Client {
	return bundle.Client{Name: name, Unknown: true}
}

// TestPlanTreatsAnUnknownClientFailSafe: an unknown client may use any root
// and is on none. So it keeps every unexpired root in the bundle, holds the
// switch until the grace period, and is due for renewal, while an expired
// root still leaves.
func TestPlanTreatsAnUnknownClientFailSafe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	switched := func(roots []*certs.CA, switchedAt time.Duration) bundle.Gateway {
		return gatewaySecret{server: f.r2, roots: roots, root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(switchedAt)}.gateway()
	}
	renewing := func(addedAt, readyAgo time.Duration) bundle.Gateway {
		gs := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(addedAt), switchedAt: testNow.Add(-2 * h)}
		if readyAgo != 0 {
			gs.readyAt = testNow.Add(-readyAgo)
		}
		return gs.gateway()
	}
	onR2 := newClient(t, "ns/a", f.r2, f.r2, f.r1)
	onlyR2 := newClient(t, "ns/b", f.r2, f.r2)
	hidden := unknownClient("ns/hidden")

	runPlan(t, map[string]planCase{
		"an unknown client keeps an old root that every known client has left, long after the switch": {
			gw:              switched(list(f.r2, f.r1), -50*time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2, hidden),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 2, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
			// Nothing but a leaf expiring changes this by time alone.
			wantNextCheck: onR2.Leaf.NotAfter().Add(time.Second),
		},
		"the same old root is retired once the client is back in view on the new root": {
			gw:         switched(list(f.r2, f.r1), -50*time.Minute),
			root:       f.r2,
			clients:    tracked(onR2, onlyR2, newClient(t, "ns/hidden", f.r2, f.r2)),
			wantServer: f.r2,
			wantBundle: list(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-1"`},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantProgress:    &bundle.Progress{Renewed: 3},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
		},
		"an old root kept for an unknown client is due to leave when it expires: the next check is then": {
			gw:              switched(list(f.r2, f.soon), -50*time.Minute),
			root:            f.r2,
			clients:         tracked(onlyR2, hidden),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.soon),
			wantPhase:       bundle.PhaseRetiring,
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
			wantNextCheck:   f.soon.Cert.NotAfter.Add(time.Second),
		},
		"an old root kept for an unknown client leaves once it has expired": {
			gw:         switched(list(f.r2, f.soon), -50*time.Minute),
			root:       f.r2,
			clients:    tracked(onlyR2, hidden),
			now:        f.soon.Cert.NotAfter.Add(time.Second),
			wantServer: f.r2,
			wantBundle: list(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: "expired"},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
		},
		"an expired root leaves the bundle before the switch, an unknown client selected or not": {
			gw:         gatewaySecret{server: f.r1, roots: list(f.r2, f.r1, f.r0), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    tracked(newClient(t, "ns/a", f.r1, f.r1), hidden),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-0"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"an unknown client holds the switch back though every known client has been ready for long": {
			gw:              renewing(-10*time.Minute, 5*time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2, hidden),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 2, Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			// The grace period is what ends its hold.
			wantNextCheck: testNow.Add(50 * time.Minute),
		},
		"an unknown client still holds the switch one second before the grace period ends": {
			gw:              renewing(-h+time.Second, 0),
			root:            f.r2,
			clients:         tracked(onR2, hidden),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h + time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"when the grace period ends an unknown client is among those the forced switch's Warning counts": {
			gw:              renewing(-h, 0),
			root:            f.r2,
			clients:         tracked(onR2, hidden),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "with 1 clients not on the new root"}},
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow,
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"within the propagation delay an unknown client is pending but not due yet, like any other": {
			gw:              renewing(-59*time.Second, 0),
			root:            f.r2,
			clients:         tracked(onR2, hidden),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-59 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"an unknown client whose last renewal failed counts as failed, and is due again": {
			gw:              renewing(-10*time.Minute, 0),
			root:            f.r2,
			clients:         tracked(onR2, failedClient(hidden)),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/hidden"},
			wantProgress:    &bundle.Progress{Renewed: 1, Failed: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
	})
}

// TestAnUnknownClientUsesEveryRootAndIsOnNone asks Uses, On, Using and
// CountProgress directly, with the checks remembered and without: an
// unknown client uses every root, even one it could not have a leaf of, and
// is on none, even when a stale leaf on the root came with it.
func TestAnUnknownClientUsesEveryRootAndIsOnNone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A stale view: the leaf and ca.crt of a revision dualca no longer sees,
	// on the new root. The client may load anything else by now.
	stale := newClient(t, "ns/stale", f.r2, f.r2)
	stale.Unknown = true
	tests := map[string]struct {
		items        []bundle.Client
		root         *x509.Certificate
		wantUsing    int
		wantProgress bundle.Progress
	}{
		"an unknown client uses the old root and is pending on the new": {
			items: []bundle.Client{unknownClient("ns/a")}, root: f.r1.Cert, wantUsing: 1, wantProgress: bundle.Progress{Pending: 1}},
		"an unknown client uses even a foreign CA: nothing says which root it is on": {
			items: []bundle.Client{unknownClient("ns/a")}, root: f.foreign.Cert, wantUsing: 1, wantProgress: bundle.Progress{Pending: 1}},
		"an unknown client is counted apart from a missing Secret, which uses nothing": {
			items: []bundle.Client{{Name: "ns/missing"}, unknownClient("ns/a"), {Name: "ns/missing-too"}}, root: f.r1.Cert, wantUsing: 1,
			wantProgress: bundle.Progress{Pending: 3}},
		"an unknown client with a stale view of a leaf on the root is still on none": {
			items: []bundle.Client{stale}, root: f.r2.Cert, wantUsing: 1, wantProgress: bundle.Progress{Pending: 1}},
		"an unknown client whose renewal failed counts as failed": {
			items: []bundle.Client{failedClient(unknownClient("ns/a"))}, root: f.r2.Cert, wantUsing: 1, wantProgress: bundle.Progress{Failed: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			for _, sigs := range []*bundle.Memory{nil, bundle.NewMemory()} {
				clients := bundle.Clients{Tracked: true, Items: tc.items, Memory: sigs}
				remembered := sigs != nil
				g.Expect(clients.Using(tc.root, testNow)).To(Equal(tc.wantUsing), "using, remembered %v", remembered)
				g.Expect(bundle.CountProgress(clients, tc.root, testNow)).To(Equal(tc.wantProgress), "progress, remembered %v", remembered)
				g.Expect(clients.Using(tc.root, testNow)).To(Equal(tc.wantUsing), "using asked again, remembered %v", remembered)
			}
			for _, c := range tc.items {
				if c.Unknown {
					g.Expect(c.Uses(tc.root, testNow)).To(BeTrue(), "%s uses the root", c.Name)
					g.Expect(c.On(tc.root, testNow)).To(BeFalse(), "%s is on the root", c.Name)
					g.Expect(c.Uses(nil, testNow)).To(BeFalse(), "no root is no root to use")
				}
			}
		})
	}
}
