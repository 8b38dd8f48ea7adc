package bundle

import (
	"crypto/x509"
	"time"
)

// Rule: not yet valid.
//
// A root from an issuer whose clock runs ahead (within ClockSkew, which
// ValidateRoot allows) is trusted at once, but nothing is issued from it
// before its NotBefore, because verifiers check a root's validity too: the
// server does not switch to it (decideSwitch), no client is renewed onto it
// (renewals), and the phase stays Bundle (phaseOf) until then. NextCheck
// includes every bundled root's NotBefore, so the decision is made again at
// that moment.

// notYetValid reports whether root may not issue anything yet.
func notYetValid(root *x509.Certificate, now time.Time) bool {
	return now.Before(root.NotBefore)
}
