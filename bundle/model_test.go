package bundle_test

import (
	"crypto/x509"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
	"github.com/dualca/dualca/test/lib/certs"
)

// The model test drives the pure decisions through random histories:
// rotations (overlapping ones too), client renewals that succeed, fail or
// lag, restarts, clients hidden from dualca's view, invalid roots, strategy
// flips and clock jumps. The gateway
// Secret only ever holds what a decision wrote, its annotations going through
// the same text form as on the API server, and every invariant of
// docs/design.md is checked after every step.

type modelClient struct {
	name string
	leaf *x509.Certificate
	// read is what the view holds of leaf: read against ca, as the syncer
	// reads it, or, one renewal in three, against no ca.crt, so that the
	// decisions check its signature against the roots themselves.
	read      *bundle.ClientLeaf
	ca        []*x509.Certificate
	requested bool // a renewal was triggered and not completed yet
	broken    bool // its issuer cannot issue: renewals fail
	failed    bool
	// hidden: dualca cannot see this client's credential (the
	// CertificateRequest of its revision was garbage-collected while the
	// next one was in flight, and a restart lost dualca's memory of it, or
	// someone deleted it), so the view Plan gets is Unknown. leaf and ca
	// stay the truth: what the client loads, what the invariants are about.
	hidden bool
	// impostor, when set, is the CA this client's own Issuer signs with: a
	// CA with the root's subject that someone made in the client's
	// namespace. Its renewals come from it, never from the root.
	impostor *certs.CA
}

type model struct {
	t        *testing.T
	rng      *rand.Rand
	now      time.Time
	root     *certs.CA
	rootBad  bool
	legacy   bool
	tracked  bool
	timings  bundle.Timings
	clients  []*modelClient
	gw       bundle.Gateway
	annots   map[string]string
	rotation int
	trace    []string
	// verified remembers verifyServer results by credential and trusted
	// root: the credential changes rarely and chain building is costly.
	verified map[[2]string]error
	// current numbers the roots in the order they were first current at a
	// decision.
	current map[string]int
	// signatures is what the syncer keeps for as long as it runs.
	signatures *bundle.Memory
	// counters, to show the histories reached what they should
	switches, forced, retired, renewals int
	// hidden clients: the decisions made with one in view, those where a
	// root stayed only for them (every client in view has left it, the
	// server has switched and settled), and the hidden clients back in view
	// by a renewal or as they were
	hiddenDecisions, heldForHidden, revealedRenewed, revealedAsWas int
	// unread is how many reconciles after a restart still find the client
	// cache loading (bundle.Clients.Unread); unreadDecisions counts the
	// decisions made so, unreadKept those that kept a root unexpired that
	// no client uses, unreadForced the switches made while unread.
	unread                                    int
	unreadDecisions, unreadKept, unreadForced int
	// unreadAdoptions: adoptions decided with the clients unread (nothing
	// but the current root on record), checked against the same decision
	// with them read; adoptionsWaited: those that waited for the clients,
	// whose roots a decision made unread would have dropped.
	unreadAdoptions, adoptionsWaited int
	// the operator's actions, and what they made happen
	pauses, resumes, promotes                    int
	heldRenewals, promotedSwitches, pausedForced int
	promotesIgnored                              int
	// The hostile writers: what they did, and the keys of their CAs,
	// which nothing dualca writes may certify or carry.
	attacks      int
	attackerKeys map[string]bool
	// tampered: the gateway was written by someone else since the last
	// decision; the step-wise invariants start again from the next.
	tampered bool
	// The objects the gateway reads, apart from the record (m.gw): their
	// writes fail while writesFail (an outage, a policy), and the record's
	// while recordFails. The syncer writes the record beside them, so
	// either may land without the other: the objects ahead of the record
	// (its write lost), or behind it (theirs refused). written is the
	// bundle they last got, and writtenAt when each of its roots first
	// reached them, by dualca's clock.
	writesFail, recordFails bool
	// recordLate counts the decisions written to the objects the gateway
	// reads whose record write failed.
	recordLate int
	written    []*x509.Certificate
	writtenAt  map[string]time.Time
	// bornWith are the roots of the first bundle written: a gateway loads
	// its first bundle whole, with everything else, so no client was
	// working before it to be broken by it.
	bornWith map[string]bool
	// lateWrites counts the decisions made while the gateway lagged.
	lateWrites int
	// profile is the server leaf profile dualca runs with (m.timings.Server
	// points to it); the operator changes it at times.
	profile bundle.ServerProfile
	// leaf profile: leaves issued again, forced switches for a leaf's end,
	// profile changes
	reissues, leafForced, profileChanges int
	// The issuing Secret (issuing.go), in some histories: the clients'
	// Issuer signs with issuingCA (nil while absent: the Issuer waits)
	// instead of the root of the moment. issuingMoves counts dualca's
	// writes of it, issuingForced those the rule makes before the gateway
	// trusts the root (the root held expired, retired or foreign), and
	// issuedFromIssuing the clients it signed.
	issuingOn                                            bool
	issuingCA                                            *certs.CA
	issuingMoves, issuingForced, issuedFromIssuing, held int
	// The budget (budget.go), small in some histories so that it is
	// reached: room for a few roots. refused is whether the last decision
	// was; refusals and trimmed count what the budget did.
	budgeted          bool
	refused           bool
	refusals, trimmed int
	// overRefused is the root the issuing Secret was written over with,
	// found tampered or expired, while a refusal kept it from the gateway.
	overRefused *certs.CA
	// overUnvouched is the root the issuing Secret was last written over
	// with when what it held signed nothing the gateway accepts: expired,
	// not held by the gateway, or a CA dualca cannot vouch for (a hostile
	// writer's, or a root of the root Secret's that its record does not
	// know, which it cannot tell from a hostile writer's). Until the
	// objects the gateway reads get that root, what it signs is refused.
	// provenanceLost counts the roots of the root Secret's written over as
	// foreign.
	overUnvouched  *certs.CA
	provenanceLost int
	// waitMoves counts the issuing Secret's writes by passes that waited
	// for the clients.
	waitMoves int
}

func newModel(t *testing.T, seed uint64) *model {
	m := &model{
		t:       t,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:     time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		tracked: seed%5 != 0,
		timings: bundle.Timings{TrustPropagationDelay: 30 * time.Second, ServerSwitchGrace: 10 * time.Minute},
		current: map[string]int{},
		trace:   []string{fmt.Sprintf("seed %d (-model.seed=%d -model.histories=1 replays it)", seed, seed)},

		signatures: bundle.NewMemory(),
	}
	m.setProfile(m.randomProfile())
	m.rotate()
	if m.budgeted = seed%4 == 2; m.budgeted {
		// Room for three to five roots and a half: the current root, the
		// server's and the issuing Secret's, on which every client ends
		// up, always fit once the others have gone.
		one := bundle.EncodedLen([]*x509.Certificate{m.root.Cert})
		m.timings.Budget = bundle.Budget{Bundle: (3+m.rng.IntN(3))*one + one/2}
	}
	for i := range 1 + m.rng.IntN(5) {
		c := &modelClient{name: fmt.Sprintf("ns/client-%d", i), broken: m.rng.IntN(8) == 0}
		m.issue(c)
		m.clients = append(m.clients, c)
	}
	// From now on, in a third of the histories, the clients' Issuer reads
	// dualca's issuing Secret instead of the root Secret.
	m.issuingOn = seed%3 == 1
	return m
}

// randomProfile is a server leaf profile as the flags allow it: a third
// of its lifetime (35m to 3h) exceeds the grace and the propagation delay.
func (m *model) randomProfile() bundle.ServerProfile {
	p := bundle.ServerProfile{KeyAlgorithm: []bundle.KeyAlgorithm{bundle.KeyECDSAP256, bundle.KeyEd25519}[m.rng.IntN(2)],
		Lifetime: time.Duration(35+m.rng.IntN(146)) * time.Minute}
	if m.rng.IntN(3) > 0 {
		p.DNSNames = []string{fmt.Sprintf("gw-%d.example.com", m.rng.IntN(3))}
	}
	return p
}

func (m *model) setProfile(p bundle.ServerProfile) {
	m.profile = p
	m.timings.Server = &m.profile
}

