package bundle

import (
	"bytes"
	"crypto/x509"
	"time"
)

// Rule: adopt.
//
// A gateway Secret without dualca's zero-downtime annotations (new, written
// by the legacy strategy, or stripped of them) is adopted: every CA in its
// ca.crt seeds the bundle, its server credential is kept whatever root it
// chains to (see recordedServer), and no Warning is raised, because nothing
// was edited behind dualca's back. A legacy plain copy holds only the
// current root, and switching back must not cut off the clients it left
// behind: the roots they still use are kept too.

// Adopts reports whether Plan adopts gw: it was not written by the
// zero-downtime strategy. An adoption keeps the roots the clients still
// use, read from their ca.crt (clientRoots), so it cannot be decided with
// the clients unread (Clients.Unread): a decision made then would drop
// them, and nothing after the adoption looks for them again.
func Adopts(gw Gateway) bool { return gw.State.Strategy != StrategyZeroDowntime }

// adoptedRoots returns the roots an adopted gateway trusts: the CAs of its
// ca.crt and the roots the clients still use (clientRoots), each only if
// dualca read it from the root Secret (provenance.go): a client's ca.crt is
// written by whatever Issuer signed it, and a subject is no proof.
func (p *planning) adoptedRoots() []*x509.Certificate {
	found := p.readFromRoot(casIn(p.gw.CAPEM), "ca.crt")
	return append(found, p.readFromRoot(clientRoots(p.root, p.clients, p.now), "a selected client's ca.crt")...)
}

// clientRoots returns the roots that selected clients still depend on, as
// found in their own ca.crt: a certificate there counts only if it is a CA
// with the current root's subject (a root of the same cert-manager CA) and
// it signed the client's unexpired leaf. A client Secret cannot smuggle in
// an unrelated CA this way.
func clientRoots(root *Root, clients Clients, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range clients.Items {
		for _, ca := range c.CA {
			if isCA(ca) && bytes.Equal(ca.RawSubject, root.Cert.RawSubject) && c.uses(clients.Memory, ca, now) {
				out = append(out, ca)
			}
		}
	}
	return out
}
