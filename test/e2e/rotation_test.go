package e2e

import (
	"crypto/x509"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// clients is the size of each scenario's fleet.
const clients = 20

// pause waits a random moment, so rotations land at different points of
// whatever dualca, cert-manager and the clients are doing.
func pause(min, max time.Duration) {
	<-time.After(min + rand.N(max-min))
}

// TestZeroDowntimeRotationsFailNoHandshake: three forced rotations at random
// moments, the second while the first is still moving clients; not one
// handshake fails, and each rotation ends with every client on the newest
// root, the server on it and the old roots retired.
func TestZeroDowntimeRotationsFailNoHandshake(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(false))
	s.startTraffic()

	pause(200*time.Millisecond, 2*time.Second)
	r2 := s.rotate()
	// The next rotation comes while clients are moving to R2.
	s.waitPhase(r2, bundle.PhaseRenewing)
	pause(0, 500*time.Millisecond)
	r3 := s.rotate()
	s.converged(r3, false, 60*time.Second)
	s.logPhases("rotation 2 (overlapped by 3)", r2)
	s.logPhases("rotation 3 (overlapping)", r3)

	pause(200*time.Millisecond, 2*time.Second)
	r4 := s.rotate()
	s.converged(r4, false, 60*time.Second)
	s.logPhases("rotation 4", r4)

	attempts, failures := s.report("zero-downtime, 3 rotations")
	s.g.Expect(attempts).To(BeNumerically(">", 20*clients), "the clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no client: %v", s.gateway.Stats().Errors)
	versions, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "every gateway version trusted every root in use")
	t.Logf("gateway versions checked: %d", versions)
}

// TestLegacyRotationsCutClientsOffAndConverge: the same script with the
// legacy strategy. The failures it causes are the behaviour reproduced:
// counted and reported, and everything converges all the same.
func TestLegacyRotationsCutClientsOffAndConverge(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(true))
	s.startTraffic()

	pause(200*time.Millisecond, 2*time.Second)
	s.rotate()
	pause(0, 500*time.Millisecond)
	r3 := s.rotate()
	s.converged(r3, true, 60*time.Second)
	pause(200*time.Millisecond, 2*time.Second)
	r4 := s.rotate()
	s.converged(r4, true, 60*time.Second)

	attempts, failures := s.report("legacy, 3 rotations")
	s.g.Expect(attempts).To(BeNumerically(">", 20*clients))
	s.g.Expect(failures).To(BeNumerically(">", 0), "the legacy strategy cuts clients off at each rotation")
	s.g.Expect(s.dualca.renewals()).To(HaveKeyWithValue("triggered", BeNumerically(">=", clients)),
		"client Secrets were deleted for re-issuance")
}

// TestFlippingTheStrategyMidRotationConverges: the flag flipped during a
// rotation, both ways. Back in zero-downtime, no root a client still uses
// is ever missing from the gateway.
func TestFlippingTheStrategyMidRotationConverges(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(false))
	s.startTraffic()

	r2 := s.rotate()
	s.waitPhase(r2, bundle.PhaseRenewing)
	s.startDualca(s.options(true)) // zero-downtime -> legacy mid-rotation
	s.converged(r2, true, 60*time.Second)

	// legacy -> zero-downtime right after a rotation, while the legacy
	// strategy has clients of the old root still out there.
	r3 := s.rotate()
	s.startDualca(s.options(false))
	s.converged(r3, false, 60*time.Second)
	s.logPhases("rotation 3 (adopted from legacy)", r3)

	s.report("flips zero-downtime -> legacy -> zero-downtime")
	versions, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "no zero-downtime version of the gateway lacked a root in use")
	t.Logf("gateway versions checked: %d", versions)
}

func (s *scenario) logPhases(what string, root *x509.Certificate) {
	b, r, sw, st := s.watch.phases(root)
	s.t.Logf("%s: root changed -> in bundle %v, renewing %v, server switched %v, steady %v", what, b, r, sw, st)
}
