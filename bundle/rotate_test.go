package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
)

// TestPlanStartsRotations checks the rule rotate (rotate.go): a new root is
// trusted next to every root still in use, and its wait starts now.
func TestPlanStartsRotations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	onR1 := func(name string) bundle.Client { return newClient(t, name, f.r1, f.r1) }

	runPlan(t, map[string]planCase{
		"the same root again changes nothing": {
			gw:              gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r1,
			clients:         tracked(onR1("ns/a")),
			wantServer:      f.r1,
			wantBundle:      list(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: testNow.Add(-2 * h),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"a new root is trusted next to the old one, newest first, while the server keeps the old one": {
			gw:         gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    tracked(onR1("ns/b"), onR1("ns/a")),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-2"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: testNow,
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"a rotation during a rotation trusts the newest root next to every root in use and restarts the clock": {
			gw:   gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root: f.r3,
			clients: tracked(
				newClient(t, "ns/a", f.r2, f.r2, f.r1),
				onR1("ns/b"),
			),
			wantServer: f.r1,
			wantBundle: list(f.r3, f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-3"`},
				{reason: bundle.ReasonBundleUpdated, contains: "3 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: testNow,
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Minute),
		},
	})
}

// TestPlanKeepsItsRecordedTimesHonest checks the clock of the rule rotate
// (rotate.go): recorded times are whole seconds rounded up, and a clock that
// went back never stretches a wait.
func TestPlanKeepsItsRecordedTimesHonest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour

	runPlan(t, map[string]planCase{
		"a clock that went back before RootAddedAt starts the propagation delay from now, not from the future": {
			gw:              gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(10 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         tracked(newClient(t, "ns/a", f.r1, f.r1)),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow,
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"a clock that went back before the switch starts the wait before retiring from now": {
			gw:              gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(10 * time.Minute)}.gateway(),
			root:            f.r2,
			clients:         tracked(newClient(t, "ns/a", f.r2, f.r2)),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow,
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"times are recorded in whole seconds, rounded up so that no wait is shortened": {
			gw:         gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    tracked(),
			now:        testNow.Add(999 * time.Millisecond),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRotated},
				{reason: bundle.ReasonBundleUpdated},
			},
			wantProgress:    &bundle.Progress{},
			wantRootAddedAt: testNow.Add(time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second + time.Minute),
		},
	})
}
