package bundle

import (
	"bytes"
	"crypto/x509"
	"slices"
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

// AdoptionWaits reports whether a decision on gw, with root current, must
// wait for the clients to be read: Plan adopts gw and the clients could
// change what it keeps. A client's ca.crt adds only roots of gw.Known
// (provenance.go), and the current root is kept anyway; so with no other
// root on record (a first install, or a record lost) the adoption keeps
// the same roots whatever the clients hold, and it need not wait for them.
func AdoptionWaits(gw Gateway, root *Root) bool {
	return Adopts(gw) && slices.ContainsFunc(gw.Known, func(c *x509.Certificate) bool { return Fingerprint(c) != root.Fingerprint })
}

// Waiting is the decision a pass that waits for the clients (AdoptionWaits)
// holds to, for the issuing rule alone (issuing.go): the gateway as found,
// nothing of it decided, the phase Bundle. So the issuing Secret keeps a
// root the gateway trusts, and moves to the current root only when the
// root it holds is one the gateway does not trust (a legacy write that
// reached the gateway and not the issuing Secret), has expired, or was
// never read from the root Secret: no leaf is signed meanwhile by a root
// the gateway refuses, if it can be helped.
//
// What the gateway trusts is what the objects it reads hold now (served:
// the bundle of each, nil for one absent), and only the roots all of them
// hold: nothing is written while the pass waits, and those objects may lag
// behind the record that gw describes (their writes failed while the
// record's did not), so the record's ca.crt is not what the gateway
// trusts.
func Waiting(gw Gateway, served [][]byte, root *Root, now time.Time) Decision {
	var trusted []*x509.Certificate
	for i, data := range served {
		cas := gw.Parsed.casIn(data)
		if i == 0 {
			trusted = cas
			continue
		}
		trusted = slices.DeleteFunc(trusted, func(c *x509.Certificate) bool { return !Contains(cas, c) })
	}
	return Decision{CAPEM: gw.CAPEM, State: State{Strategy: StrategyZeroDowntime, Phase: PhaseBundle},
		Known: Provenance(gw.Known, root, nil, now), Roots: trusted}
}

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
