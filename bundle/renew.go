package bundle

import (
	"crypto/x509"
	"slices"
	"time"
)

// Rule: renew.
//
// Clients are moved to the current root once the gateway trusts it (the
// phase is past Bundle), and also after a forced switch, since the ones left
// behind still need it; never onto a root that is not valid yet
// (notyetvalid.go), and not while the operator holds the rotation
// (control.go). Every tracked client not on the root is due, in a stable
// order, an Unknown one too (a renewal it did not need costs one issuance,
// and its new revision brings it back into view); the syncer paces the
// renewals and skips those in flight.

// renewals lists the clients due for re-issuance now, given the phase.
func (p *planning) renewals(phase Phase) []string {
	if phase == PhaseBundle || p.paused || notYetValid(p.root.Cert, p.now) {
		return nil
	}
	return due(p.clients, p.root.Cert, p.now)
}

// due lists the clients not yet on root, in a stable order.
func due(clients Clients, root *x509.Certificate, now time.Time) []string {
	var names []string
	clients.Memory.eachBond(clients.Items, root, func(c *Client, b bond) {
		if !b.on(c, now) {
			names = append(names, c.Name)
		}
	})
	slices.Sort(names)
	return names
}