// rotate makes a new root, as cert-manager does with a new key every time.
func (m *model) rotate() {
	m.rotation++
	life := time.Duration(20+m.rng.IntN(180)) * time.Minute
	notBefore := m.now.Add(-time.Minute)
	if m.rng.IntN(6) == 0 {
		// An issuer whose clock runs ahead, within the skew accepted.
		notBefore = m.now.Add(time.Duration(1+m.rng.IntN(240)) * time.Second)
	}
	m.rotateTo(fmt.Sprintf("root-%d", m.rotation), notBefore, m.now.Add(life))
}

// rotateTo makes a new root named name (its subject), a new key.
func (m *model) rotateTo(name string, notBefore, notAfter time.Time) {
	ca, err := certs.NewCA(name, notBefore, notAfter)
	if err != nil {
		m.t.Fatal(err)
	}
	m.root, m.rootBad = ca, false
}

// issue is cert-manager's CA issuer: a leaf from the root Secret as it is
// now, and ca.crt holding that root.
func (m *model) issue(c *modelClient) {
	life := time.Duration(10+m.rng.IntN(120)) * time.Minute
	issuer := m.root
	switch {
	case c.impostor != nil:
		issuer = c.impostor
	case m.issuingOn && m.issuingCA == nil:
		return // the Issuer's Secret is absent: it waits, and the client with it
	case m.issuingOn:
		issuer = m.issuingCA
		m.issuedFromIssuing++
		// 12. a client issued from the issuing Secret gets a leaf from a
		// root the objects the gateway reads hold (or from a CA a hostile
		// writer put there, which dualca trusts nowhere: provenance).
		foreign := m.attackerKeys[string(issuer.Cert.RawSubjectPublicKeyInfo)]
		m.check(m.legacy || foreign || m.written == nil || bundle.Contains(m.written, issuer.Cert) || issuer == m.overRefused || issuer == m.overUnvouched,
			"invariant 12: %s issued from the issuing Secret's %s, which the gateway's bundle does not hold", c.name, issuer.Cert.Subject.CommonName)
	}
	leaf, _, _, err := issuer.Leaf(c.name, m.now.Add(-time.Minute), m.now.Add(life))
	if err != nil {
		m.t.Fatal(err)
	}
	c.leaf, c.ca, c.requested, c.failed = leaf, []*x509.Certificate{issuer.Cert}, false, false
	c.read = bundle.NewClientLeaf(leaf, c.ca)
	if m.renewals%3 == 0 {
		c.read = bundle.NewClientLeaf(leaf, nil)
	}
	m.renewals++
	if c.hidden {
		// The new revision's CertificateRequest is one dualca sees.
		c.hidden = false
		m.revealedRenewed++
	}
}

func (m *model) clientView() bundle.Clients {
	cs := bundle.Clients{Tracked: m.tracked, Memory: m.signatures}
	if !m.tracked {
		return cs
	}
	if m.unread > 0 {
		cs.Unread = true
		return cs
	}
	for _, c := range m.clients {
		if c.hidden {
			// Whether its last renewal failed is on the Certificate, which
			// dualca still sees.
			cs.Items = append(cs.Items, bundle.Client{Name: c.name, Unknown: true, Failed: c.failed})
			continue
		}
		cs.Items = append(cs.Items, bundle.Client{Name: c.name, Leaf: c.read, CA: c.ca, Failed: c.failed})
	}
	return cs
}

// hiddenInView reports whether the view Plan gets holds an unknown client.
func (m *model) hiddenInView() bool {
	return m.tracked && (m.unread > 0 || slices.ContainsFunc(m.clients, func(c *modelClient) bool { return c.hidden }))
}

// servedPEM is the bundle the objects the gateway reads hold: the last
// written, which the record (m.gw) may be ahead of.
func (m *model) servedPEM() []byte {
	var out []byte
	for _, c := range m.written {
		out = append(out, pemOf(c)...)
	}
	return out
}

// restart is dualca starting again: in-flight renewals forgotten, and the
// client cache, half the time, still loading for the next reconciles.
func (m *model) restart() {
	for _, c := range m.clients {
		if c.requested && m.rng.IntN(2) == 0 {
			// Mid-renewal, cert-manager garbage-collected the CR of the
			// current revision, and the restart lost dualca's memory of it.
			c.hidden = true
			m.trace = append(m.trace, "restart hides "+c.name)
		}
		c.requested = false // a restart forgets in-flight requests; the annotations remain
	}
	m.trace = append(m.trace, "restart")
	if m.tracked && m.rng.IntN(2) == 0 {
		m.unread = 1 + m.rng.IntN(3)
		m.trace = append(m.trace, fmt.Sprintf("clients unread for %d reconciles", m.unread))
	}
}

// reconcile is one pass of the syncer: validate the root, decide, write
// only on change, then trigger the renewals the decision asks for.
func (m *model) reconcile() {
	defer func() { m.unread = max(0, m.unread-1) }() // each reconcile is one more the cache had to load
	if m.rootBad {
		return // an invalid root never reaches a decision: nothing is written
	}
	root, err := bundle.ValidateRoot(m.root.CertPEM, m.root.KeyPEM, m.root.CertPEM, m.now)
	if err != nil {
		return // expired root: cert-manager will renew it; the gateway stays
	}
	if !m.legacy && m.tracked && m.unread > 0 && bundle.Adopts(m.gw) {
		// An adoption decided with the clients unread, and with them read.
		unread := bundle.Plan(m.gw, root, m.clientView(), m.timings, m.now)
		left := m.unread
		m.unread = 0 // the same clients, read
		read := bundle.Plan(m.gw, root, m.clientView(), m.timings, m.now)
		m.unread = left
		same := string(unread.CAPEM) == string(read.CAPEM)
		if bundle.AdoptionWaits(m.gw, root) {
			if !same {
				m.adoptionsWaited++ // the clients' roots, which it would have dropped
			}
			// As the syncer does: this adoption waits for the clients to be
			// read, and the issuing Secret keeps to what the gateway trusts.
			m.trace = append(m.trace, "the adoption waits for the clients")
			if m.issuingOn && !m.writesFail {
				before := m.issuingMoves
				m.syncIssuing(bundle.Waiting(m.gw, [][]byte{m.servedPEM()}, root, m.now), root)
				m.waitMoves += m.issuingMoves - before
			}
			return
		}
		// No root but the current one on record: the clients cannot
		// change what it trusts, and it does not wait for them.
		m.unreadAdoptions++
		m.trace = append(m.trace, "adopted with the clients unread")
		m.check(same, "an adoption not waiting for the clients trusts what it would with them read: %v unread, %v read",
			fingerprints(unread.Roots), fingerprints(read.Roots))
	}
	if !m.legacy {
		m.gw.Lagging = m.lagging()
		m.gw.ServedSince = m.servedSince()
		if m.gw.Lagging {
			m.lateWrites++
		}
	}
	prev, prevAnnots := m.gw, m.annots
	var d bundle.Decision
	if m.legacy {
		d = legacy.Plan(m.gw, root, m.clientView(), m.now)
		for _, c := range m.clients {
			// legacy deletes the Secrets it lists: never one it cannot see.
			m.check(!c.hidden || !slices.Contains(d.Renew, c.name), "legacy: %s, hidden from dualca, listed for deletion", c.name)
		}
	} else {
		d = bundle.Plan(m.gw, root, m.clientView(), m.timings, m.now)
		again := bundle.Plan(m.gw, root, m.clientView(), m.timings, m.now)
		m.check(sameDecision(d, again), "the decision is deterministic")
	}
	before := m.written
	// lost: the objects the gateway reads got the decision, its record
	// did not (a crash, a record write refused): the invariants hold of
	// what they serve, and the next decision starts from the record as it
	// was. The other way round, the record got it and they did not: they
	// lag behind it until a write reaches them.
	lost := !m.writesFail && m.recordFails
	switch {
	case m.writesFail && m.recordFails:
		// Nothing written: nothing follows the decision.
		m.checkProvenance(prev, d, root)
		return
	case m.writesFail:
		m.apply(d)
	default:
		m.wrote(d.CAPEM)
		m.apply(d)
	}
	if lost {
		// The record as it was, and so whatever a hostile writer made of
		// it (the model's attacks write there): still tampered with.
		m.recordLate++
		tampered := m.tampered
		defer func() { m.gw, m.annots, m.tampered = prev, prevAnnots, tampered }()
	}
	m.checkProvenance(prev, d, root)
	switch {
	case !m.issuingOn || m.writesFail:
	case lost:
		// As the syncer does: the targets got the decision, its record
		// did not, and the issuing Secret only leaves a root they no
		// longer hold (the decision's timing is the stale record's).
		m.syncIssuing(bundle.Waiting(prev, [][]byte{d.CAPEM}, root, m.now), root)
	default:
		m.syncIssuing(d, root)
	}
	if m.legacy {
		m.check(string(m.gw.CAPEM) == string(root.CAPEM) && string(m.gw.CertPEM) == string(root.CertPEM) &&
			string(m.gw.KeyPEM) == string(root.KeyPEM), "legacy: the gateway is a plain copy of the root")
		return
	}
	m.checkBudget(prev, d, root)
	if m.refused {
		// The gateway as found, checked by checkBudget: the invariants
		// hold of what the last decision wrote, not of a plan refused.
		m.tampered = false
		return
	}
	m.checkInvariants(prev, d, root)
	switch {
	case m.tracked && m.unread > 0:
		m.unreadDecisions++
		m.checkUnread(prev, d, root)
	case m.hiddenInView():
		m.hiddenDecisions++
		m.checkHidden(d, root)
	}
	if !m.tampered {
		// A forged server credential is replaced at once, paused or not.
		m.checkControls(prev, d, root)
	}
	m.tampered = false
	if m.writesFail || lost {
		return // the reconcile fails: nothing follows the decision
	}
	// 8. a client that works (its leaf chains to a root of the gateway's
	// bundle) is moved to a root only once the objects the gateway reads
	// have held it for the propagation delay, however late they were
	// written after the record. A client on a root the gateway does not
	// trust, or that does not trust the root the server moved to (a forced
	// switch), cannot be broken further, and is moved at once.
	for _, c := range m.clients {
		if before == nil {
			break // the gateway gets the root with its first bundle
		}
		works := slices.ContainsFunc(before, func(r *x509.Certificate) bool { return m.signatures.ChainsTo(c.leaf, r) })
		if works && slices.Contains(d.Renew, c.name) && !m.signatures.ChainsTo(c.leaf, root.Cert) {
			ok, since := m.gatewayHadTime(root.Fingerprint)
			m.check(ok, "invariant 8: %s renewed onto %s, %s, now %v", c.name, root.Cert.Subject.CommonName, since, m.now)
		}
	}
	for _, name := range d.Renew {
		for _, c := range m.clients {
			if c.name == name {
				c.requested = true
			}
		}
	}
	// Invariant 6: deciding again on what was just written changes nothing.
	next := bundle.Plan(m.gw, root, m.clientView(), m.timings, m.now)
	m.check(string(next.CAPEM) == string(m.gw.CAPEM) && string(next.CertPEM) == string(m.gw.CertPEM) &&
		maps.Equal(next.State.Annotations(), m.annots), "a second decision on the same world writes nothing: %v then %v", credentialShape(m.gw.CertPEM), credentialShape(next.CertPEM))
	m.check(len(next.Events) == 0, "a second decision on the same world emits no event, got %v", next.Events)
}

