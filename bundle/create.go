package bundle

import "crypto/x509"

// Rule: create.
//
// A gateway Secret that does not exist yet is written at once, complete: it
// is adopted (an empty one has no annotations, see adopt.go), so it trusts
// the current root and the roots the clients still use; it serves a leaf
// issued from the current root, since no older credential exists for
// clients to keep trusting (decideSwitch); its RootAddedAt and SwitchedAt
// are now; and its creation is reported with what it serves and trusts.

// created is the event of a gateway Secret created.
func created(root *Root, kept []*x509.Certificate) Event {
	return Event{Reason: ReasonBundleUpdated,
		Message: "gateway Secret created: serving root " + describe(root.Cert) + ", trusting " + plural(len(kept), "root") + ": " + describeAll(kept)}
}
