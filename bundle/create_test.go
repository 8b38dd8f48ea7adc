package bundle_test

import (
	"testing"

	"github.com/dualca/dualca/bundle"
)

// TestPlanCreatesTheGateway checks the rule create (create.go): a missing
// gateway Secret is written at once, complete, serving and trusting the
// current root.
func TestPlanCreatesTheGateway(t *testing.T) {
	t.Parallel()
	f := newFixture(t)

	runPlan(t, map[string]planCase{
		"a missing gateway is created serving the root and trusting only it": {
			gw:              bundle.Gateway{},
			root:            f.r1,
			clients:         tracked(),
			wantServer:      f.r1,
			wantBundle:      list(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      []wantEvent{{reason: bundle.ReasonBundleUpdated, contains: "gateway Secret created"}},
			wantProgress:    &bundle.Progress{},
			wantRootAddedAt: testNow,
			wantSwitchedAt:  testNow,
		},
		"a missing gateway is created the same way when clients are not tracked": {
			gw:              bundle.Gateway{},
			root:            f.r1,
			clients:         bundle.Clients{},
			wantServer:      f.r1,
			wantBundle:      list(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      []wantEvent{{reason: bundle.ReasonBundleUpdated, contains: "gateway Secret created"}},
			wantRootAddedAt: testNow,
			wantSwitchedAt:  testNow,
		},
	})
}