// checkBudget checks the rule budget (budget.go) after every zero-downtime
// decision. A refused one is the gateway as found, byte for byte, with
// one Warning and no renewal, and only when even the roots nobody may
// trim (the current root, the server's, those a client uses, or all
// without tracking or with a client hidden) exceed the budget. Any other
// is within the budget, or no larger than the gateway it replaces, or
// replaces one dualca did not write; a root it trimmed was one no client
// uses, neither the current root nor the server's.
func (m *model) checkBudget(prev bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	b := m.timings.Budget
	m.refused = d.Refused != ""
	if m.refused {
		m.refusals++
		m.check(string(d.CAPEM) == string(prev.CAPEM) && string(d.CertPEM) == string(prev.CertPEM) && string(d.KeyPEM) == string(prev.KeyPEM) &&
			maps.Equal(d.State.Annotations(), prev.State.Annotations()), "refused, yet the decision is not the gateway as found")
		m.check(len(d.Renew) == 0, "refused, yet %d clients renewed", len(d.Renew))
		m.check(len(d.Events) == 1 && d.Events[0].Warning && d.Events[0].Reason == bundle.ReasonBundleTooLarge, "a refusal tells itself alone: %v", d.Events)
		m.check(b.Bundle > 0, "refused with the default budget: %s", d.Refused)
		needed := m.untrimmable(parsed(m.t, prev.CAPEM), prev, root)
		m.check(bundle.EncodedLen(needed) > b.Bundle, "refused, yet the roots nobody may trim (%v) fit in %d bytes", names(needed), b.Bundle)
		return
	}
	if b.Bundle > 0 && !m.tampered && prev.State.Strategy == bundle.StrategyZeroDowntime {
		m.check(len(d.CAPEM) <= b.Bundle || len(d.CAPEM) <= len(prev.CAPEM), "ca.crt of %d bytes, over its budget of %d and larger than the %d found", len(d.CAPEM), b.Bundle, len(prev.CAPEM))
	}
	if !prev.Exists {
		return
	}
	// The roots the server chain needs are checked by invariant 1 (every
	// client of a root in the bundle, current since the server's, verifies
	// the server), of the chain the decision made once trimmed.
	roots := parsed(m.t, d.CAPEM)
	for _, e := range d.Events {
		if e.Reason != bundle.ReasonRootTrimmed {
			continue
		}
		m.check(m.tracked && !m.hiddenInView(), "a root trimmed without client tracking, or while a client is hidden: %s", e.Message)
		for _, r := range parsed(m.t, prev.CAPEM) {
			fp := bundle.Fingerprint(r)
			if bundle.Contains(roots, r) || !strings.Contains(e.Message, bundle.Short(fp)) {
				continue
			}
			used := slices.ContainsFunc(m.clients, func(c *modelClient) bool { return !m.now.After(c.leaf.NotAfter) && m.signatures.ChainsTo(c.leaf, r) })
			m.check(!used && fp != root.Fingerprint && fp != d.State.Server, "root %s trimmed, but it is the current root, the server's or one in use", r.Subject.CommonName)
		}
	}
}

// untrimmable are the roots of bundleRoots that the budget may not trim,
// whatever the decision does with the server (a superset of those it
// keeps), and the current root: the server root of gw, every unexpired
// one a client uses (by what the client truly loads), or every unexpired
// one without client tracking or with a client hidden from dualca, and
// those gw's server chain runs through (its cross-certificates certify
// them or were signed by them) when a client uses any of them.
func (m *model) untrimmable(bundleRoots []*x509.Certificate, gw bundle.Gateway, root *bundle.Root) []*x509.Certificate {
	out := []*x509.Certificate{root.Cert}
	chain := certsOfPEM(gw.CertPEM)
	used := func(r *x509.Certificate) bool {
		return !m.tracked || m.hiddenInView() || slices.ContainsFunc(m.clients, func(c *modelClient) bool {
			return !m.now.After(c.leaf.NotAfter) && m.signatures.ChainsTo(c.leaf, r)
		})
	}
	onChain := func(r *x509.Certificate) bool {
		return slices.ContainsFunc(chain, func(c *x509.Certificate) bool {
			return c.IsCA && (string(c.RawSubjectPublicKeyInfo) == string(r.RawSubjectPublicKeyInfo) || m.signatures.ChainsTo(c, r))
		})
	}
	chainInUse := slices.ContainsFunc(bundleRoots, func(r *x509.Certificate) bool { return onChain(r) && used(r) })
	for _, r := range bundleRoots {
		fp := bundle.Fingerprint(r)
		if fp != root.Fingerprint && !m.now.After(r.NotAfter) && (fp == gw.State.Server || used(r) || onChain(r) && chainInUse) {
			out = append(out, r)
		}
	}
	return out
}

