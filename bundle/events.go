package bundle

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// Event reasons, stable so that alerts and operators can match on them: one
// reason per cause.
const (
	// ReasonRootRotated: a new root is trusted next to the roots in use.
	ReasonRootRotated = "RootRotated"
	// ReasonBundleUpdated: the gateway Secret was created, or its trust
	// bundle changed.
	ReasonBundleUpdated = "BundleUpdated"
	// ReasonClientRenewalTriggered: a client's re-issuance was requested.
	ReasonClientRenewalTriggered = "ClientRenewalTriggered"
	// ReasonServerSwitched: the server credential moved to the current root.
	ReasonServerSwitched = "ServerSwitched"
	// ReasonServerSwitchForced: the server credential moved before every
	// client was ready (grace period over, server root expiring, or the
	// operator's promote), or replaced one found missing or changed by hand.
	ReasonServerSwitchForced = "ServerSwitchForced"
	// ReasonRootRetired: a root left the trust bundle.
	ReasonRootRetired = "RootRetired"
	// ReasonRootInvalid: the root Secret cannot be used; nothing is written.
	ReasonRootInvalid = "RootInvalid"
	// ReasonGatewayRepaired: ca.crt was changed outside dualca, and the
	// roots dualca recorded were restored.
	ReasonGatewayRepaired = "GatewayRepaired"
	// ReasonUntrustedRoot: a CA that dualca never read from the root
	// Secret was found where a root was expected (ca.crt, tls.crt, a
	// client's ca.crt) and was not trusted (see provenance.go).
	ReasonUntrustedRoot = "UntrustedRoot"
	// ReasonGatewayTampered: the gateway Secret's data or dualca's
	// annotations on it were changed outside dualca; it was written again
	// from dualca's record (emitted by the syncer).
	ReasonGatewayTampered = "GatewayTampered"
	// ReasonForeignTargetInput: a gateway reads, beside dualca's target,
	// an input dualca does not own and leaves (a ca.crl in an Istio
	// Secret, a "<name>-cacert" Secret that Istio prefers to the combined
	// gateway Secret's bundle).
	ReasonForeignTargetInput = "ForeignTargetInput"
	// ReasonGatewayRestored: the gateway Secret was deleted and has been
	// written again as dualca last wrote it (emitted by the syncer).
	ReasonGatewayRestored = "GatewayRestored"
	// ReasonServerCredentialFailed: no server certificate could be issued;
	// the credential found is kept if there is one, else none is written:
	// a root's key never goes where it was not.
	ReasonServerCredentialFailed = "ServerCredentialFailed" //nolint:gosec // G101: an event reason, not a credential
	// ReasonServerLeafReissued: the server certificate was issued again
	// from the root it chains to: a third of its lifetime remained, it was
	// not valid, or it did not match the profile (names, key, lifetime).
	ReasonServerLeafReissued = "ServerLeafReissued"
	// ReasonServerLeafExpiring: the server certificate found has expired
	// and chains to an older root, whose key dualca does not hold: it
	// cannot be issued again until the server switches (a Warning; the
	// switch rule forces the switch before, so it is an alarm).
	ReasonServerLeafExpiring = "ServerLeafExpiring"
	// ReasonCrossSignFailed: a cross-certificate could not be issued, so
	// clients of the new root may not verify the server until it switches.
	ReasonCrossSignFailed = "CrossSignFailed"
	// ReasonRotationPaused: the operator paused the rotation (`dualca
	// pause`); a Warning when the annotation's value is not one dualca knows.
	ReasonRotationPaused = "RotationPaused"
	// ReasonRotationResumed: the operator resumed the rotation (`dualca resume`).
	ReasonRotationResumed = "RotationResumed"
	// ReasonPromoteIgnored: a promote was removed without effect: it named
	// a root that is not the current one, or the server already presented it.
	ReasonPromoteIgnored = "PromoteIgnored"
	// ReasonRootTrimmed: a root no selected client uses left the bundle
	// before its retirement, to keep the gateway within its budget (a
	// Warning: see budget.go).
	ReasonRootTrimmed = "RootTrimmed"
	// ReasonBundleTooLarge: the plan did not fit the budget even trimmed;
	// the gateway was left as it was and the new root is not trusted (a
	// Warning: see budget.go).
	ReasonBundleTooLarge = "BundleTooLarge"
)

// Event is something a decision wants an operator to see. Messages name
// roots by subject and fingerprint prefix, never by their bytes.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// describe names a certificate for people: subject and fingerprint prefix.
func describe(c *x509.Certificate) string {
	return fmt.Sprintf("%q (%s)", c.Subject.CommonName, Short(Fingerprint(c)))
}

func describeAll(certs []*x509.Certificate) string {
	parts := make([]string, len(certs))
	for i, c := range certs {
		parts[i] = describe(c)
	}
	return strings.Join(parts, ", ")
}

// plural is "1 root", "2 roots".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return itoa(n) + " " + noun + "s"
}
