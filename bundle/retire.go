package bundle

import (
	"crypto/x509"
	"time"
)

// Rule: retire.
//
// A root leaves ca.crt only by retirement, never because another rotation
// came: when it has expired, or when the server has switched to the current
// root, the propagation delay after the switch has passed (clients renewed
// just before it may not have reloaded their new leaf yet), clients are
// tracked, and no selected client's unexpired leaf chains to it. An Unknown
// client (client.go) may chain to any root, so while one is selected only
// expiry retires a root. The current root and the server's root always
// stay. Without client tracking, old
// roots stay until they expire. What stays is normalized (set.go): newest
// first, deduplicated.

// retire returns the bundle to write, from the trusted roots, the current
// root and the server root, and reports the roots that leave it.
func (p *planning) retire(trusted []*x509.Certificate, serverRoot *x509.Certificate, switchedAt time.Time) []*x509.Certificate {
	settled := !p.now.Before(switchedAt.Add(p.t.TrustPropagationDelay))
	kept, retired := splitRetired(append(trusted, p.root.Cert, serverRoot), p.root.Cert, serverRoot, p.clients.Tracked && settled, p.clients, p.now)
	for _, r := range retired {
		p.emit(Event{Reason: ReasonRootRetired, Message: "root " + describe(r.cert) + " retired: " + r.why})
	}
	return kept
}

type retirement struct {
	cert *x509.Certificate
	why  string
}

// splitRetired returns the bundle to write and the roots that leave it.
// Unused roots may leave only when mayRetireUnused: client readiness is
// tracked and settled.
func splitRetired(candidates []*x509.Certificate, current, server *x509.Certificate, mayRetireUnused bool, clients Clients, now time.Time) ([]*x509.Certificate, []retirement) {
	var keep []*x509.Certificate
	var gone []retirement
	sigs := clients.Memory
	currentFP, serverFP := sigs.fingerprint(current), sigs.fingerprint(server)
	switched := serverFP == currentFP
	for _, c := range sigs.trustSet(candidates, time.Time{}) {
		fp := sigs.fingerprint(c)
		switch {
		case fp == currentFP || fp == serverFP:
			keep = append(keep, c)
		case now.After(c.NotAfter):
			gone = append(gone, retirement{c, "expired"})
		case switched && mayRetireUnused && !usedByAny(clients, c, now):
			gone = append(gone, retirement{c, "the server and every selected client have moved on"})
		default:
			keep = append(keep, c)
		}
	}
	return keep, gone
}

func usedByAny(clients Clients, root *x509.Certificate, now time.Time) bool {
	return clients.Using(root, now) > 0
}