// syncIssuing is the syncer's issuing step, after the targets are
// written: the rule decides, and a write puts the root Secret's credential
// there. Invariant 12: a move to a root the issuing Secret did not hold,
// from a root the gateway still trusts, comes once the objects the gateway
// reads have held that root for the propagation delay (or since their
// first bundle, or the server is on it already); the rule moves earlier
// only off a root that is expired, retired or foreign, which signs nothing
// a gateway accepts anyway.
func (m *model) syncIssuing(d bundle.Decision, root *bundle.Root) {
	found := bundle.IssuingFound{}
	if ca := m.issuingCA; ca != nil {
		found = bundle.ReadIssuing(ca.CertPEM, ca.KeyPEM, ca.CertPEM, m.now)
	}
	a := bundle.Issuing(found, d, root, m.now)
	m.check(a.Holds == "" || a.Write || (found.Root != nil && a.Holds == found.Root.Fingerprint), "issuing: holds what it found unless it writes")
	// Holding the current root, the only credential dualca has, while
	// this decision's refusal (m.refused is set after) keeps it out of the
	// gateway: what it signs is refused, as what an Issuer reading the
	// root Secret would sign.
	refusedCurrent := d.Refused != "" && a.Holds == root.Fingerprint &&
		!slices.ContainsFunc(m.written, func(c *x509.Certificate) bool { return sameCert(c, root.Cert) })
	if !a.Write {
		if refusedCurrent {
			m.overRefused = m.issuingCA
		}
		if found.Root != nil && found.Root.Fingerprint != root.Fingerprint {
			m.held++
		}
		return
	}
	m.check(a.Holds == root.Fingerprint, "issuing: a write puts the current root there")
	prev := found.Root
	m.issuingCA = m.root
	m.issuingMoves++
	if m.legacy {
		return
	}
	usable := prev != nil && !a.Tampered && !m.now.After(prev.Cert.NotAfter) && slices.ContainsFunc(m.written, func(c *x509.Certificate) bool { return sameCert(c, prev.Cert) })
	if refusedCurrent {
		m.overRefused = m.issuingCA
	}
	if prev != nil && prev.Fingerprint == root.Fingerprint {
		return
	}
	if prev != nil && a.Tampered {
		if !m.attackerKeys[string(prev.Cert.RawSubjectPublicKeyInfo)] {
			// A root of the root Secret's that the record does not know:
			// written there while the record's writes failed, or by a
			// pass that waited for the clients (it writes no record),
			// and forgotten (a restart, another root meanwhile). Never
			// else.
			m.provenanceLost++
			m.check(m.recordLate > 0 || m.waitMoves > 0, "issuing: root %s, read from the root Secret, written over as foreign, though no record write was lost and no waiting pass wrote it", prev.Cert.Subject.CommonName)
		}
	}
	if prev != nil && !usable {
		// Written over a root that signs nothing the gateway accepts
		// (expired, not held by it, or a CA dualca cannot vouch for)
		// with the only credential dualca holds. Until the objects the
		// gateway reads get that root (at once, but not while an
		// adoption waits or their writes fail), what it signs is
		// refused, as what it replaced would be.
		m.issuingForced++
		m.overUnvouched = m.issuingCA
		return
	}
	ok, since := m.gatewayHadTime(root.Fingerprint)
	m.check(ok, "invariant 12: the issuing Secret moved to %s, %s, now %v, phase %s: %s", root.Cert.Subject.CommonName, since, m.now, d.State.Phase, a.Reason)
}

// gatewayHadTime reports whether dualca may depend on the gateway trusting
// the root fp (invariants 8 and 12): the objects the gateway reads have
// held it for the propagation delay, or got it with their first bundle,
// or the server presents it already (a first install, a forced switch).
// since says when they first held it, for a message.
func (m *model) gatewayHadTime(fp string) (ok bool, since string) {
	at, written := m.writtenAt[fp]
	since = fmt.Sprintf("in the gateway's bundle since %v (written: %v)", at, written)
	if m.bornWith[fp] || m.gw.State.Server == fp {
		return true, since
	}
	return written && !m.now.Before(at.Add(m.timings.TrustPropagationDelay)), since
}

// lagging is what the syncer tells the decision: the objects the gateway
// reads were written before and lack the root the record says is current.
func (m *model) lagging() bool {
	if m.written == nil || m.gw.State.Root == "" {
		return false
	}
	_, ok := m.writtenAt[m.gw.State.Root]
	return !ok
}

// servedSince is when the objects the gateway reads got the recorded
// current root, as the syncer reads it from dualca's own (sealed) write of
// the primary target: here, when they first held it.
func (m *model) servedSince() time.Time {
	return m.writtenAt[m.gw.State.Root]
}

// wrote records a write of the objects the gateway reads.
func (m *model) wrote(ca []byte) {
	roots := parsed(m.t, ca)
	if m.written == nil {
		m.bornWith = map[string]bool{}
		for _, c := range roots {
			m.bornWith[bundle.Fingerprint(c)] = true
		}
	}
	at := map[string]time.Time{}
	for _, c := range roots {
		fp := bundle.Fingerprint(c)
		if t, ok := m.writtenAt[fp]; ok {
			at[fp] = t
		} else {
			at[fp] = m.now
		}
	}
	m.written, m.writtenAt = roots, at
}

// apply stores a decision the way the API server would: data as bytes,
// annotations as strings read back through ParseState.
func (m *model) apply(d bundle.Decision) {
	if m.gw.Exists && string(d.CAPEM) == string(m.gw.CAPEM) && string(d.CertPEM) == string(m.gw.CertPEM) &&
		maps.Equal(d.State.Annotations(), m.annots) {
		m.check(len(d.Events) == 0 || d.Refused != "", "an unchanged gateway comes with no event, got %v", d.Events)
		// The record still takes what the decision knows (the syncer
		// writes it whenever it differs): a refusal knows the current
		// root it keeps out.
		m.gw.Known = d.Known
		return
	}
	for _, e := range d.Events {
		switch e.Reason {
		case bundle.ReasonRootTrimmed:
			m.trimmed++
		case bundle.ReasonServerSwitched:
			m.switches++
		case bundle.ReasonServerSwitchForced:
			m.forced++
		case bundle.ReasonPromoteIgnored:
			m.promotesIgnored++
		case bundle.ReasonRootRetired:
			m.retired++
		case bundle.ReasonServerLeafReissued:
			m.reissues++
		}
		if e.Reason == bundle.ReasonServerSwitchForced && strings.Contains(e.Message, "the server certificate expires") {
			m.leafForced++
		}
	}
	m.annots = d.State.Annotations()
	m.gw = bundle.Gateway{Exists: true, CertPEM: d.CertPEM, KeyPEM: d.KeyPEM, CAPEM: d.CAPEM, State: bundle.ParseState(m.annots), Known: d.Known}
}

