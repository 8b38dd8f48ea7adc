package bundle

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Event reasons, stable so that alerts and operators can match on them.
const (
	ReasonRootRotated            = "RootRotated"
	ReasonBundleUpdated          = "BundleUpdated"
	ReasonClientRenewalTriggered = "ClientRenewalTriggered"
	ReasonServerSwitched         = "ServerSwitched"
	ReasonServerSwitchForced     = "ServerSwitchForced"
	ReasonRootRetired            = "RootRetired"
	ReasonRootInvalid            = "RootInvalid"
)

// Event is something a decision wants an operator to see. Messages name
// roots by subject and fingerprint prefix, never by their bytes.
type Event struct {
	Warning bool
	Reason  string
	Message string
}

// Gateway is the gateway Secret as read from the API server.
type Gateway struct {
	Exists bool
	// CertPEM, KeyPEM and CAPEM are tls.crt, tls.key and ca.crt as found.
	CertPEM, KeyPEM, CAPEM []byte
	// State is what its annotations say.
	State State
}

// Client is one selected client Certificate as seen through its Secret.
type Client struct {
	// Name identifies the client in messages, as NAMESPACE/NAME.
	Name string
	// Leaf is the certificate in the client's tls.crt; nil when the Secret
	// is missing or unreadable.
	Leaf *x509.Certificate
	// CA is the client's ca.crt: the roots it verifies the server with.
	CA []*x509.Certificate
	// Failed says the last renewal of this client failed.
	Failed bool
}

// On reports whether the client has moved to root: its leaf chains to it
// and it trusts it, so it will accept a server credential from it.
func (c Client) On(root *x509.Certificate, now time.Time) bool {
	return c.Leaf != nil && !now.After(c.Leaf.NotAfter) && ChainsTo(c.Leaf, root) && Contains(c.CA, root)
}

// Uses reports whether the client still depends on root being trusted by
// the gateway: its unexpired leaf chains to it.
func (c Client) Uses(root *x509.Certificate, now time.Time) bool {
	return c.Leaf != nil && !now.After(c.Leaf.NotAfter) && ChainsTo(c.Leaf, root)
}

// Clients is what dualca knows of the selected client Certificates.
type Clients struct {
	// Tracked is false when no client selector is configured: then nothing
	// is known of the clients, roots are kept until they expire and the
	// server switches only when the grace period ends.
	Tracked bool
	Items   []Client
}

// Timings are the rotation delays of the zero-downtime strategy.
type Timings struct {
	// TrustPropagationDelay is the time the gateway gets to load a new bundle.
	TrustPropagationDelay time.Duration
	// ServerSwitchGrace is when, after the new root entered the bundle, the
	// server switches to it whether or not the clients are ready.
	ServerSwitchGrace time.Duration
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
}

