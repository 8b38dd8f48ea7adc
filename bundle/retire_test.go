package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanRetiresOldRoots checks the rule retire (retire.go): a root leaves
// only when expired, or unused once the server has switched and settled.
func TestPlanRetiresOldRoots(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	switched := func(roots []*certs.CA, switchedAt time.Duration) bundle.Gateway {
		return gatewaySecret{server: f.r2, roots: roots, root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(switchedAt)}.gateway()
	}
	onR2 := newClient(t, "ns/a", f.r2, f.r2, f.r1)
	onlyR2 := newClient(t, "ns/b", f.r2, f.r2)

	runPlan(t, map[string]planCase{
		"the old root stays for the propagation delay after the switch": {
			gw:              switched(list(f.r2, f.r1), -59*time.Second),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-59 * time.Second),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"the old root is retired once the propagation delay after the switch has passed": {
			gw:         switched(list(f.r2, f.r1), -time.Minute),
			root:       f.r2,
			clients:    tracked(onR2, onlyR2),
			wantServer: f.r2,
			wantBundle: list(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-1"`},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-time.Minute),
		},
		"an old root that a client's unexpired leaf chains to is never retired, even long after the switch": {
			gw:              switched(list(f.r2, f.r1), -50*time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, newClient(t, "ns/b", f.r1, f.r2, f.r1)),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
		},
		"an expired old root is retired while the current root and the server's stay": {
			gw:         gatewaySecret{server: f.r1, roots: list(f.r2, f.r1, f.r0), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    tracked(newClient(t, "ns/a", f.r1, f.r1)),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-0"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"an expired old root is retired even though a client's leaf still chains to it": {
			gw:         gatewaySecret{server: f.r1, roots: list(f.r2, f.r1, f.r0), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    tracked(newClient(t, "ns/a", f.r1, f.r1), newClient(t, "ns/old", f.r0, f.r0)),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: "expired"},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"untracked clients: an old root stays until it expires, long after the switch": {
			gw:              switched(list(f.r2, f.r1), -50*time.Minute),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
			wantNextCheck:   f.r1.Cert.NotAfter.Add(time.Second),
		},
		"untracked clients: an old root is retired when it has expired": {
			gw:         switched(list(f.r2, f.r0), -50*time.Minute),
			root:       f.r2,
			clients:    bundle.Clients{},
			wantServer: f.r2,
			wantBundle: list(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRetired, contains: "expired"},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
		},
	})
}