func (m *model) checkInvariants(prev bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	roots := parsed(m.t, m.gw.CAPEM)
	server := bundle.Find(roots, m.gw.State.Server)

	// 1. ca.crt holds the root the server certificate chains to.
	m.check(server != nil, "invariant 1: the server root %s is in the bundle", bundle.Short(m.gw.State.Server))
	// A clock that went back may sit before a root's NotBefore, where no
	// verifier accepts it; chains are checked from the moment both are valid.
	// (A cross-certificate is valid from the later of its two roots'
	// NotBefore; one through a root not valid yet, from an issuer whose
	// clock runs ahead, is not a path a client needs now.)
	leaf := parsed(m.t, m.gw.CertPEM)[0]
	at := func(r *x509.Certificate) time.Time {
		return slices.MaxFunc([]time.Time{m.now, r.NotBefore, server.NotBefore, leaf.NotBefore}, time.Time.Compare)
	}
	m.check(m.verify(server, at(server)) == nil, "invariant 1: the server certificate chains to the recorded server root")
	// Every client that trusts the server root or the current root accepts
	// the server: the cross-certificates make the renewed ones trust it.
	// So does a client that trusts a root newer than the server's that was
	// current at some decision (it cross-signed the server root then) and is
	// still in the bundle: R2's clients while R3 overlaps R2's rotation.
	if _, ok := m.current[bundle.Fingerprint(root.Cert)]; !ok {
		m.current[bundle.Fingerprint(root.Cert)] = len(m.current) + 1
	}
	for _, c := range m.clients {
		for _, r := range c.ca {
			became, ok := m.current[bundle.Fingerprint(r)]
			newer := ok && became > m.current[bundle.Fingerprint(server)] && bundle.Contains(roots, r)
			if sameCert(r, server) || sameCert(r, root.Cert) || newer {
				err := m.verify(r, at(r))
				m.check(err == nil, "client %s trusting %s cannot verify the server (root %s, chain %v, bundle %v): %v", c.name, r.Subject.CommonName,
					server.Subject.CommonName, credentialShape(m.gw.CertPEM), names(roots), err)
			}
		}
	}
	// 5. only valid CAs, deduplicated, deterministic order; tls pair matches.
	m.check(slices.EqualFunc(roots, bundle.Normalize(roots, m.now), sameCert), "invariant 5: the bundle is normalized")
	for _, r := range roots {
		// A clock that went back may see a root as not yet valid; it stays
		// (never dropped for a clock), but it must be a CA and unexpired.
		at := m.now
		if at.Before(r.NotBefore) {
			at = r.NotBefore
		}
		m.check(bundle.CheckCA("ca.crt", r, at) == nil && !m.now.After(r.NotAfter), "invariant 5: %s in the bundle is a valid CA (now %s, valid %s to %s, server %s, root %s)", r.Subject.CommonName, m.now, r.NotBefore, r.NotAfter, server.Subject.CommonName, root.Cert.Subject.CommonName)
	}
	m.check(bundle.KeyMatches(m.gw.CertPEM, m.gw.KeyPEM), "invariant 5: tls.crt and tls.key match")
	m.checkLeaf(leaf, server, root)
	m.check(bundle.Contains(roots, root.Cert), "the current root is in the bundle")

	if !prev.Exists || prev.State.Strategy != bundle.StrategyZeroDowntime || m.tampered {
		return // adoption, or a Secret someone else wrote: the step-wise invariants start from here
	}
	before := parsed(m.t, prev.CAPEM)
	prevServer := prev.State.Server
	switched := bundle.Fingerprint(server) == root.Fingerprint
	// 2 and 3. a root leaves only by retirement, never because a rotation came.
	for _, r := range before {
		if bundle.Contains(roots, r) {
			continue
		}
		expired := !m.now.Before(r.NotAfter)
		unused := switched && m.tracked && !m.now.Before(m.gw.State.SwitchedAt.Add(m.timings.TrustPropagationDelay)) && !slices.ContainsFunc(m.clients, func(c *modelClient) bool {
			return !m.now.After(c.leaf.NotAfter) && m.signatures.ChainsTo(c.leaf, r)
		})
		// Or trimmed to keep the bundle within its budget: checkBudget
		// checked that nobody uses it.
		trimmed := slices.ContainsFunc(d.Events, func(e bundle.Event) bool {
			return e.Reason == bundle.ReasonRootTrimmed && strings.Contains(e.Message, bundle.Short(bundle.Fingerprint(r)))
		})
		m.check(expired || unused || trimmed, "invariants 2/3: root %s left the bundle while still needed", r.Subject.CommonName)
		// A hidden client may be on any root: only expiry retires one.
		m.check(expired || !m.hiddenInView(), "invariants 2/3: root %s left the bundle unexpired while a client was hidden", r.Subject.CommonName)
		m.check(bundle.Fingerprint(r) != bundle.Fingerprint(server), "invariant 2: the server root was retired")
	}
	for _, c := range m.clients {
		for _, r := range before {
			// A root that expired is useless to its leaves too: it may go.
			if m.now.Before(c.leaf.NotAfter) && m.now.Before(r.NotAfter) && m.signatures.ChainsTo(c.leaf, r) {
				m.check(bundle.Contains(roots, r), "invariant 3: %s's root %s dropped", c.name, r.Subject.CommonName)
			}
		}
	}
	// 4. the server moves only to the current root, and only when every
	// client trusts it, or forced with a Warning.
	if bundle.Fingerprint(server) != prevServer {
		m.check(switched, "invariant 4: the server moved to a root other than the current one")
		ready := !slices.ContainsFunc(m.clients, func(c *modelClient) bool { return !bundle.Contains(c.ca, server) })
		warned := slices.ContainsFunc(d.Events, func(e bundle.Event) bool {
			return e.Warning && e.Reason == bundle.ReasonServerSwitchForced
		})
		m.check(!m.tracked || ready || warned, "invariant 4: server switched while clients were not ready, without a Warning")
		// The truth may be ready, but dualca cannot know it of a hidden
		// client: only a forced switch may move the server then.
		m.check(!m.hiddenInView() || warned, "invariant 4: server switched without a Warning while a client was hidden")
		m.check(!m.now.Before(m.gw.State.RootAddedAt.Add(m.timings.TrustPropagationDelay)) || warned,
			"the server switched before the gateway could load the new root")
		m.check(!m.now.Before(server.NotBefore) || warned || prevServer == "",
			"the server switched to root %s before it is valid", server.Subject.CommonName)
	}
	// 7. nothing is issued from a root before it is valid: no verifier
	// would accept it (an issuer whose clock runs ahead).
	m.check(len(d.Renew) == 0 || !m.now.Before(root.Cert.NotBefore),
		"invariant 7: clients renewed onto root %s before it is valid (%s < %s)", root.Cert.Subject.CommonName, m.now, root.Cert.NotBefore)
}

// checkLeaf checks the served leaf: valid while its root is (the switch
// comes before a leaf dualca cannot renew expires), and, after a decision
// with the key at hand (the server on the current root), matching the
// profile, valid now and short of its re-issue margin unless it ends with
// its root.
func (m *model) checkLeaf(leaf, server *x509.Certificate, root *bundle.Root) {
	if leaf.IsCA {
		m.check(false, "a zero-downtime decision serves a CA as the server certificate")
	}
	if !m.now.Before(server.NotBefore) && !m.now.After(server.NotAfter) {
		m.check(!m.now.After(leaf.NotAfter), "the served leaf expired at %s while its root %s is valid (now %s)", leaf.NotAfter, server.Subject.CommonName, m.now)
	}
	if bundle.Fingerprint(server) != root.Fingerprint {
		return
	}
	m.check(m.profile.Mismatch(leaf, server) == "", "the leaf on the current root does not match the profile: %s", m.profile.Mismatch(leaf, server))
	m.check(!m.now.Before(leaf.NotBefore) && !m.now.After(leaf.NotAfter), "the leaf on the current root is not valid now (%s): %s to %s", m.now, leaf.NotBefore, leaf.NotAfter)
	m.check(!leaf.NotAfter.Before(server.NotAfter) || m.now.Before(leaf.NotAfter.Add(-m.profile.ReissueMargin())),
		"the leaf on the current root is within its re-issue margin (expires %s, now %s)", leaf.NotAfter, m.now)
}

// checkHidden checks a zero-downtime decision made with hidden clients in
// view: each is due whenever any client is (it is on no root), and counts
// how often a root stayed in the bundle for them alone.
// checkUnread checks a decision made while the clients were not read yet:
// nothing renewed, the recorded progress and readiness stamp kept (the
// stamp is cleared only by a new root or a switch), and the server moved
// only by force. checkInvariants holds it to what a hidden client gets:
// no root leaves unexpired.
func (m *model) checkUnread(prev bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	m.check(len(d.Renew) == 0, "unread clients: %v renewed", d.Renew)
	was, is := prev.State.Clients, d.State.Clients
	m.check((was == nil) == (is == nil) && (was == nil || *was == *is), "unread clients: the recorded progress %v became %v", was, is)
	// Kept, cleared, or (recorded after now by a clock that went back)
	// brought back to now, as rotate.go does with every recorded moment.
	backToNow := prev.State.ClientsReadyAt.After(m.now) && !d.State.ClientsReadyAt.After(m.now.Add(time.Second))
	m.check(d.State.ClientsReadyAt.Equal(prev.State.ClientsReadyAt) || d.State.ClientsReadyAt.IsZero() || backToNow,
		"unread clients: the readiness stamp %s became %s", prev.State.ClientsReadyAt, d.State.ClientsReadyAt)
	if prev.Exists && d.State.Server != prev.State.Server {
		m.unreadForced++
		m.check(slices.ContainsFunc(d.Events, func(e bundle.Event) bool { return e.Warning }), "unread clients: the server switched without a Warning")
	}
	for _, r := range parsed(m.t, d.CAPEM) {
		fp := bundle.Fingerprint(r)
		if fp != root.Fingerprint && fp != d.State.Server && !m.now.After(r.NotAfter) &&
			!slices.ContainsFunc(m.clients, func(c *modelClient) bool {
				return !m.now.After(c.leaf.NotAfter) && m.signatures.ChainsTo(c.leaf, r)
			}) {
			m.unreadKept++
			return
		}
	}
}

func (m *model) checkHidden(d bundle.Decision, root *bundle.Root) {
	for _, c := range m.clients {
		if c.hidden && len(d.Renew) > 0 {
			m.check(slices.Contains(d.Renew, c.name), "%s, hidden, is not due while %v are", c.name, d.Renew)
		}
	}
	if d.State.Clients != nil {
		hidden := 0
		for _, c := range m.clients {
			if c.hidden {
				hidden++
			}
		}
		m.check(d.State.Clients.Pending+d.State.Clients.Failed >= hidden, "%d hidden clients, progress %+v counts some renewed", hidden, *d.State.Clients)
	}
	server := m.gw.State.Server
	if server != root.Fingerprint || m.now.Before(m.gw.State.SwitchedAt.Add(m.timings.TrustPropagationDelay)) {
		return
	}
	view := m.clientView()
	for _, r := range parsed(m.t, m.gw.CAPEM) {
		fp := bundle.Fingerprint(r)
		if fp == root.Fingerprint || fp == server || m.now.After(r.NotAfter) {
			continue
		}
		if !slices.ContainsFunc(view.Items, func(c bundle.Client) bool { return !c.Unknown && c.Uses(r, m.now) }) {
			m.heldForHidden++
			return
		}
	}
}