// Plan decides the next gateway Secret of the zero-downtime strategy from the
// gateway as found, the validated current root, the clients and the time. It
// is pure, so a restart that reads the same Secret decides the same thing,
// and the rotation invariants can be checked over random histories.
func Plan(gw Gateway, root *Root, clients Clients, t Timings, now time.Time) Decision {
	now = now.UTC()
	// Moments are recorded in whole seconds, rounded up, so that a recorded
	// wait is never shorter than the one configured.
	stamp := now.Truncate(time.Second)
	if stamp.Before(now) {
		stamp = stamp.Add(time.Second)
	}
	prev := gw.State
	adopting := prev.Strategy != StrategyZeroDowntime
	var events []Event

	trusted, edited := trustedRoots(gw, root, clients, adopting, now)
	if edited {
		events = append(events, Event{Warning: true, Reason: ReasonBundleUpdated,
			Message: "ca.crt was changed outside dualca; restoring the roots dualca recorded"})
	}

	st := State{
		Strategy:       StrategyZeroDowntime,
		Root:           prev.Root,
		RootAddedAt:    prev.RootAddedAt,
		SwitchedAt:     prev.SwitchedAt,
		ClientsReadyAt: prev.ClientsReadyAt,
	}
	if prev.Root != root.Fingerprint {
		st.Root, st.RootAddedAt, st.ClientsReadyAt = root.Fingerprint, stamp, time.Time{}
		if gw.Exists && (prev.Root != "" || !Contains(trusted, root.Cert)) {
			events = append(events, Event{Reason: ReasonRootRotated,
				Message: "new root " + describe(root.Cert) + " is trusted next to the roots in use"})
		}
	}
	// A clock that went back must not stretch a wait into the far future,
	// and one that never recorded a time starts counting now.
	if st.RootAddedAt.IsZero() || st.RootAddedAt.After(stamp) {
		st.RootAddedAt = stamp
	}
	for _, at := range []*time.Time{&st.SwitchedAt, &st.ClientsReadyAt} {
		if at.After(stamp) {
			*at = stamp
		}
	}

	found := readServer(gw, append(trusted, root.Cert))
	if found != nil && !adopting && Fingerprint(found.root) != prev.Server {
		found = nil // replaced by hand: not the credential dualca recorded
	}
	var serverRoot *x509.Certificate
	if found != nil {
		serverRoot = found.root
	}
	// Clients load a renewed Secret a moment after it is written: the server
	// moves only once every client has been on the new root for the
	// propagation delay, measured from when dualca first saw them all on it.
	if p := CountProgress(clients, root.Cert, now); !clients.Tracked || p.Pending+p.Failed > 0 || Fingerprint(serverRoot) == root.Fingerprint {
		st.ClientsReadyAt = time.Time{}
	} else if st.ClientsReadyAt.IsZero() {
		st.ClientsReadyAt = stamp
	}
	sw := decideSwitch(serverRoot, root, clients, t, st, now, gw.Exists)
	if sw.switchNow {
		serverRoot, found = root.Cert, nil
		st.SwitchedAt, st.ClientsReadyAt = stamp, time.Time{}
		if sw.event != nil {
			events = append(events, *sw.event)
		}
	}

	// Clients renewed just before the switch may not have reloaded their new
	// leaf yet: unused roots wait the propagation delay after the switch.
	settled := !now.Before(st.SwitchedAt.Add(t.TrustPropagationDelay))
	kept, retired := retire(append(trusted, root.Cert, serverRoot), root.Cert, serverRoot, clients.Tracked && settled, clients, now)
	for _, r := range retired {
		events = append(events, Event{Reason: ReasonRootRetired, Message: "root " + describe(r.cert) + " retired: " + r.why})
	}
	cred, credEvents := credential(found, serverRoot, root, kept)
	events = append(events, credEvents...)
	caPEM := Encode(kept)
	if !gw.Exists {
		events = append(events, Event{Reason: ReasonBundleUpdated,
			Message: "gateway Secret created: serving root " + describe(root.Cert) + ", trusting " + plural(len(kept), "root") + ": " + describeAll(kept)})
	} else if string(caPEM) != string(gw.CAPEM) && !edited {
		events = append(events, Event{Reason: ReasonBundleUpdated,
			Message: "trust bundle now holds " + plural(len(kept), "root") + ": " + describeAll(kept)})
	}

	st.Server = Fingerprint(serverRoot)
	st.BundleHash = Hash(caPEM)
	for _, c := range kept {
		st.BundleRoots = append(st.BundleRoots, Fingerprint(c))
	}
	st.Phase = phaseOf(serverRoot, root.Cert, len(kept), st.RootAddedAt, t, now)

	d := Decision{CertPEM: cred.pem(), KeyPEM: cred.keyPEM, CAPEM: caPEM, State: st, Events: events,
		NextCheck: nextCheck(st, serverRoot, kept, clients, t, now)}
	if clients.Tracked {
		p := CountProgress(clients, root.Cert, now)
		d.State.Clients = &p
		// Clients are moved once the gateway trusts the new root, and also
		// after a forced switch: the ones left behind still need it.
		if st.Phase != PhaseBundle && !now.Before(root.Cert.NotBefore) {
			d.Renew = due(clients, root.Cert, now)
		}
	}
	return d
}

// credential returns the server credential for serverRoot: the one found if
// it is usable, else a leaf issued now (from the current root's key, or from
// the server root's own key when tls.crt still holds the legacy self-signed
// form). It then carries a chain of cross-certificates from the server root
// to the current root, each root certified by the next one to have been
// current: clients that trust any root along it can verify the server.
func credential(found *server, serverRoot *x509.Certificate, root *Root, kept []*x509.Certificate) (*server, []Event) {
	var events []Event
	s := found
	if s == nil || s.selfSigned {
		keyPEM := root.KeyPEM // no usable credential: the server just moved to root
		if s != nil {
			keyPEM = s.keyPEM
		}
		issued, err := issueServer(serverRoot, keyPEM)
		if err != nil {
			events = append(events, Event{Warning: true, Reason: ReasonBundleUpdated,
				Message: "could not issue a server certificate, presenting the root itself: " + err.Error()})
			if s == nil {
				s = &server{root: root.Cert, leaf: root.Cert, keyPEM: root.KeyPEM, selfSigned: true}
			}
			return s, events
		}
		s = issued
	}
	s.crosses = crossChain(s.root, s.crosses, root, kept, &events)
	return s, events
}

