package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
)

// TestPlanRenewsClients checks the rule renew (renew.go): clients are due
// once the gateway has had the propagation delay to load the new root.
func TestPlanRenewsClients(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	onR1 := func(name string) bundle.Client { return newClient(t, name, f.r1, f.r1) }

	runPlan(t, map[string]planCase{
		"within the propagation delay no client is due yet": {
			gw:              gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-59 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         tracked(onR1("ns/b"), onR1("ns/a")),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: testNow.Add(-59 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(time.Second),
		},
		"after the propagation delay exactly the clients not on the new root are due, sorted": {
			gw:   gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root: f.r2,
			clients: tracked(
				onR1("ns/zeta"),
				newClient(t, "ns/mid", f.r2, f.r2, f.r1),
				onR1("ns/alpha"),
				bundle.Client{Name: "ns/gone"}, // its Secret is missing
			),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/alpha", "ns/gone", "ns/zeta"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 3},
			wantRootAddedAt: testNow.Add(-time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   testNow.Add(59 * time.Minute),
		},
	})
}
