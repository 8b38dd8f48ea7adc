package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanWaitsForARootThatIsNotValidYet checks the rule not yet valid
// (notyetvalid.go): a root from an issuer whose clock runs ahead is trusted
// at once, but nothing is issued from it before its NotBefore.
func TestPlanWaitsForARootThatIsNotValidYet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	// Valid from three minutes on: within the clock skew ValidateRoot allows.
	ahead := certs.MustNew(t, "root-ahead", testNow.Add(3*time.Minute), testNow.Add(40*h), certs.Options{IsCA: true}, nil)

	runPlan(t, map[string]planCase{
		"a root from an issuer whose clock runs ahead is trusted at once, but no client moves to it before it is valid": {
			gw:              gatewaySecret{server: f.r1, roots: list(ahead, f.r1), root: ahead, addedAt: testNow.Add(-10 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			root:            ahead,
			clients:         tracked(newClient(t, "ns/a", f.r1, f.r1)),
			wantServer:      f.r1,
			wantBundle:      list(ahead, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   ahead.Cert.NotBefore,
		},
		"the server does not move to a root that is not valid yet, even with every client on it": {
			gw: gatewaySecret{server: f.r1, roots: list(ahead, f.r1), root: ahead, addedAt: testNow.Add(-10 * time.Minute),
				switchedAt: testNow.Add(-2 * h), readyAt: testNow.Add(-5 * time.Minute)}.gateway(),
			root:            ahead,
			clients:         tracked(newClient(t, "ns/a", ahead, ahead)),
			wantServer:      f.r1,
			wantBundle:      list(ahead, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Minute),
			wantSwitchedAt:  testNow.Add(-2 * h),
			wantNextCheck:   ahead.Cert.NotBefore,
		},
	})
}