// checkControls checks that dualca obeys the operator: while paused no
// client is renewed and the server moves only when it cannot wait (its root
// expiring, its chain full) or on a promote, with a Warning; a promote is
// one-shot: it is gone once the server presents the root it named, and it
// never survives a newer root.
func (m *model) checkControls(prev bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	paused, _ := bundle.PauseRequested(prev.State.Paused)
	moved := prev.Exists && prev.State.Strategy == bundle.StrategyZeroDowntime && m.gw.State.Server != prev.State.Server
	promote := prev.State.Promote
	if paused {
		m.check(len(d.Renew) == 0, "paused: %d clients renewed", len(d.Renew))
		if pending := d.State.Clients; pending != nil && pending.Pending > 0 && m.gw.State.Phase != bundle.PhaseBundle {
			m.heldRenewals++
		}
	}
	var forcedWhy string
	for _, e := range d.Events {
		if e.Reason == bundle.ReasonServerSwitchForced || e.Reason == bundle.ReasonServerSwitched {
			forcedWhy = e.Message
			m.check(!paused || e.Warning || strings.Contains(e.Message, "promoted"), "paused: a planned switch: %s", e.Message)
		}
	}
	promoted := strings.Contains(forcedWhy, "promoted by the operator")
	if moved && paused {
		m.check(forcedWhy != "", "paused: the server moved without an event")
		if !promoted {
			m.pausedForced++
			m.check(strings.Contains(forcedWhy, "expires") || strings.Contains(forcedWhy, "cross-certificates"),
				"paused: the server moved for another reason than its root expiring: %s", forcedWhy)
		}
	}
	if promoted {
		m.promotedSwitches++
		m.check(moved && promote == root.Fingerprint, "a promote switch without a promote of the current root")
	}
	if moved && promote == root.Fingerprint && !promoted && !m.now.Before(m.gw.State.RootAddedAt.Add(m.timings.TrustPropagationDelay)) {
		m.check(forcedWhy != "", "the server moved with a promote pending, without an event")
	}
	// One-shot: a promote left on the Secret names the current root, which
	// the server does not present yet.
	if p := m.gw.State.Promote; p != "" {
		m.check(p == root.Fingerprint && m.gw.State.Server != root.Fingerprint,
			"a promote outlived its use: promote %s, root %s, server %s", bundle.Short(p), bundle.Short(root.Fingerprint), bundle.Short(m.gw.State.Server))
	}
	if moved && promote != "" {
		m.check(m.gw.State.Promote == "", "the switch did not consume the promote")
	}
	// A pause is recorded once obeyed, and forgotten once lifted.
	now, _ := bundle.PauseRequested(m.gw.State.Paused)
	m.check(now == !m.gw.State.PausedAt.IsZero(), "paused=%v but paused-at %v", now, m.gw.State.PausedAt)
}

// checkProvenance checks the trust invariant after every decision of
// either strategy, whatever a hostile writer did before it: dualca trusts
// and signs for only roots it read from the root Secret. Every root of
// ca.crt and every CA certificate of tls.crt is one of them (a CA there
// certifies such a root's key), no key a hostile writer made is certified
// or carried, and the roots remembered as read from the root Secret grow
// only by the root Secret itself.
func (m *model) checkProvenance(prev bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	known := append(slices.Clone(prev.Known), root.Cert)
	read := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(known, func(k *x509.Certificate) bool {
			return string(k.RawSubjectPublicKeyInfo) == string(c.RawSubjectPublicKeyInfo)
		})
	}
	for _, r := range parsed(m.t, d.CAPEM) {
		m.check(bundle.Contains(known, r), "provenance: ca.crt holds %s, which dualca never read from the root Secret", r.Subject.CommonName)
	}
	for i, c := range parsed(m.t, d.CertPEM) {
		m.check(!m.attackerKeys[string(c.RawSubjectPublicKeyInfo)], "provenance: tls.crt certificate %d (%s) certifies a hostile writer's key", i, c.Subject.CommonName)
		if c.IsCA {
			m.check(read(c), "provenance: tls.crt CA certificate %d (%s) certifies a key not read from the root Secret", i, c.Subject.CommonName)
		}
		m.check(slices.ContainsFunc(known, func(k *x509.Certificate) bool { return c.CheckSignatureFrom(k) == nil }) || (m.legacy && read(c)),
			"provenance: tls.crt certificate %d (%s) is signed by no root read from the root Secret", i, c.Subject.CommonName)
	}
	for _, k := range d.Known {
		m.check(bundle.Contains(known, k), "provenance: %s is remembered as read from the root Secret, but was not", k.Subject.CommonName)
	}
}

// attack is what a hostile writer can do: whoever may patch the gateway
// Secret (an operator's Role), or create an Issuer and a Certificate in a
// client namespace (the "edit" role). The syncer starts its decisions from
// its own record, so the first three never reach Plan there; Plan must
// hold the trust invariant even if they did.
func (m *model) attack() {
	impostor, err := certs.NewCA(m.root.Cert.Subject.CommonName, m.now.Add(-time.Hour), m.now.Add(time.Duration(1+m.rng.IntN(48))*time.Hour))
	if err != nil {
		m.t.Fatal(err)
	}
	if m.attackerKeys == nil {
		m.attackerKeys = map[string]bool{}
	}
	m.attackerKeys[string(impostor.Cert.RawSubjectPublicKeyInfo)] = true
	m.attacks++
	if m.annots == nil {
		m.annots = map[string]string{}
	}
	switch m.rng.IntN(5) {
	case 0:
		// A CA of one's own in ca.crt, the recorded hash and roots made to match.
		m.gw.CAPEM = append(slices.Clone(m.gw.CAPEM), impostor.CertPEM...)
		m.annots[bundle.AnnotationBundleHash] = bundle.Hash(m.gw.CAPEM)
		m.annots[bundle.AnnotationBundleRoots] = strings.Join(append(m.gw.State.BundleRoots, bundle.Fingerprint(impostor.Cert)), ",")
		m.trace = append(m.trace, "attack: impostor CA added to ca.crt with a matching bundle-hash")
	case 1:
		// A CA of one's own as the server, recorded as the server root, and
		// paused so that nothing switches back: dualca must not complete
		// its "chain" with a cross-certificate from the root.
		m.gw.CertPEM, m.gw.KeyPEM = impostor.CertPEM, impostor.KeyPEM
		m.annots[bundle.AnnotationServer] = bundle.Fingerprint(impostor.Cert)
		m.annots[bundle.AnnotationPaused] = bundle.PausedTrue
		m.trace = append(m.trace, "attack: impostor CA as tls.crt/tls.key, server-fingerprint set to it, paused")
	case 2:
		// The strategy removed, so that the Secret is adopted, with the
		// impostor in ca.crt.
		m.gw.CAPEM = append(slices.Clone(m.gw.CAPEM), impostor.CertPEM...)
		delete(m.annots, bundle.AnnotationStrategy)
		m.trace = append(m.trace, "attack: strategy annotation removed, impostor CA in ca.crt")
	case 3:
		if !m.issuingOn {
			return
		}
		// A CA of one's own in the issuing Secret: cert-manager signs with
		// it until dualca writes the root over it.
		m.issuingCA = impostor
		m.trace = append(m.trace, "attack: impostor CA in the issuing Secret")
		return
	default:
		// An Issuer on a CA with the root's subject signs a selected
		// client's Certificate in a namespace the attacker may edit.
		c := &modelClient{name: fmt.Sprintf("attacker/agent-%d", m.attacks), impostor: impostor}
		m.issue(c)
		m.clients = append(m.clients, c)
		m.trace = append(m.trace, "attack: a client issued by an impostor CA with the root's subject")
		return
	}
	m.gw.State = bundle.ParseState(m.annots)
	m.tampered = true
}

