package bundle

import (
	"bytes"
	"crypto/x509"
	"time"
)

// Rule: issuing.
//
// cert-manager's CA Issuer signs with the key of the Secret it names. Named
// at the root Secret, it signs with a new root the moment cert-manager
// rotates it, so a client issued then (a natural renewal, an issuance that
// was in flight) is handed a leaf the gateway does not trust yet: that
// client is cut off until the gateway loads the new bundle. Named at
// dualca's issuing Secret instead, the Issuer signs with a root the
// gateway trusts: the issuing Secret moves to the current root only once
// the gateway has had the propagation delay to load it (the phase is past
// Bundle), the moment dualca starts moving clients to it, and not while
// the operator holds the rotation. Holding a root the gateway's bundle no
// longer holds (or an expired one), it moves at once: it would sign leaves
// nobody accepts.
//
// Provenance: the issuing Secret is written only with the root Secret's own
// tls.crt, tls.key and ca.crt, read and validated in the same reconcile,
// and nothing found in it is copied anywhere. Found holding a CA dualca
// never read from the root Secret, or a key that is not its certificate's,
// it is overwritten with the current root at once and told as tampering:
// kept, that CA would sign clients. The root's key goes nowhere it was not:
// the issuing Secret lives in the root Secret's namespace (flags refuse
// another).
//
// The legacy strategy reproduces an Issuer that reads the root Secret: the
// issuing Secret is a plain copy of it, moved at once.

// IssuingAction is what the issuing rule decides.
type IssuingAction struct {
	// Write: the issuing Secret must hold the current root now.
	Write bool
	// Tampered: it held what dualca never writes there (a CA it never read
	// from the root Secret, or an unusable credential).
	Tampered bool
	// Holds is the fingerprint of the root it holds once the action is
	// done; "" when it holds none (absent, waiting to be created).
	Holds string
	// Reason says why, for an event and a log line.
	Reason string
}

// IssuingFound is the issuing Secret as found.
type IssuingFound struct {
	// Exists: the Secret exists.
	Exists bool
	// Root is its content validated as a root CA Secret; nil when absent
	// or when Invalid says why it cannot be used.
	Root *Root
	// Invalid is why its content is not a usable CA; nil otherwise.
	Invalid error
}

// ReadIssuing reads the issuing Secret's fields as found. Its certificate
// is validated within its own validity period, so that a root dualca wrote
// there that has expired, or is not valid yet by a clock that went back,
// reads as that root (the rule decides what its dates mean), and only a
// credential that is no CA at all, or a key that is not its certificate's,
// reads as unusable.
func ReadIssuing(certPEM, keyPEM, caPEM []byte, now time.Time) IssuingFound {
	at := now
	if certs, err := ParseCertificates("tls.crt", certPEM); err == nil {
		switch c := certs[0]; {
		case at.After(c.NotAfter):
			at = c.NotAfter
		case at.Before(c.NotBefore):
			at = c.NotBefore
		}
	}
	root, err := ValidateRoot(certPEM, keyPEM, caPEM, at)
	if err != nil {
		return IssuingFound{Exists: true, Invalid: err}
	}
	return IssuingFound{Exists: true, Root: root}
}

// Issuing decides what the issuing Secret holds after decision d, made from
// the current root. Pure, like Plan, so the model test can check that no
// client is ever issued from a root the gateway was not given time to trust.
func Issuing(found IssuingFound, d Decision, root *Root, now time.Time) IssuingAction {
	current := IssuingAction{Write: true, Holds: root.Fingerprint}
	held := found.Root
	switch {
	case held != nil && now.After(held.Cert.NotAfter):
		current.Reason = "the issuing secret's root " + describe(held.Cert) + " has expired"
		return current
	case found.Exists && held == nil:
		current.Tampered = true
		current.Reason = "the issuing secret holds no usable CA (" + errString(found.Invalid) + "); root " + describe(root.Cert) + " written over it"
		return current
	case held != nil && held.Fingerprint != root.Fingerprint && !Contains(d.Known, held.Cert):
		// The current root is read from the root Secret whatever the
		// record knows: a refused decision's (budget.go) knows the roots
		// of the gateway as it was, and without this the issuing Secret
		// holding the current root was written over, with a tampering
		// Warning, at every reconcile of a refusal.
		current.Tampered = true
		current.Reason = "the issuing secret held CA " + describe(held.Cert) + ", never read from the root Secret; root " + describe(root.Cert) + " written over it"
		return current
	case held != nil && held.Fingerprint == root.Fingerprint:
		if sameCredential(held, root) {
			return IssuingAction{Holds: root.Fingerprint}
		}
		current.Reason = "the issuing secret holds root " + describe(root.Cert) + " in other bytes than the root Secret"
		return current
	case d.State.Strategy == StrategyLegacy:
		current.Reason = "legacy strategy: the issuing secret is a copy of the root Secret"
		return current
	}
	wait := IssuingAction{Reason: "waiting for the gateway to trust root " + describe(root.Cert) + " for the propagation delay"}
	if held != nil {
		wait.Holds = held.Fingerprint
		wait.Reason = "keeps root " + describe(held.Cert) + " while " + wait.Reason
	}
	switch {
	case held != nil && !Contains(d.Roots, held.Cert):
		// Paused or not: it would sign leaves the gateway refuses.
		current.Reason = "the issuing secret's root " + describe(held.Cert) + " is no longer trusted by the gateway"
		return current
	case !d.State.PausedAt.IsZero():
		wait.Reason += " (rotation paused)"
		return wait
	case gatewayTrusts(d, root.Cert, now):
		current.Reason = "the gateway has trusted root " + describe(root.Cert) + " for the propagation delay"
		return current
	}
	return wait
}

// gatewayTrusts reports whether the zero-downtime decision d has the
// gateway trust root past the wait for it to load it: the bundle holds it
// (every plan's does; a refused one, budget.go, keeps the gateway as it
// was, without it), the phase has left Bundle, and root is valid (the
// phase leaves Bundle early for a root the server already presents).
func gatewayTrusts(d Decision, root *x509.Certificate, now time.Time) bool {
	return d.Refused == "" && Contains(d.Roots, root) && d.State.Phase != PhaseBundle && !notYetValid(root, now)
}

// sameCredential reports whether a and b hold the same bytes in tls.crt,
// tls.key and ca.crt.
func sameCredential(a, b *Root) bool {
	return bytes.Equal(a.CertPEM, b.CertPEM) && bytes.Equal(a.KeyPEM, b.KeyPEM) && bytes.Equal(a.CAPEM, b.CAPEM)
}

func errString(err error) string {
	if err == nil {
		return "unknown reason"
	}
	return err.Error()
}
