package bundle

import (
	"crypto/x509"
	"time"
)

// Gateway is the gateway Secret as dualca last decided it: the syncer
// reads it from dualca's record, not from the gateway Secret, which others
// may write. Plan still treats every field as hostile (see provenance.go).
type Gateway struct {
	Exists bool
	// CertPEM, KeyPEM and CAPEM are tls.crt, tls.key and ca.crt.
	CertPEM, KeyPEM, CAPEM []byte
	// State is what the recorded annotations say.
	State State
	// Known are the roots dualca read from the root Secret, as its record
	// remembers them (Decision.Known of the decision before). Only these
	// and the current root are ever trusted or signed for.
	Known []*x509.Certificate
	// Parsed remembers what earlier decisions parsed of the gateway; nil,
	// the decision parses the fields afresh (see Parsed).
	Parsed *Parsed
	// Lagging: an object the gateway reads its bundle from has not held
	// the recorded current root yet (a write of it failed, whoever edited
	// it since). The root's propagation delay then starts again from this
	// decision, whose write brings it there (see rotate.go).
	Lagging bool
	// ServedSince is when the objects the gateway reads got the recorded
	// current root, as dualca's own write of them says (sealed: see the
	// syncer's record); zero when none says. A record whose writes failed
	// while theirs did not may date the root from before they had it:
	// the later of the two is what the propagation delay counts from
	// (see rotate.go).
	ServedSince time.Time
}

// Timings are the rotation delays of the zero-downtime strategy.
type Timings struct {
	// TrustPropagationDelay is the time the gateway gets to load a new bundle.
	TrustPropagationDelay time.Duration
	// ServerSwitchGrace is when, after the new root entered the bundle, the
	// server switches to it whether or not the clients are ready.
	ServerSwitchGrace time.Duration
	// Server is the server leaf profile (profile.go). nil: not known, as
	// when `dualca status` replays a decision from the recorded timings;
	// a leaf found is then kept whatever its names, and one issued gets
	// DefaultServerProfile. Never recorded: State.Timings leave it out.
	Server *ServerProfile
	// Budget bounds what a decision writes (budget.go); zero, the
	// defaults, which are what dualca runs with (the model test sets a
	// small one to reach it). Never recorded.
	Budget Budget
}

// Decision is the gateway Secret content a strategy wants, and why.
type Decision struct {
	CertPEM, KeyPEM, CAPEM []byte
	State                  State
	Events                 []Event
	// Renew names the clients whose re-issuance is due now.
	Renew []string
	// NextCheck is the earliest moment the decision can change by time
	// alone (a delay or grace period ends, a root expires); zero if none.
	// The syncer reconciles again then, instead of waiting for the poll.
	NextCheck time.Time
	// Upcoming are the moments at which time alone changes the decision,
	// earliest first, each with what happens then: NextCheck is the first.
	// `dualca status` shows them, so what it says comes next is what Plan
	// decides, not a guess made apart.
	Upcoming []Moment
	// Roots and Leaf are CAPEM's roots and CertPEM's first certificate,
	// parsed, when the strategy has them at hand: whoever reports on the
	// decision need not parse them again. nil when it has not.
	Roots []*x509.Certificate
	Leaf  *x509.Certificate
	// Known is what the record keeps of the roots read from the root
	// Secret, for the next decision's Gateway.Known (see Provenance).
	Known []*x509.Certificate
	// Refused says why the plan was refused, "" when it was not: it did
	// not fit the budget (budget.go), and the decision is the gateway as
	// found, to be written nowhere.
	Refused string
}