// operate is what `dualca pause`, `dualca resume` and `dualca promote` do:
// patch an annotation of the gateway Secret, whatever dualca is doing.
func (m *model) operate(n int) {
	if m.annots == nil {
		m.annots = map[string]string{}
	}
	switch n {
	case 0, 1:
		v := bundle.PausedTrue
		if m.rng.IntN(5) == 0 {
			v = "yes" // not a value dualca knows: read as paused, with a Warning
		}
		m.annots[bundle.AnnotationPaused] = v
		m.pauses++
		m.trace = append(m.trace, "operator: pause ("+v+")")
	case 2, 3:
		if m.rng.IntN(4) == 0 {
			m.annots[bundle.AnnotationPaused] = bundle.PausedFalse
		} else {
			delete(m.annots, bundle.AnnotationPaused)
		}
		m.resumes++
		m.trace = append(m.trace, "operator: resume")
	default:
		// The current root as the gateway records it, as `dualca promote`
		// reads it: a root newer than the record makes the promote stale.
		if fp := m.gw.State.Root; fp != "" {
			m.annots[bundle.AnnotationPromote] = fp
			m.promotes++
			m.trace = append(m.trace, "operator: promote "+bundle.Short(fp))
		}
	}
	m.gw.State = bundle.ParseState(m.annots)
}

// verify is verifyServer of the gateway's credential, remembered.
func (m *model) verify(trust *x509.Certificate, at time.Time) error {
	key := [2]string{bundle.Hash(m.gw.CertPEM), bundle.Fingerprint(trust)}
	if err, ok := m.verified[key]; ok {
		return err
	}
	if m.verified == nil {
		m.verified = map[[2]string]error{}
	}
	err := verifyServer(m.gw.CertPEM, trust, at)
	m.verified[key] = err
	return err
}