// trustedRoots returns the CA certificates of the gateway's ca.crt that may
// stay. A Secret dualca wrote and nobody edited is taken as is. An edited one
// keeps only the roots dualca had recorded, so a hand-added CA is removed and
// garbage is dropped. An adopted one (new, legacy, or stripped of dualca's
// annotations) seeds the bundle with every CA it holds, and with the roots
// the clients still use (see clientRoots): a legacy plain copy holds only
// the current root, and switching back must not cut off the clients it
// left behind.
//
// A recorded root whose bytes the edit removed is taken back from the
// clients' ca.crt, where cert-manager put it when it issued their leaves.
func trustedRoots(gw Gateway, root *Root, clients Clients, adopting bool, now time.Time) (roots []*x509.Certificate, edited bool) {
	all := casIn(gw.CAPEM)
	if adopting {
		return append(all, clientRoots(root, clients, now)...), false
	}
	if Hash(gw.CAPEM) == gw.State.BundleHash {
		return all, false
	}
	for _, c := range clients.Items {
		all = append(all, c.CA...)
	}
	for _, c := range all {
		if isCA(c) && slices.Contains(gw.State.BundleRoots, Fingerprint(c)) {
			roots = append(roots, c)
		}
	}
	return roots, true
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
			if isCA(ca) && bytes.Equal(ca.RawSubject, root.Cert.RawSubject) && c.Uses(ca, now) {
				out = append(out, ca)
			}
		}
	}
	return out
}

// casIn reads every CA certificate from PEM, skipping what is not one. The
// gateway Secret is dualca's own, so a damaged one is repaired, not rejected.
func casIn(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certsIn(data) {
		if isCA(c) {
			out = append(out, c)
		}
	}
	return out
}

type switchDecision struct {
	switchNow bool
	event     *Event
}

// decideSwitch says whether tls.crt moves to the current root now. It moves
// when every selected client is on the root (they verify the server with
// their ca.crt), or when waiting any longer would do more harm than good:
// the grace period is over, or the old server root is about to expire.
func decideSwitch(server *x509.Certificate, root *Root, clients Clients, t Timings, st State, now time.Time, exists bool) switchDecision {
	if server == nil {
		if !exists {
			return switchDecision{switchNow: true}
		}
		return switchDecision{switchNow: true, event: &Event{Warning: true, Reason: ReasonServerSwitchForced,
			Message: "server credential in the gateway Secret was missing or changed outside dualca; serving from root " + describe(root.Cert)}}
	}
	if Fingerprint(server) == root.Fingerprint {
		return switchDecision{}
	}
	if now.Add(t.TrustPropagationDelay + ClockSkew).After(server.NotAfter) {
		return forced("server root " + describe(server) + " expires at " + server.NotAfter.UTC().Format(time.RFC3339))
	}
	// A root from an issuer whose clock runs ahead is accepted into the
	// bundle, but nothing is issued from it before it is valid: verifiers
	// check the root's validity too.
	if now.Before(root.Cert.NotBefore) {
		return switchDecision{}
	}
	elapsed := now.Sub(st.RootAddedAt)
	if clients.Tracked {
		ready := !st.ClientsReadyAt.IsZero()
		if ready && elapsed >= t.TrustPropagationDelay && now.Sub(st.ClientsReadyAt) >= t.TrustPropagationDelay {
			p := CountProgress(clients, root.Cert, now)
			return switchDecision{switchNow: true, event: &Event{Reason: ReasonServerSwitched,
				Message: "all " + itoa(p.Renewed) + " clients trust root " + describe(root.Cert) + "; server now presents it"}}
		}
		if elapsed >= t.ServerSwitchGrace {
			p := CountProgress(clients, root.Cert, now)
			return forced(fmt.Sprintf("grace period %s is over with %d clients not on the new root", t.ServerSwitchGrace, p.Pending+p.Failed))
		}
		return switchDecision{}
	}
	if elapsed >= t.ServerSwitchGrace {
		return switchDecision{switchNow: true, event: &Event{Reason: ReasonServerSwitched,
			Message: fmt.Sprintf("grace period %s is over (client readiness is not tracked); server now presents root %s", t.ServerSwitchGrace, describe(root.Cert))}}
	}
	return switchDecision{}
}