// Plan decides the next gateway Secret of the zero-downtime strategy from the
// gateway as found, the validated current root, the clients and the time. It
// is pure, so a restart that reads the same Secret decides the same thing,
// and the rotation invariants can be checked over random histories.
//
// It applies the rules of docs/rotation.md in order, each a function of its
// own: the trust set (trust.go, with repair.go and adopt.go), the rotation
// (rotate.go), the server and its switch (repair.go, switch.go, create.go),
// retirement (retire.go), the credential (server.go, crosschain.go), the
// budget (budget.go), and what follows from them (phase.go, renew.go,
// nextcheck.go).
func Plan(gw Gateway, root *Root, clients Clients, t Timings, now time.Time) Decision {
	p := newPlanning(gw, root, clients, t, now)
	trusted := p.trustedRoots()
	st := p.startRotation(trusted)
	st.PausedAt, p.paused = p.control()
	found := p.recordedServer(trusted)
	intact := p.intact(trusted, found)
	serverRoot := found.rootOrNil()
	st.ClientsReadyAt = p.clientsReadyAt(st, serverRoot)
	switched := p.switchServer(st, found)
	if switched {
		st.SwitchedAt, st.ClientsReadyAt = p.stamp, time.Time{}
		serverRoot, found = root.Cert, nil
	}
	st.Promote = p.settlePromote(st.Promote, serverRoot, switched)
	kept := p.retire(trusted, serverRoot, st.SwitchedAt)
	cred := p.credential(found, serverRoot, kept)
	kept, refused := p.fit(kept, cred, intact)
	if refused != "" {
		st.Server = p.clients.Memory.fingerprint(serverRoot)
		return p.refuse(refused, upcoming(st, serverRoot, cred, kept, p.clients, p.t, p.now, p.paused))
	}
	caPEM := gw.Parsed.encode(kept)
	p.reportBundle(caPEM, kept)
	return p.decision(st, serverRoot, cred, kept, caPEM)
}

// planning is one decision being made: Plan's inputs, what is derived from
// them once, and the events, in the order the rules raise them.
type planning struct {
	gw      Gateway
	root    *Root
	clients Clients
	t       Timings
	now     time.Time
	// stamp is now as recorded (see stamp).
	stamp time.Time
	// adopting: the gateway Secret was not written by the zero-downtime
	// strategy (new, legacy, or stripped of dualca's annotations).
	adopting bool
	// edited: ca.crt was changed outside dualca (see trustedRoots).
	edited bool
	// progress is the clients' progress toward the current root.
	progress Progress
	// known are the roots read from the root Secret (provenance.go).
	known provenance
	// paused: the operator holds the rotation (control.go).
	paused bool
	events []Event
}

func newPlanning(gw Gateway, root *Root, clients Clients, t Timings, now time.Time) *planning {
	now = now.UTC()
	if clients.Memory == nil {
		// The same leaf is checked against the same root by several rules.
		clients.Memory = NewMemory()
	}
	if clients.Unread {
		// One Unknown client stands for those not read yet: the rules'
		// fail-safe treatment of the one is what the others need.
		clients.Tracked, clients.Items = true, []Client{{Name: unreadClients, Unknown: true}}
	}
	return &planning{gw: gw, root: root, clients: clients, t: t, now: now, stamp: stamp(now),
		adopting: Adopts(gw), progress: CountProgress(clients, root.Cert, now),
		known: newProvenance(gw.Known, root, clients.Memory)}
}

func (p *planning) emit(e Event) { p.events = append(p.events, e) }

// decision is the gateway Secret the rules arrived at, its state recorded.
func (p *planning) decision(st State, serverRoot *x509.Certificate, cred *serverCredential, kept []*x509.Certificate, caPEM []byte) Decision {
	sigs := p.clients.Memory
	st.Server = sigs.fingerprint(serverRoot)
	st.BundleHash = p.gw.Parsed.hash(caPEM)
	for _, c := range kept {
		st.BundleRoots = append(st.BundleRoots, sigs.fingerprint(c))
	}
	st.Phase = phaseOf(serverRoot, p.root.Cert, len(kept), st.RootAddedAt, p.t, p.now)
	st.Timings = Timings{TrustPropagationDelay: p.t.TrustPropagationDelay, ServerSwitchGrace: p.t.ServerSwitchGrace}
	upcoming := upcoming(st, serverRoot, cred, kept, p.clients, p.t, p.now, p.paused)
	d := Decision{CertPEM: cred.certPEM(p.gw.Parsed), KeyPEM: cred.keyPEM, CAPEM: caPEM, State: st, Events: p.events,
		NextCheck: nextCheck(upcoming), Upcoming: upcoming, Roots: kept, Leaf: cred.leaf,
		Known: Provenance(p.gw.Known, p.root, kept, p.now)}
	p.gw.Parsed.written(d.CAPEM, kept, d.CertPEM, cred.chain())
	switch {
	case p.clients.Unread:
		d.State.Clients = p.gw.State.Clients // as recorded, until the clients are read
	case p.clients.Tracked:
		progress := p.progress
		d.State.Clients = &progress
		d.Renew = p.renewals(st.Phase)
	}
	return d
}

// unreadClients is the name of the Unknown client that stands for the
// clients not read yet (Clients.Unread).
const unreadClients = "(the clients, not read yet)"
