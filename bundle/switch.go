package bundle

import (
	"crypto/x509"
	"fmt"
	"time"
)

// Rule: switch.
//
// tls.crt moves to the current root when every selected client is on it
// (its leaf chains to the root and its ca.crt holds it: clients verify the
// server with their ca.crt) and has been for the propagation delay, so they
// have loaded their renewed Secret, itself counted after the gateway's own
// propagation delay. It moves anyway, with a Warning, when waiting longer
// would do more harm than good: the grace period is over, or the server
// root or the server leaf is about to expire (dualca cannot issue a leaf
// from an older root: it holds only the current root's key). Without client tracking it moves when the grace
// period ends. A missing or replaced credential is replaced (repair.go), and
// a new gateway serves the current root at once (create.go).
//
// It also moves, with a Warning, when the server chain is full: tls.crt
// already carries MaxServerChainLinks cross-certificates (crosschain.go), one
// per rotation the server did not follow. A longer chain would cost every
// handshake more bytes and, past about fifty links, exceed the signature
// checks Go's verifier allows per chain, so clients of the newest roots
// (the renewed ones) could not verify the server at all.

type switchDecision struct {
	switchNow bool
	event     *Event
}

// clientsReadyAt is when dualca first saw every client on the current root,
// the server not on it yet; zero while one is not, or when it does not
// apply. A client falling back off the root resets the wait.
func (p *planning) clientsReadyAt(st State, serverRoot *x509.Certificate) time.Time {
	if p.clients.Unread {
		return st.ClientsReadyAt // kept for when they are read; not acted on
	}
	if !p.clients.Tracked || p.progress.Pending+p.progress.Failed > 0 || Fingerprint(serverRoot) == p.root.Fingerprint {
		return time.Time{}
	}
	if st.ClientsReadyAt.IsZero() {
		return p.stamp
	}
	return st.ClientsReadyAt
}

// switchServer reports whether the server moves to the current root now,
// as decideSwitch decides, telling why.
func (p *planning) switchServer(st State, found *serverCredential) bool {
	sw := p.decideSwitch(found.rootOrNil(), found.leafUntil(), found.links(), st)
	if sw.switchNow && sw.event != nil {
		p.emit(*sw.event)
	}
	return sw.switchNow
}

// MaxServerChainLinks is the most cross-certificates dualca lets tls.crt
// carry before it switches the server to the current root: about 15 KB per
// handshake with ECDSA P-256 roots, and well within Go's verifier's limit.
const MaxServerChainLinks = 32

// decideSwitch says whether tls.crt moves from server to the current root
// now, and with which event. leafUntil is when the leaf tls.crt presents
// expires (zero for none, or the legacy form); links is the number of
// cross-certificates tls.crt carries.
func (p *planning) decideSwitch(server *x509.Certificate, leafUntil time.Time, links int, st State) switchDecision {
	root, t, now := p.root, p.t, p.now
	switch {
	case server == nil && !p.gw.Exists:
		return switchDecision{switchNow: true} // create: nothing served yet
	case server == nil:
		return serverReplaced(root)
	case Fingerprint(server) == root.Fingerprint:
		return switchDecision{}
	case now.Add(t.TrustPropagationDelay + ClockSkew).After(server.NotAfter):
		return forced("server root " + describe(server) + " expires at " + server.NotAfter.UTC().Format(time.RFC3339) + p.despitePause())
	case !leafUntil.IsZero() && now.Add(t.TrustPropagationDelay+ClockSkew).After(leafUntil):
		// Its key is the older root's, which dualca does not hold: only the
		// switch gives the gateway a fresh leaf (profile.go).
		return forced("the server certificate expires at " + leafUntil.UTC().Format(time.RFC3339) + " and only the switch can renew it" + p.despitePause())
	case notYetValid(root.Cert, now):
		return switchDecision{}
	case links >= MaxServerChainLinks:
		return forced(fmt.Sprintf("the server chain holds %d cross-certificates, the most dualca sends, one per rotation the server did not follow", links) + p.despitePause())
	case p.promoted(st, server):
		if now.Sub(st.RootAddedAt) < t.TrustPropagationDelay {
			return switchDecision{} // the gateway loads the root first
		}
		return p.promotedSwitch()
	case p.paused:
		return switchDecision{}
	case p.clients.Tracked:
		return p.switchForClients(st)
	case now.Sub(st.RootAddedAt) >= t.ServerSwitchGrace:
		return switchDecision{switchNow: true, event: &Event{Reason: ReasonServerSwitched,
			Message: fmt.Sprintf("grace period %s is over (client readiness is not tracked); server now presents root %s", t.ServerSwitchGrace, describe(root.Cert))}}
	}
	return switchDecision{}
}

// switchForClients is decideSwitch for tracked clients: when they have all
// been ready for the propagation delay, or forced when the grace is over.
func (p *planning) switchForClients(st State) switchDecision {
	elapsed := p.now.Sub(st.RootAddedAt)
	delay := p.t.TrustPropagationDelay
	if !p.clients.Unread && !st.ClientsReadyAt.IsZero() && elapsed >= delay && p.now.Sub(st.ClientsReadyAt) >= delay {
		return switchDecision{switchNow: true, event: &Event{Reason: ReasonServerSwitched,
			Message: "all " + itoa(p.progress.Renewed) + " clients trust root " + describe(p.root.Cert) + "; server now presents it"}}
	}
	if elapsed >= p.t.ServerSwitchGrace {
		return forced(fmt.Sprintf("grace period %s is over with %s", p.t.ServerSwitchGrace, p.notOnRoot()))
	}
	return switchDecision{}
}

// notOnRoot words the clients not on the current root, for a forced
// switch's Warning.
func (p *planning) notOnRoot() string {
	if p.clients.Unread {
		return "the clients not read yet (dualca is starting)"
	}
	return fmt.Sprintf("%d clients not on the new root", p.progress.Pending+p.progress.Failed)
}

// despitePause says that a forced switch overrides the operator's pause.
func (p *planning) despitePause() string {
	if p.paused {
		return " (the rotation is paused, but this cannot wait)"
	}
	return ""
}

func forced(why string) switchDecision {
	return switchDecision{switchNow: true, event: &Event{Warning: true, Reason: ReasonServerSwitchForced,
		Message: "server switched to the new root before every client was ready: " + why}}
}