// plural is "1 root", "2 roots".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return itoa(n) + " " + noun + "s"
}

func forced(why string) switchDecision {
	return switchDecision{switchNow: true, event: &Event{Warning: true, Reason: ReasonServerSwitchForced,
		Message: "server switched to the new root before every client was ready: " + why}}
}

type retirement struct {
	cert *x509.Certificate
	why  string
}

// retire returns the bundle to write and the roots that leave it. A root
// leaves only when it has expired, or when the server has moved to the
// current root and no selected client's unexpired leaf chains to it; the
// current root and the server's root always stay. Unused roots may leave
// only when mayRetireUnused: client readiness is tracked and settled.
func retire(candidates []*x509.Certificate, current, server *x509.Certificate, mayRetireUnused bool, clients Clients, now time.Time) ([]*x509.Certificate, []retirement) {
	var keep []*x509.Certificate
	var gone []retirement
	switched := Fingerprint(server) == Fingerprint(current)
	for _, c := range Normalize(candidates, time.Time{}) {
		fp := Fingerprint(c)
		switch {
		case fp == Fingerprint(current) || fp == Fingerprint(server):
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
	for _, c := range clients.Items {
		if c.Uses(root, now) {
			return true
		}
	}
	return false
}

// nextCheck is the first moment after now at which time alone changes what
// Plan decides: the end of the propagation delay or of the grace period,
// the server root entering its expiry margin, a root in the bundle or a
// client's leaf expiring. Certificates are valid through NotAfter (whole
// seconds), hence the second added to the expiry moments.
func nextCheck(st State, server *x509.Certificate, kept []*x509.Certificate, clients Clients, t Timings, now time.Time) time.Time {
	moments := []time.Time{
		st.RootAddedAt.Add(t.TrustPropagationDelay),
		server.NotAfter.Add(-(t.TrustPropagationDelay + ClockSkew) + time.Second),
	}
	if st.Server != st.Root {
		moments = append(moments, st.RootAddedAt.Add(t.ServerSwitchGrace))
	}
	if !st.ClientsReadyAt.IsZero() {
		moments = append(moments, st.ClientsReadyAt.Add(t.TrustPropagationDelay))
	}
	if clients.Tracked {
		moments = append(moments, st.SwitchedAt.Add(t.TrustPropagationDelay))
		for _, c := range clients.Items {
			if c.Leaf != nil {
				moments = append(moments, c.Leaf.NotAfter.Add(time.Second))
			}
		}
	}
	for _, c := range kept {
		moments = append(moments, c.NotBefore, c.NotAfter.Add(time.Second))
	}
	var next time.Time
	for _, m := range moments {
		if m.After(now) && (next.IsZero() || m.Before(next)) {
			next = m
		}
	}
	return next
}

func phaseOf(server, root *x509.Certificate, roots int, addedAt time.Time, t Timings, now time.Time) Phase {
	switch {
	case Fingerprint(server) != Fingerprint(root) && (now.Sub(addedAt) < t.TrustPropagationDelay || now.Before(root.NotBefore)):
		// Clients are not moved to a root before it is valid either.
		return PhaseBundle
	case Fingerprint(server) != Fingerprint(root):
		return PhaseRenewing
	case roots > 1:
		return PhaseRetiring
	default:
		return PhaseSteady
	}
}

// CountProgress counts the clients on root (renewed), those whose last
// renewal failed, and the others (pending). A nil root counts none renewed.
func CountProgress(clients Clients, root *x509.Certificate, now time.Time) Progress {
	var p Progress
	for _, c := range clients.Items {
		switch {
		case c.On(root, now):
			p.Renewed++
		case c.Failed:
			p.Failed++
		default:
			p.Pending++
		}
	}
	return p
}

// due lists the clients not yet on root, in a stable order.
func due(clients Clients, root *x509.Certificate, now time.Time) []string {
	var names []string
	for _, c := range clients.Items {
		if !c.On(root, now) {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return names
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
