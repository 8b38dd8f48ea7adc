// Package legacy reproduces dualca's predecessor: the gateway Secret is a
// plain copy of the root CA Secret, replaced whole whenever cert-manager
// rotates the root, and right after a rotation the Secrets of the selected
// clients whose leaf the new root did not issue are deleted, so that
// cert-manager re-issues them. Every client signed by the old root is cut
// off at that moment, and its mounted Secret is missing until re-issued;
// that downtime is the behaviour being reproduced.
//
// Plan decides the gateway Secret; Strategy is what the syncer runs: Plan,
// and the deletion of the due clients' Secrets.
//
// It exists only as the revert path of --cert-management-legacy, so that a
// problem with the zero-downtime strategy can be undone by flipping one flag.
// When no installation needs that revert any more, this package and the flag
// can be deleted, with the one place in the syncer that chooses it; nothing
// else depends on its internals.
package legacy

import (
	"slices"
	"time"

	"github.com/dualca/dualca/bundle"
)

// Plan returns the gateway Secret of the legacy strategy: tls.crt, tls.key
// and ca.crt exactly as the root Secret has them. Only the strategy, the
// root fingerprint and client progress are recorded, so that switching back
// to zero-downtime adopts this Secret as a fresh start; the operator's
// pause and promote are kept as found, not obeyed. Renew lists the
// clients whose Secret holds a leaf not issued by the root: Strategy.Renew,
// which the syncer's renewer calls for each, deletes those Secrets. A client whose credential dualca cannot see
// (bundle.Client.Unknown) is never among them.
func Plan(gw bundle.Gateway, root *bundle.Root, clients bundle.Clients, now time.Time) bundle.Decision {
	d := bundle.Decision{
		CertPEM: root.CertPEM,
		KeyPEM:  root.KeyPEM,
		CAPEM:   root.CAPEM,
		// The roots read from the root Secret are remembered here too: a
		// switch back to zero-downtime adopts the clients still on them.
		Known: bundle.Provenance(gw.Known, root, nil, now),
		State: bundle.State{
			Strategy: bundle.StrategyLegacy,
			Root:     root.Fingerprint,
			Server:   root.Fingerprint,
			// The operator's controls are not obeyed here, but kept for
			// the zero-downtime strategy when it comes back.
			Paused:  gw.State.Paused,
			Promote: gw.State.Promote,
		},
	}
	switch {
	case clients.Unread:
		// Not read yet (dualca is starting): nothing to delete, and the
		// progress recorded stays as it was until they are.
		d.State.Clients = gw.State.Clients
	case clients.Tracked:
		var p bundle.Progress
		for _, c := range clients.Items {
			if c.Unknown {
				// Nothing seen is nothing to delete: a leaf here would be a
				// stale view, not what the client loads.
				c.Leaf = nil
			}
			switch {
			case c.Leaf != nil && clients.Memory.LeafChainsTo(c.Leaf, root.Cert):
				p.Renewed++
			case c.Failed:
				p.Failed++
			default:
				p.Pending++
			}
			if c.Leaf != nil && !clients.Memory.LeafChainsTo(c.Leaf, root.Cert) {
				d.Renew = append(d.Renew, c.Name)
			}
		}
		slices.Sort(d.Renew)
		d.State.Clients = &p
	}
	if !gw.Exists {
		return d
	}
	if gw.State.Root != root.Fingerprint {
		d.Events = append(d.Events, bundle.Event{Reason: bundle.ReasonRootRotated,
			Message: "legacy strategy: gateway now copies root " + bundle.Short(root.Fingerprint) + "; clients of the old root lose trust"})
	}
	if string(gw.CAPEM) != string(root.CAPEM) || string(gw.CertPEM) != string(root.CertPEM) || string(gw.KeyPEM) != string(root.KeyPEM) {
		d.Events = append(d.Events, bundle.Event{Reason: bundle.ReasonBundleUpdated,
			Message: "legacy strategy: gateway Secret replaced by a copy of the root"})
	}
	return d
}
