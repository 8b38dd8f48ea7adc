package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
)

// TestPlanSwitchesTheServer checks the rule switch (switch.go): the server
// moves to the current root when every client is ready, or forced with a
// Warning.
func TestPlanSwitchesTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	renewing := func(addedAt time.Duration) bundle.Gateway {
		return gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(addedAt), switchedAt: testNow.Add(-2 * h)}.gateway()
	}
	// ready is renewing with every client seen on the new root readyAgo.
	ready := func(addedAt, readyAgo time.Duration) bundle.Gateway {
		return gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(addedAt), switchedAt: testNow.Add(-2 * h),
			readyAt: testNow.Add(-readyAgo)}.gateway()
	}
	onR2 := newClient(t, "ns/a", f.r2, f.r2, f.r1)
	onlyR2 := newClient(t, "ns/b", f.r2, f.r2)
	pending := newClient(t, "ns/b", f.r1, f.r1)
	failed := failedClient(newClient(t, "ns/c", f.r1, f.r1))

	runPlan(t, map[string]planCase{
		"the server switches when every client has been on the new root for the propagation delay": {
			gw:              ready(-10*time.Minute, time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitched, contains: "all 2 clients"}},
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow,
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"clients just seen on the new root get the propagation delay to load it": {
			gw:              renewing(-10 * time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"one second before the clients' propagation delay ends the server still waits": {
			gw:              ready(-10*time.Minute, 59*time.Second),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"a client that falls back off the new root resets the clients' wait": {
			gw:              ready(-10*time.Minute, 5*time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, pending),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"the server waits for the propagation delay even when every client is ready": {
			gw:              renewing(-59 * time.Second),
			root:            f.r2,
			clients:         tracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: testNow.Add(-59 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"a client whose leaf chains to the new root but whose ca.crt lacks it holds the switch back": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, newClient(t, "ns/b", f.r2, f.r1)),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"a client whose ca.crt holds the new root but whose leaf is still the old one holds the switch back": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, newClient(t, "ns/b", f.r1, f.r2, f.r1)),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"a client whose renewal failed holds the switch back and counts as failed": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         tracked(onR2, failed),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Failed: 1},
			wantRootAddedAt: testNow.Add(-time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"one second before the grace period ends the server still waits for the clients": {
			gw:              renewing(-h + time.Second),
			root:            f.r2,
			clients:         tracked(onR2, pending, failed),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b", "ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1, Failed: 1},
			wantRootAddedAt: testNow.Add(-h + time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"when the grace period ends with clients left behind the switch is forced with a Warning naming how many": {
			gw:              renewing(-h),
			root:            f.r2,
			clients:         tracked(onR2, pending, failed),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "with 2 clients not on the new root"}},
			wantRenew:       []string{"ns/b", "ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1, Failed: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow,
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"untracked clients: after the propagation delay the server still waits for the grace period": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRootAddedAt: testNow.Add(-time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(59 * time.Minute),
		},
		"untracked clients: the server switches when the grace period ends, without a Warning": {
			gw:              renewing(-h),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitched, contains: "not tracked"}},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow,
		},
		"a server root expiring within the propagation delay plus clock skew forces the switch, even before the delay": {
			gw:              gatewaySecret{server: f.brink, roots: list(f.r2, f.brink), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         tracked(newClient(t, "ns/a", f.brink, f.brink)),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.brink),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "expires at"}},
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow,
		},
		"untracked clients: a server root about to expire forces the switch too": {
			gw:              gatewaySecret{server: f.brink, roots: list(f.r2, f.brink), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.brink),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []wantEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "expires at"}},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow,
		},
		"a server root expiring exactly at the margin does not force the switch yet": {
			gw:              gatewaySecret{server: f.edge, roots: list(f.r2, f.edge), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         tracked(newClient(t, "ns/a", f.edge, f.edge)),
			wantServer:      f.edge,
			wantBundle:      list(f.r2, f.edge),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
	})
}