func (m *model) check(ok bool, format string, args ...any) {
	m.t.Helper()
	if !ok {
		m.t.Fatalf("%s\nhistory:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.trace, "\n  "))
	}
}

// step does one random thing to the world and reconciles.
func (m *model) step() {
	switch n := m.rng.IntN(118); {
	case n >= 115:
		if m.rng.IntN(2) == 0 {
			m.writesFail = !m.writesFail
			m.trace = append(m.trace, fmt.Sprintf("gateway writes fail=%v", m.writesFail))
		} else {
			m.recordFails = !m.recordFails
			m.trace = append(m.trace, fmt.Sprintf("record writes fail=%v", m.recordFails))
		}
	case n >= 113:
		// The operator changes the server profile (a new name, another
		// algorithm or lifetime), and dualca restarts with it.
		m.setProfile(m.randomProfile())
		m.profileChanges++
		m.trace = append(m.trace, fmt.Sprintf("server profile: %v %s %s", m.profile.DNSNames, m.profile.KeyAlgorithm, m.profile.Lifetime))
	case n >= 112:
		// A hidden client's CR is found again, its credential unchanged
		// (restored by hand): back in view without a renewal.
		if hidden := slices.DeleteFunc(slices.Clone(m.clients), func(c *modelClient) bool { return !c.hidden }); len(hidden) > 0 {
			c := hidden[m.rng.IntN(len(hidden))]
			c.hidden = false
			m.revealedAsWas++
			m.trace = append(m.trace, "seen again as it was: "+c.name)
		}
	case n >= 109:
		// The CR of a client's revision is gone and dualca has no memory
		// of it; the client still loads what it had.
		c := m.clients[m.rng.IntN(len(m.clients))]
		c.hidden = true
		m.trace = append(m.trace, "hidden from dualca: "+c.name)
	case n >= 106:
		m.attack()
	case n >= 100:
		m.operate(n - 100)
	case n < 8:
		m.rotate()
		m.trace = append(m.trace, "rotate to "+m.root.Cert.Subject.CommonName)
	case n < 10:
		m.rootBad = true
		m.trace = append(m.trace, "root becomes invalid")
	case n < 12:
		m.rootBad = false
		m.trace = append(m.trace, "root fixed")
	case n < 40:
		// cert-manager completes some triggered renewals, some fail
		for _, c := range m.clients {
			if c.requested && m.rng.IntN(2) == 0 {
				if c.broken {
					c.failed, c.requested = true, false
				} else {
					m.issue(c)
				}
			}
		}
		m.trace = append(m.trace, "renewals progress")
	case n < 44:
		c := m.clients[m.rng.IntN(len(m.clients))]
		if !c.broken {
			m.issue(c) // cert-manager renews on its own schedule, from the root of the moment
		}
		m.trace = append(m.trace, "spontaneous renewal of "+c.name)
	case n < 47:
		m.restart()
	case n < 49:
		if m.legacy && !m.writesFail && !m.recordFails && m.rng.IntN(2) == 0 {
			// Legacy copies a new root of the same subject (cert-manager
			// renewing the same CA) and asks for the clients' renewals;
			// dualca restarts in zero-downtime before they are done. The
			// legacy copy holds the new root alone: the roots the clients
			// still use are in their ca.crt only, and the adoption must
			// keep them (clientRoots), whether the cache has loaded or not.
			m.rotateTo(m.root.Cert.Subject.CommonName, m.now.Add(-time.Minute), m.now.Add(time.Duration(20+m.rng.IntN(180))*time.Minute))
			m.trace = append(m.trace, "legacy: rotate to "+m.root.Cert.Subject.CommonName+" again, the same subject")
			m.reconcile()
			m.legacy = false
			m.trace = append(m.trace, "legacy=false")
			m.restart()
			break
		}
		// The strategy is a flag: a flip is a start with the other one
		// (a new pod, or a leader of the other flag taking over).
		m.legacy = !m.legacy
		m.trace = append(m.trace, fmt.Sprintf("legacy=%v", m.legacy))
		m.restart()
	case n < 51:
		d := -time.Duration(m.rng.IntN(300)) * time.Second
		m.now = m.now.Add(d)
		for fp, at := range m.writtenAt {
			if at.After(m.now) {
				m.writtenAt[fp] = m.now // as a recorded moment is (rotate.go)
			}
		}
		m.trace = append(m.trace, "clock back "+d.String())
	case n < 55:
		d := time.Duration(m.rng.IntN(40)) * time.Minute
		m.now = m.now.Add(d)
		m.trace = append(m.trace, "clock jumps "+d.String())
	default:
		d := time.Duration(1+m.rng.IntN(20)) * time.Second
		m.now = m.now.Add(d)
		m.trace = append(m.trace, "tick "+d.String())
	}
	// Expired leaves are renewed by cert-manager before anything else.
	for _, c := range m.clients {
		if !m.now.Before(c.leaf.NotAfter.Add(-time.Minute)) && !c.broken {
			m.issue(c)
		}
	}
	if m.root.Cert.NotAfter.Before(m.now.Add(5 * time.Minute)) {
		m.rotate() // cert-manager renews the root before it expires
		m.trace = append(m.trace, "root renewed before expiry: "+m.root.Cert.Subject.CommonName)
	}
	m.reconcile()
}

// settle stops rotations and lets everything finish: every selected client
// must end on the current root, the server on it, and old roots retired.
func (m *model) settle() {
	if m.legacy {
		m.legacy = false
		m.trace = append(m.trace, "settle: legacy=false")
		m.restart()
	}
	m.rootBad, m.writesFail, m.recordFails = false, false, false
	if m.annots != nil {
		delete(m.annots, bundle.AnnotationPaused)
		m.gw.State = bundle.ParseState(m.annots)
	}
	for _, c := range m.clients {
		c.broken = false
	}
	m.reconcile()
	// A refusal (budget.go) lasts until the roots it keeps for the clients
	// and the server's chain expire, or the server root nears its expiry
	// and the server switches: time passes, cert-manager renewing what
	// expires, until the plan fits; a rotation meanwhile may start over.
	// Another round, too, when a refusal that lasted into the rotation
	// left the clients too little of it to move (their issuing Secret
	// moves only once the gateway has the root).
	for round := 0; round == 0 || (m.refused || m.tracked && m.gw.State.Phase != bundle.PhaseSteady) && round < 3; round++ {
		for i := 0; m.refused && i < 60; i++ {
			m.now = m.now.Add(10 * time.Minute)
			for _, c := range m.clients {
				if !m.now.Before(c.leaf.NotAfter.Add(-time.Minute)) {
					m.issue(c)
				}
			}
			if m.root.Cert.NotAfter.Before(m.now.Add(5 * time.Minute)) {
				m.rotate()
			}
			m.trace = append(m.trace, "settle: refused, 10m pass")
			m.reconcile()
		}
		if m.root.Cert.NotAfter.Before(m.now.Add(2 * time.Hour)) {
			m.rotate()
			m.trace = append(m.trace, "settle: root renewed before expiry")
		}
		m.settleRotation()
	}
	if !m.tracked {
		// Without client tracking, old roots wait for their expiry.
		m.now = m.now.Add(4 * time.Hour)
		m.rotate()
		m.trace = append(m.trace, "settle: late rotation")
		for range 3 {
			m.now = m.now.Add(m.timings.ServerSwitchGrace)
			m.reconcile()
		}
	}
	roots := parsed(m.t, m.gw.CAPEM)
	m.check(m.gw.State.Phase == bundle.PhaseSteady, "settled in phase Steady, got %s (bundle %v, root %s)", m.gw.State.Phase, names(roots), m.root.Cert.Subject.CommonName)
	m.check(len(roots) == 1 && sameCert(roots[0], m.root.Cert), "settled with only the current root in the bundle, got %d roots", len(roots))
	m.check(m.gw.State.Server == bundle.Fingerprint(m.root.Cert), "settled with the server on the current root")
	if m.tracked {
		for _, c := range m.clients {
			m.check(c.impostor != nil || m.signatures.ChainsTo(c.leaf, m.root.Cert), "settled with %s on the current root", c.name)
		}
	}
}

// settleRotation lets a rotation finish: long enough for the grace period
// to end and the propagation delay after it (an impostor's client never
// reaches the root, so the server switches only when the grace period
// forces it), every renewal dualca asks for succeeding; longer while a
// refusal held the rotation back, up to an hour.
func (m *model) settleRotation() {
	for i := 0; i < 14 || m.tracked && m.gw.State.Phase != bundle.PhaseSteady && i < 60; i++ {
		m.now = m.now.Add(time.Minute)
		for _, c := range m.clients {
			// A refusal renews no client: cert-manager's own renewals,
			// from the root of the moment, are what moves them off the
			// roots that keep the new one out.
			if c.requested || c.failed || m.refused {
				m.issue(c)
			}
			if m.refused {
				// Nor does an Issuer waiting for an issuing Secret that a
				// refusal keeps from being written: the operator brings
				// back into view what dualca lost sight of.
				c.hidden = false
			}
		}
		m.reconcile()
	}
}

// modelHistories lets a long search run more histories than make test does:
// go test ./bundle -run Model -model.histories=50000 -model.seed=N
var (
	modelHistories = flag.Uint64("model.histories", 1500, "random histories in the model test")
	modelSeed      = flag.Uint64("model.seed", 0, "first seed of the model test's histories")
)

func TestModelRandomHistoriesKeepTheInvariants(t *testing.T) {
	t.Parallel()
	histories, steps := *modelHistories, 60
	if testing.Short() {
		histories = min(histories, 200)
	}
	var total model
	for i := range histories {
		m := newModel(t, *modelSeed+i)
		for range steps {
			m.step()
		}
		m.settle()
		total.switches += m.switches
		total.forced += m.forced
		total.retired += m.retired
		total.rotation += m.rotation
		total.renewals += m.renewals
		total.pauses += m.pauses
		total.resumes += m.resumes
		total.promotes += m.promotes
		total.heldRenewals += m.heldRenewals
		total.promotedSwitches += m.promotedSwitches
		total.pausedForced += m.pausedForced
		total.promotesIgnored += m.promotesIgnored
		total.attacks += m.attacks
		total.hiddenDecisions += m.hiddenDecisions
		total.unreadDecisions += m.unreadDecisions
		total.unreadKept += m.unreadKept
		total.unreadForced += m.unreadForced
		total.unreadAdoptions += m.unreadAdoptions
		total.adoptionsWaited += m.adoptionsWaited
		total.heldForHidden += m.heldForHidden
		total.revealedRenewed += m.revealedRenewed
		total.revealedAsWas += m.revealedAsWas
		total.lateWrites += m.lateWrites
		total.recordLate += m.recordLate
		total.reissues += m.reissues
		total.leafForced += m.leafForced
		total.profileChanges += m.profileChanges
		total.issuingMoves += m.issuingMoves
		total.issuingForced += m.issuingForced
		total.issuedFromIssuing += m.issuedFromIssuing
		total.held += m.held
		total.refusals += m.refusals
		total.trimmed += m.trimmed
	}
	t.Logf("budget: %d decisions refused, %d roots trimmed", total.refusals, total.trimmed)
	if total.refusals == 0 || total.trimmed == 0 {
		t.Fatalf("the random histories missed a budget branch: refused=%d trimmed=%d", total.refusals, total.trimmed)
	}
	t.Logf("issuing Secret: %d writes, %d forced before the gateway trusted the root (held root expired, retired or foreign), %d decisions kept an older root, %d clients issued from it",
		total.issuingMoves, total.issuingForced, total.held, total.issuedFromIssuing)
	if total.issuingMoves == 0 || total.held == 0 || total.issuedFromIssuing == 0 || total.issuingForced == 0 {
		t.Fatalf("the random histories missed an issuing branch: writes=%d forced=%d held=%d issued=%d", total.issuingMoves, total.issuingForced, total.held, total.issuedFromIssuing)
	}
	t.Logf("server leaf: %d issued again from the same root, %d switches forced by a leaf's end, %d profile changes",
		total.reissues, total.leafForced, total.profileChanges)
	if total.reissues == 0 || total.profileChanges == 0 {
		t.Fatalf("the random histories missed a leaf branch: reissues=%d profileChanges=%d", total.reissues, total.profileChanges)
	}
	t.Logf("%d histories: %d rotations, %d renewals, %d planned switches, %d forced switches, %d roots retired",
		histories, total.rotation, total.renewals, total.switches, total.forced, total.retired)
	t.Logf("operator: %d pause, %d resume, %d promote steps; %d decisions held renewals while paused, %d switches promoted, %d forced while paused (server root expiring), %d promotes ignored (stale or moot)",
		total.pauses, total.resumes, total.promotes, total.heldRenewals, total.promotedSwitches, total.pausedForced, total.promotesIgnored)
	t.Logf("hostile writers: %d attacks; %d decisions while the gateway lagged behind the record", total.attacks, total.lateWrites)
	if total.lateWrites == 0 {
		t.Fatal("the random histories made no decision while the gateway lagged")
	}
	t.Logf("record writes: %d decisions reached the gateway's objects and not their record", total.recordLate)
	if total.recordLate == 0 {
		t.Fatal("the random histories lost no record write")
	}
	if total.attacks == 0 {
		t.Fatal("the random histories made no attack")
	}
	t.Logf("hidden clients: %d decisions with one in view, %d kept a root for them alone; %d back in view by a renewal, %d as they were",
		total.hiddenDecisions, total.heldForHidden, total.revealedRenewed, total.revealedAsWas)
	if total.hiddenDecisions == 0 || total.heldForHidden == 0 || total.revealedRenewed == 0 || total.revealedAsWas == 0 {
		t.Fatalf("the random histories missed a hidden-client branch: decisions=%d held=%d revealedRenewed=%d revealedAsWas=%d",
			total.hiddenDecisions, total.heldForHidden, total.revealedRenewed, total.revealedAsWas)
	}
	t.Logf("unread clients: %d decisions made while the client cache loaded, %d kept a root no client used, %d switched the server; %d adoptions decided so (no other root on record), %d waited for clients whose roots they would have dropped",
		total.unreadDecisions, total.unreadKept, total.unreadForced, total.unreadAdoptions, total.adoptionsWaited)
	if total.unreadDecisions == 0 || total.unreadKept == 0 || total.unreadAdoptions == 0 || total.adoptionsWaited == 0 {
		t.Fatalf("the random histories missed an unread-clients branch: decisions=%d kept=%d adoptions=%d waited=%d",
			total.unreadDecisions, total.unreadKept, total.unreadAdoptions, total.adoptionsWaited)
	}
	// The histories must reach every branch the invariants are about.
	if total.switches == 0 || total.forced == 0 || total.retired == 0 {
		t.Fatalf("the random histories missed a branch: switches=%d forced=%d retired=%d", total.switches, total.forced, total.retired)
	}
	if total.pauses == 0 || total.resumes == 0 || total.promotes == 0 || total.heldRenewals == 0 || total.promotedSwitches == 0 ||
		total.pausedForced == 0 || total.promotesIgnored == 0 {
		t.Fatalf("the random histories missed an operator branch: pauses=%d resumes=%d promotes=%d held=%d promoted=%d pausedForced=%d ignored=%d",
			total.pauses, total.resumes, total.promotes, total.heldRenewals, total.promotedSwitches, total.pausedForced, total.promotesIgnored)
	}
}
