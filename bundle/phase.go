package bundle

import (
	"crypto/x509"
	"time"
)

// phaseOf is the phase recorded on the gateway Secret, which follows from
// the decision: Bundle
// while the gateway loads a new root (the propagation delay, or longer for
// a root not valid yet), Renewing while the server has not switched to it,
// Retiring while older roots remain, Steady when the current root is alone.
func phaseOf(server, root *x509.Certificate, roots int, addedAt time.Time, t Timings, now time.Time) Phase {
	switch {
	case Fingerprint(server) != Fingerprint(root) && (now.Sub(addedAt) < t.TrustPropagationDelay || notYetValid(root, now)):
		// Clients are not moved to a root before it is valid either.
		return PhaseBundle
	case Fingerprint(server) != Fingerprint(root):
		return PhaseRenewing
	case roots > 1:
		return PhaseRetiring
	default:
		return PhaseSteady
	}
}
