package bundle_test

import (
	"bytes"
	"crypto/x509"
	"maps"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
	"github.com/dualca/dualca/test/certs"
)

// The tests in this file pin down bundle.Plan case by case: each case is a
// gateway Secret as found, a root, the clients and a time, and what the
// decision must be. Generated histories live in model_test.go.

// rtNow is the fixed clock of these tests.
var rtNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// rtTimings are short, so that every moment of a rotation falls within the
// lifetimes of the certificates below.
var rtTimings = bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: time.Hour}

// rtMargin is how long before its expiry a server root forces the switch.
var rtMargin = rtTimings.TrustPropagationDelay + bundle.ClockSkew

// rtFixture holds the roots of a rotation history. They are ordered by age
// (NotBefore), which is the order Normalize puts them in, newest first:
// root-3, root-2, root-1, root-0.
type rtFixture struct {
	r0      *certs.CA // expired a second before rtNow
	r1      *certs.CA // the old root
	r2      *certs.CA // the new root
	r3      *certs.CA // a newer root, for overlapping rotations
	soon    *certs.CA // an old root that expires half an hour after rtNow
	brink   *certs.CA // an old root already inside the expiry margin
	edge    *certs.CA // an old root exactly at the expiry margin
	foreign *certs.CA // a CA that has nothing to do with dualca
}

func rtNewFixture(t *testing.T) *rtFixture {
	t.Helper()
	ca := func(cn string, notBefore, notAfter time.Duration) *certs.CA {
		return certs.MustNew(t, cn, rtNow.Add(notBefore), rtNow.Add(notAfter), certs.Options{IsCA: true}, nil)
	}
	return &rtFixture{
		r0:      ca("root-0", -3*time.Hour, -time.Second),
		r1:      ca("root-1", -2*time.Hour, 10*time.Hour),
		r2:      ca("root-2", -time.Hour, 20*time.Hour),
		r3:      ca("root-3", -10*time.Minute, 30*time.Hour),
		soon:    ca("root-1-soon", -2*time.Hour, 30*time.Minute),
		brink:   ca("root-1-brink", -2*time.Hour, rtMargin-time.Second),
		edge:    ca("root-1-edge", -2*time.Hour, rtMargin),
		foreign: ca("foreign", -30*time.Minute, 5*time.Hour),
	}
}

// rtClient is a selected client whose leaf, issued by issuer, is valid for
// two hours after rtNow, and whose ca.crt holds trusts.
func rtClient(t *testing.T, name string, issuer *certs.CA, trusts ...*certs.CA) bundle.Client {
	t.Helper()
	leaf := certs.MustNew(t, name, rtNow.Add(-30*time.Minute), rtNow.Add(2*time.Hour), certs.Options{}, issuer)
	c := bundle.Client{Name: name, Leaf: leaf.Cert}
	for _, r := range trusts {
		c.CA = append(c.CA, r.Cert)
	}
	return c
}

// rtFailed marks a client whose last renewal failed.
func rtFailed(c bundle.Client) bundle.Client {
	c.Failed = true
	return c
}

func rtTracked(items ...bundle.Client) bundle.Clients {
	return bundle.Clients{Tracked: true, Items: items}
}

func rtList(cas ...*certs.CA) []*certs.CA { return cas }

// rtSecret describes a gateway Secret as dualca wrote it: the server pair of
// server, ca.crt holding roots in the given order, and annotations recording
// them, read back through their text form as from the API server. The
// overrides stand for hand edits made afterwards.
type rtSecret struct {
	server              *certs.CA
	roots               []*certs.CA
	root                *certs.CA
	addedAt, switchedAt time.Time
	// readyAt is when every client was first seen on root (zero: not yet).
	readyAt time.Time
	// Hand edits: when not nil, the field is replaced after the
	// annotations were recorded.
	caPEM, certPEM, keyPEM []byte
}

func (s rtSecret) gateway() bundle.Gateway {
	ca := certs.Bundle(s.roots...)
	st := bundle.State{
		Strategy:       bundle.StrategyZeroDowntime,
		Root:           bundle.Fingerprint(s.root.Cert),
		Server:         bundle.Fingerprint(s.server.Cert),
		RootAddedAt:    s.addedAt,
		SwitchedAt:     s.switchedAt,
		ClientsReadyAt: s.readyAt,
		BundleHash:     bundle.Hash(ca),
	}
	for _, r := range s.roots {
		st.BundleRoots = append(st.BundleRoots, bundle.Fingerprint(r.Cert))
	}
	gw := bundle.Gateway{Exists: true, CertPEM: s.server.CertPEM, KeyPEM: s.server.KeyPEM, CAPEM: ca,
		State: bundle.ParseState(st.Annotations())}
	if s.caPEM != nil {
		gw.CAPEM = s.caPEM
	}
	if s.certPEM != nil {
		gw.CertPEM = s.certPEM
	}
	if s.keyPEM != nil {
		gw.KeyPEM = s.keyPEM
	}
	return gw
}

// rtRoot validates ca as the root Secret cert-manager writes for a
// self-signed CA (ca.crt is the root itself).
func rtRoot(t testing.TB, ca *certs.CA, now time.Time) *bundle.Root {
	t.Helper()
	r, err := bundle.ValidateRoot(ca.CertPEM, ca.KeyPEM, ca.CertPEM, now)
	if err != nil {
		t.Fatalf("root %s is not valid at %s: %v", ca.Cert.Subject.CommonName, now, err)
	}
	return r
}

// rtApply is the gateway Secret after a decision was written to it, its
// annotations read back through their text form.
func rtApply(d bundle.Decision) bundle.Gateway {
	return bundle.Gateway{Exists: true, CertPEM: d.CertPEM, KeyPEM: d.KeyPEM, CAPEM: d.CAPEM,
		State: bundle.ParseState(d.State.Annotations())}
}

// rtLegacyCopy is the gateway Secret the legacy strategy wrote for ca.
func rtLegacyCopy(t testing.TB, ca *certs.CA) bundle.Gateway {
	t.Helper()
	return rtApply(legacy.Plan(bundle.Gateway{}, rtRoot(t, ca, rtNow), bundle.Clients{}, rtNow))
}

func rtParse(g Gomega, data []byte) []*x509.Certificate {
	cs, err := bundle.ParseCertificates("pem", data)
	g.Expect(err).NotTo(HaveOccurred(), "the decision holds unparseable PEM")
	g.Expect(cs).NotTo(BeEmpty())
	return cs
}

func rtNames(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Subject.CommonName
	}
	return out
}

func rtCANames(cas []*certs.CA) []string {
	out := make([]string, len(cas))
	for i, c := range cas {
		out[i] = c.Cert.Subject.CommonName
	}
	return out
}

func rtFingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}

// rtEvent is an expected event: its reason, whether it is a Warning, and a
// part of its message (empty: not checked).
type rtEvent struct {
	reason   string
	warning  bool
	contains string
}

func rtEventKeys(reasons []string, warnings []bool) []string {
	out := make([]string, len(reasons))
	for i := range reasons {
		kind := "Normal"
		if warnings[i] {
			kind = "Warning"
		}
		out[i] = kind + " " + reasons[i]
	}
	return out
}

// rtCase is one decision of bundle.Plan and what it must be.
type rtCase struct {
	gw      bundle.Gateway
	root    *certs.CA
	clients bundle.Clients
	now     time.Time // zero: rtNow

	wantServer      *certs.CA
	wantBundle      []*certs.CA // exactly, in this order
	wantPhase       bundle.Phase
	wantEvents      []rtEvent // exactly, in this order
	wantRenew       []string
	wantProgress    *bundle.Progress // nil: clients are not tracked
	wantRootAddedAt time.Time
	wantSwitchedAt  time.Time
	// wantNextCheck, when not zero, is NextCheck exactly; NextCheck is
	// always checked to be zero or after now.
	wantNextCheck time.Time
}

func rtRun(t *testing.T, tests map[string]rtCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			now := tc.now
			if now.IsZero() {
				now = rtNow
			}
			root := rtRoot(t, tc.root, now)
			d := bundle.Plan(tc.gw, root, tc.clients, rtTimings, now)
			rtExpectConsistent(g, d, root, now)

			g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(tc.wantServer.Cert)), "the server root is %s", tc.wantServer.Cert.Subject.CommonName)
			g.Expect(verifyServer(d.CertPEM, tc.wantServer.Cert, now)).To(Succeed(), "clients trusting the server root accept the server")
			g.Expect(bytes.Contains(d.KeyPEM, tc.wantServer.KeyPEM)).To(BeFalse(), "tls.key is not the root's key")
			g.Expect(rtNames(rtParse(g, d.CAPEM))).To(Equal(rtCANames(tc.wantBundle)), "the roots in ca.crt")
			g.Expect(bytes.Equal(d.CAPEM, certs.Bundle(tc.wantBundle...))).To(BeTrue(), "ca.crt is exactly the PEM of the roots")
			g.Expect(d.State.Phase).To(Equal(tc.wantPhase))

			reasons, warnings := make([]string, len(d.Events)), make([]bool, len(d.Events))
			for i, e := range d.Events {
				reasons[i], warnings[i] = e.Reason, e.Warning
			}
			wantReasons, wantWarnings := make([]string, len(tc.wantEvents)), make([]bool, len(tc.wantEvents))
			for i, e := range tc.wantEvents {
				wantReasons[i], wantWarnings[i] = e.reason, e.warning
			}
			g.Expect(rtEventKeys(reasons, warnings)).To(Equal(rtEventKeys(wantReasons, wantWarnings)), "events %+v", d.Events)
			for i, e := range tc.wantEvents {
				g.Expect(d.Events[i].Message).To(ContainSubstring(e.contains), "message of event %d", i)
			}

			if len(tc.wantRenew) == 0 {
				g.Expect(d.Renew).To(BeEmpty(), "clients due for renewal")
			} else {
				g.Expect(d.Renew).To(Equal(tc.wantRenew), "clients due for renewal")
			}
			if tc.wantProgress == nil {
				g.Expect(d.State.Clients).To(BeNil(), "client progress")
			} else {
				g.Expect(d.State.Clients).To(Equal(tc.wantProgress), "client progress")
			}
			g.Expect(d.State.RootAddedAt).To(BeTemporally("==", tc.wantRootAddedAt), "RootAddedAt")
			g.Expect(d.State.SwitchedAt).To(BeTemporally("==", tc.wantSwitchedAt), "SwitchedAt")
			if !tc.wantNextCheck.IsZero() {
				g.Expect(d.NextCheck).To(BeTemporally("==", tc.wantNextCheck), "NextCheck")
			}
		})
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rtExpectConsistent checks what holds for every zero-downtime decision:
// the recorded state describes the data, the tls pair matches, the bundle
// holds the server's root and the current root, no event carries PEM, and
// NextCheck is never in the past.
func rtExpectConsistent(g Gomega, d bundle.Decision, root *bundle.Root, now time.Time) {
	roots := rtParse(g, d.CAPEM)
	server := bundle.Find(roots, d.State.Server)
	g.Expect(server).NotTo(BeNil(), "ca.crt holds the recorded server root")
	g.Expect(bundle.KeyMatches(d.CertPEM, d.KeyPEM)).To(BeTrue(), "tls.crt and tls.key match")
	g.Expect(d.State.Strategy).To(Equal(bundle.StrategyZeroDowntime))
	g.Expect(d.State.Root).To(Equal(root.Fingerprint), "the recorded root")
	g.Expect(verifyServer(d.CertPEM, server, now)).To(Succeed(), "the server certificate chains to the recorded server root")
	// Nothing verifies through a root before it is valid: then only from its NotBefore.
	g.Expect(verifyServer(d.CertPEM, root.Cert, later(now, root.Cert.NotBefore))).To(Succeed(), "clients of the current root accept the server")
	g.Expect(d.State.BundleHash).To(Equal(bundle.Hash(d.CAPEM)), "the recorded bundle hash")
	g.Expect(d.State.BundleRoots).To(Equal(rtFingerprints(roots)), "the recorded bundle roots")
	g.Expect(bundle.Contains(roots, server)).To(BeTrue(), "ca.crt holds the server root")
	g.Expect(bundle.Contains(roots, root.Cert)).To(BeTrue(), "ca.crt holds the current root")
	g.Expect(d.NextCheck.IsZero() || d.NextCheck.After(now)).To(BeTrue(), "NextCheck %s is zero or after %s", d.NextCheck, now)
	for _, e := range d.Events {
		g.Expect(e.Message).NotTo(ContainSubstring("-----"), "event messages carry no PEM")
	}
}

// verifyServer is what a client does with the server credential.
var verifyServer = bundle.VerifyServer

func TestPlanCreatesTheGatewayAndStartsRotations(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	onR1 := func(name string) bundle.Client { return rtClient(t, name, f.r1, f.r1) }

	rtRun(t, map[string]rtCase{
		"a missing gateway is created serving the root and trusting only it": {
			gw:              bundle.Gateway{},
			root:            f.r1,
			clients:         rtTracked(),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      []rtEvent{{reason: bundle.ReasonBundleUpdated, contains: "gateway Secret created"}},
			wantProgress:    &bundle.Progress{},
			wantRootAddedAt: rtNow,
			wantSwitchedAt:  rtNow,
		},
		"a missing gateway is created the same way when clients are not tracked": {
			gw:              bundle.Gateway{},
			root:            f.r1,
			clients:         bundle.Clients{},
			wantServer:      f.r1,
			wantBundle:      rtList(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      []rtEvent{{reason: bundle.ReasonBundleUpdated, contains: "gateway Secret created"}},
			wantRootAddedAt: rtNow,
			wantSwitchedAt:  rtNow,
		},
		"the same root again changes nothing": {
			gw:              rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r1,
			clients:         rtTracked(onR1("ns/a")),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: rtNow.Add(-2 * h),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"a new root is trusted next to the old one, newest first, while the server keeps the old one": {
			gw:         rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    rtTracked(onR1("ns/b"), onR1("ns/a")),
			wantServer: f.r1,
			wantBundle: rtList(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-2"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: rtNow,
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"within the propagation delay no client is due yet": {
			gw:              rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-59 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         rtTracked(onR1("ns/b"), onR1("ns/a")),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: rtNow.Add(-59 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Second),
		},
		"after the propagation delay exactly the clients not on the new root are due, sorted": {
			gw:   rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root: f.r2,
			clients: rtTracked(
				onR1("ns/zeta"),
				rtClient(t, "ns/mid", f.r2, f.r2, f.r1),
				onR1("ns/alpha"),
				bundle.Client{Name: "ns/gone"}, // its Secret is missing
			),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/alpha", "ns/gone", "ns/zeta"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 3},
			wantRootAddedAt: rtNow.Add(-time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(59 * time.Minute),
		},
		"a rotation during a rotation trusts the newest root next to every root in use and restarts the clock": {
			gw:   rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-5 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root: f.r3,
			clients: rtTracked(
				rtClient(t, "ns/a", f.r2, f.r2, f.r1),
				onR1("ns/b"),
			),
			wantServer: f.r1,
			wantBundle: rtList(f.r3, f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-3"`},
				{reason: bundle.ReasonBundleUpdated, contains: "3 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: rtNow,
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Minute),
		},
	})
}

func TestPlanSwitchesTheServer(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	renewing := func(addedAt time.Duration) bundle.Gateway {
		return rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(addedAt), switchedAt: rtNow.Add(-2 * h)}.gateway()
	}
	// ready is renewing with every client seen on the new root readyAgo.
	ready := func(addedAt, readyAgo time.Duration) bundle.Gateway {
		return rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(addedAt), switchedAt: rtNow.Add(-2 * h),
			readyAt: rtNow.Add(-readyAgo)}.gateway()
	}
	onR2 := rtClient(t, "ns/a", f.r2, f.r2, f.r1)
	onlyR2 := rtClient(t, "ns/b", f.r2, f.r2)
	pending := rtClient(t, "ns/b", f.r1, f.r1)
	failed := rtFailed(rtClient(t, "ns/c", f.r1, f.r1))

	rtRun(t, map[string]rtCase{
		"the server switches when every client has been on the new root for the propagation delay": {
			gw:              ready(-10*time.Minute, time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, onlyR2),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []rtEvent{{reason: bundle.ReasonServerSwitched, contains: "all 2 clients"}},
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow,
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"clients just seen on the new root get the propagation delay to load it": {
			gw:              renewing(-10 * time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"one second before the clients' propagation delay ends the server still waits": {
			gw:              ready(-10*time.Minute, 59*time.Second),
			root:            f.r2,
			clients:         rtTracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Second),
		},
		"a client that falls back off the new root resets the clients' wait": {
			gw:              ready(-10*time.Minute, 5*time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, pending),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"the server waits for the propagation delay even when every client is ready": {
			gw:              renewing(-59 * time.Second),
			root:            f.r2,
			clients:         rtTracked(onR2, onlyR2),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-59 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Second),
		},
		"a client whose leaf chains to the new root but whose ca.crt lacks it holds the switch back": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, rtClient(t, "ns/b", f.r2, f.r1)),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: rtNow.Add(-time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"a client whose ca.crt holds the new root but whose leaf is still the old one holds the switch back": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, rtClient(t, "ns/b", f.r1, f.r2, f.r1)),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: rtNow.Add(-time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"a client whose renewal failed holds the switch back and counts as failed": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, failed),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Failed: 1},
			wantRootAddedAt: rtNow.Add(-time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"one second before the grace period ends the server still waits for the clients": {
			gw:              renewing(-h + time.Second),
			root:            f.r2,
			clients:         rtTracked(onR2, pending, failed),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRenew:       []string{"ns/b", "ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1, Failed: 1},
			wantRootAddedAt: rtNow.Add(-h + time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Second),
		},
		"when the grace period ends with clients left behind the switch is forced with a Warning naming how many": {
			gw:              renewing(-h),
			root:            f.r2,
			clients:         rtTracked(onR2, pending, failed),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []rtEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "with 2 clients not on the new root"}},
			wantRenew:       []string{"ns/b", "ns/c"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1, Failed: 1},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow,
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"untracked clients: after the propagation delay the server still waits for the grace period": {
			gw:              renewing(-time.Minute),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRenewing,
			wantRootAddedAt: rtNow.Add(-time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(59 * time.Minute),
		},
		"untracked clients: the server switches when the grace period ends, without a Warning": {
			gw:              renewing(-h),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []rtEvent{{reason: bundle.ReasonServerSwitched, contains: "not tracked"}},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow,
		},
		"a server root expiring within the propagation delay plus clock skew forces the switch, even before the delay": {
			gw:              rtSecret{server: f.brink, roots: rtList(f.r2, f.brink), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         rtTracked(rtClient(t, "ns/a", f.brink, f.brink)),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.brink),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []rtEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "expires at"}},
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow,
		},
		"untracked clients: a server root about to expire forces the switch too": {
			gw:              rtSecret{server: f.brink, roots: rtList(f.r2, f.brink), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.brink),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      []rtEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "expires at"}},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow,
		},
		"a server root expiring exactly at the margin does not force the switch yet": {
			gw:              rtSecret{server: f.edge, roots: rtList(f.r2, f.edge), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         rtTracked(rtClient(t, "ns/a", f.edge, f.edge)),
			wantServer:      f.edge,
			wantBundle:      rtList(f.r2, f.edge),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
	})
}

func TestPlanRetiresOldRoots(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	switched := func(roots []*certs.CA, switchedAt time.Duration) bundle.Gateway {
		return rtSecret{server: f.r2, roots: roots, root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(switchedAt)}.gateway()
	}
	onR2 := rtClient(t, "ns/a", f.r2, f.r2, f.r1)
	onlyR2 := rtClient(t, "ns/b", f.r2, f.r2)

	rtRun(t, map[string]rtCase{
		"the old root stays for the propagation delay after the switch": {
			gw:              switched(rtList(f.r2, f.r1), -59*time.Second),
			root:            f.r2,
			clients:         rtTracked(onR2, onlyR2),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-59 * time.Second),
			wantNextCheck:   rtNow.Add(time.Second),
		},
		"the old root is retired once the propagation delay after the switch has passed": {
			gw:         switched(rtList(f.r2, f.r1), -time.Minute),
			root:       f.r2,
			clients:    rtTracked(onR2, onlyR2),
			wantServer: f.r2,
			wantBundle: rtList(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-1"`},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantProgress:    &bundle.Progress{Renewed: 2},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-time.Minute),
		},
		"an old root that a client's unexpired leaf chains to is never retired, even long after the switch": {
			gw:              switched(rtList(f.r2, f.r1), -50*time.Minute),
			root:            f.r2,
			clients:         rtTracked(onR2, rtClient(t, "ns/b", f.r1, f.r2, f.r1)),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-50 * time.Minute),
		},
		"an expired old root is retired while the current root and the server's stay": {
			gw:         rtSecret{server: f.r1, roots: rtList(f.r2, f.r1, f.r0), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    rtTracked(rtClient(t, "ns/a", f.r1, f.r1)),
			wantServer: f.r1,
			wantBundle: rtList(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRetired, contains: `"root-0"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"an expired old root is retired even though a client's leaf still chains to it": {
			gw:         rtSecret{server: f.r1, roots: rtList(f.r2, f.r1, f.r0), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    rtTracked(rtClient(t, "ns/a", f.r1, f.r1), rtClient(t, "ns/old", f.r0, f.r0)),
			wantServer: f.r1,
			wantBundle: rtList(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRetired, contains: "expired"},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 2},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"untracked clients: an old root stays until it expires, long after the switch": {
			gw:              switched(rtList(f.r2, f.r1), -50*time.Minute),
			root:            f.r2,
			clients:         bundle.Clients{},
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-50 * time.Minute),
			wantNextCheck:   f.r1.Cert.NotAfter.Add(time.Second),
		},
		"untracked clients: an old root is retired when it has expired": {
			gw:         switched(rtList(f.r2, f.r0), -50*time.Minute),
			root:       f.r2,
			clients:    bundle.Clients{},
			wantServer: f.r2,
			wantBundle: rtList(f.r2),
			wantPhase:  bundle.PhaseSteady,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRetired, contains: "expired"},
				{reason: bundle.ReasonBundleUpdated, contains: "holds 1 root:"},
			},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-50 * time.Minute),
		},
	})
}

func TestPlanRepairsHandEdits(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	inBundle := rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}
	edit := func(s rtSecret, ca, cert, key []byte) bundle.Gateway {
		s.caPEM, s.certPEM, s.keyPEM = ca, cert, key
		return s.gateway()
	}
	afterSwitch := rtSecret{server: f.r2, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(-50 * time.Minute)}
	steady := rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}
	onR1 := rtClient(t, "ns/a", f.r1, f.r1)
	restored := []rtEvent{{reason: bundle.ReasonGatewayRepaired, warning: true, contains: "changed outside dualca"}}
	serverReplaced := []rtEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "changed outside dualca"}}

	rtRun(t, map[string]rtCase{
		"garbage in ca.crt is replaced by the recorded roots, with a Warning": {
			gw:              edit(inBundle, []byte("garbage"), nil, nil),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"an emptied ca.crt is restored too": {
			gw:              edit(inBundle, []byte{}, nil, nil),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"a blank line added to ca.crt is undone byte for byte": {
			gw:              edit(inBundle, append(certs.Bundle(f.r2, f.r1), '\n'), nil, nil),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		"a foreign CA added to ca.crt is removed, with a Warning": {
			gw:              edit(inBundle, certs.Bundle(f.r2, f.r1, f.foreign), nil, nil),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
		},
		// Invariant 3: after a forced switch the old root is still needed by
		// the clients left behind; it is among the recorded roots, and the
		// clients' own ca.crt still holds it.
		"garbage in ca.crt after a forced switch restores the old root a client's leaf still chains to": {
			gw:              edit(afterSwitch, []byte("garbage"), nil, nil),
			root:            f.r2,
			clients:         rtTracked(rtClient(t, "ns/a", f.r2, f.r2), rtClient(t, "ns/b", f.r1, f.r1)),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      restored,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow.Add(-50 * time.Minute),
		},
		"tls.crt replaced by another CA switches the server to the current root, with a Warning": {
			gw:              edit(inBundle, nil, f.foreign.CertPEM, f.foreign.KeyPEM),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      serverReplaced,
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow,
		},
		"a tls.key that does not match tls.crt switches the server to the current root, with a Warning": {
			gw:              edit(inBundle, nil, nil, f.foreign.KeyPEM),
			root:            f.r2,
			clients:         rtTracked(onR1),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      serverReplaced,
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Second),
			wantSwitchedAt:  rtNow,
		},
		"an emptied tls.crt in steady state is restored from the root, with a Warning": {
			gw:              edit(steady, nil, []byte{}, nil),
			root:            f.r1,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      serverReplaced,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: rtNow.Add(-2 * h),
			wantSwitchedAt:  rtNow,
		},
	})
}

func TestPlanAdoptsTheLegacyStrategy(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	onR1 := rtClient(t, "ns/a", f.r1, f.r1)
	editedCopy := rtLegacyCopy(t, f.r1)
	editedCopy.CAPEM = certs.Bundle(f.r1, f.foreign)

	rtRun(t, map[string]rtCase{
		"a legacy plain copy of the old root is adopted when the root has rotated: the old root keeps serving": {
			gw:         rtLegacyCopy(t, f.r1),
			root:       f.r2,
			clients:    rtTracked(onR1),
			wantServer: f.r1,
			wantBundle: rtList(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-2"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow,
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"a legacy plain copy of the current root is adopted as it is": {
			gw:              rtLegacyCopy(t, f.r1),
			root:            f.r1,
			clients:         rtTracked(onR1),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: rtNow,
		},
		"a legacy copy whose ca.crt was edited by hand keeps every CA in it, without a Warning": {
			gw:         editedCopy,
			root:       f.r2,
			clients:    rtTracked(onR1),
			wantServer: f.r1,
			wantBundle: rtList(f.foreign, f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRotated},
				{reason: bundle.ReasonBundleUpdated, contains: "3 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow,
		},
	})

	t.Run("the adopted Secret records the zero-downtime strategy", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		d := bundle.Plan(rtLegacyCopy(t, f.r1), rtRoot(t, f.r2, rtNow), rtTracked(onR1), rtTimings, rtNow)
		g.Expect(d.State.Annotations()).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
		g.Expect(d.State.Annotations()).NotTo(HaveKey(bundle.AnnotationServerSwitchedAt), "no switch has happened under dualca's watch")
	})
}

func TestPlanOnASkewedClock(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	// Valid from three minutes on: within the clock skew ValidateRoot allows.
	ahead := certs.MustNew(t, "root-ahead", rtNow.Add(3*time.Minute), rtNow.Add(40*h), certs.Options{IsCA: true}, nil)

	rtRun(t, map[string]rtCase{
		"a clock that went back before RootAddedAt starts the propagation delay from now, not from the future": {
			gw:              rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(10 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            f.r2,
			clients:         rtTracked(rtClient(t, "ns/a", f.r1, f.r1)),
			wantServer:      f.r1,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow,
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"a clock that went back before the switch starts the wait before retiring from now": {
			gw:              rtSecret{server: f.r2, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(10 * time.Minute)}.gateway(),
			root:            f.r2,
			clients:         rtTracked(rtClient(t, "ns/a", f.r2, f.r2)),
			wantServer:      f.r2,
			wantBundle:      rtList(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: rtNow.Add(-h),
			wantSwitchedAt:  rtNow,
			wantNextCheck:   rtNow.Add(time.Minute),
		},
		"a root from an issuer whose clock runs ahead is trusted at once, but no client moves to it before it is valid": {
			gw:              rtSecret{server: f.r1, roots: rtList(ahead, f.r1), root: ahead, addedAt: rtNow.Add(-10 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:            ahead,
			clients:         rtTracked(rtClient(t, "ns/a", f.r1, f.r1)),
			wantServer:      f.r1,
			wantBundle:      rtList(ahead, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   ahead.Cert.NotBefore,
		},
		"the server does not move to a root that is not valid yet, even with every client on it": {
			gw: rtSecret{server: f.r1, roots: rtList(ahead, f.r1), root: ahead, addedAt: rtNow.Add(-10 * time.Minute),
				switchedAt: rtNow.Add(-2 * h), readyAt: rtNow.Add(-5 * time.Minute)}.gateway(),
			root:            ahead,
			clients:         rtTracked(rtClient(t, "ns/a", ahead, ahead)),
			wantServer:      f.r1,
			wantBundle:      rtList(ahead, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: rtNow.Add(-10 * time.Minute),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   ahead.Cert.NotBefore,
		},
		"times are recorded in whole seconds, rounded up so that no wait is shortened": {
			gw:         rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			root:       f.r2,
			clients:    rtTracked(),
			now:        rtNow.Add(999 * time.Millisecond),
			wantServer: f.r1,
			wantBundle: rtList(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []rtEvent{
				{reason: bundle.ReasonRootRotated},
				{reason: bundle.ReasonBundleUpdated},
			},
			wantProgress:    &bundle.Progress{},
			wantRootAddedAt: rtNow.Add(time.Second),
			wantSwitchedAt:  rtNow.Add(-2 * h),
			wantNextCheck:   rtNow.Add(time.Second + time.Minute),
		},
	})
}

// TestPlanNextCheck checks NextCheck against its contract: it is the first
// moment at which time alone changes the decision. Planning again on the
// Secret just written, any time before NextCheck, must decide the same.
func TestPlanNextCheck(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	onR1 := rtClient(t, "ns/a", f.r1, f.r1)
	onR2 := rtClient(t, "ns/a", f.r2, f.r2, f.r1)

	tests := map[string]struct {
		gw      bundle.Gateway
		clients bundle.Clients
		now     time.Time
		want    time.Time
	}{
		"a rotation just recorded is checked again when its propagation delay ends": {
			gw:      rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: rtTracked(onR1),
			now:     rtNow,
			want:    rtNow.Add(time.Minute),
		},
		"in phase Bundle the next check is RootAddedAt plus the propagation delay": {
			gw:      rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-10 * time.Second), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: rtTracked(onR1),
			now:     rtNow,
			want:    rtNow.Add(50 * time.Second),
		},
		"while clients renew the next check is the end of the grace period": {
			gw:      rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-5 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: rtTracked(onR1),
			now:     rtNow,
			want:    rtNow.Add(55 * time.Minute),
		},
		"untracked clients: before the switch the next check is the end of the grace period": {
			gw:      rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-5 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: bundle.Clients{},
			now:     rtNow,
			want:    rtNow.Add(55 * time.Minute),
		},
		"a server root expiring before the grace ends is checked the first second its switch is forced": {
			gw:      rtSecret{server: f.soon, roots: rtList(f.r2, f.soon), root: f.r2, addedAt: rtNow.Add(-5 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: rtTracked(rtClient(t, "ns/a", f.soon, f.soon)),
			now:     rtNow,
			want:    f.soon.Cert.NotAfter.Add(-rtMargin).Add(time.Second),
		},
		"at the very second a server root reaches its expiry margin the next check is the next second, not its expiry": {
			gw:      rtSecret{server: f.soon, roots: rtList(f.r2, f.soon), root: f.r2, addedAt: rtNow.Add(-5 * time.Minute), switchedAt: rtNow.Add(-2 * h)}.gateway(),
			clients: rtTracked(rtClient(t, "ns/a", f.soon, f.soon)),
			now:     f.soon.Cert.NotAfter.Add(-rtMargin),
			want:    f.soon.Cert.NotAfter.Add(-rtMargin).Add(time.Second),
		},
		"after the switch the next check is when the old root may be retired": {
			gw:      rtSecret{server: f.r2, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-10 * time.Minute), switchedAt: rtNow.Add(-30 * time.Second)}.gateway(),
			clients: rtTracked(onR2),
			now:     rtNow,
			want:    rtNow.Add(30 * time.Second),
		},
		"untracked clients: after the switch the next check is the old root's expiry": {
			gw:      rtSecret{server: f.r2, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(-50 * time.Minute)}.gateway(),
			clients: bundle.Clients{},
			now:     rtNow,
			want:    f.r1.Cert.NotAfter.Add(time.Second),
		},
		"an old root kept for a client's leaf is checked again when that leaf expires": {
			gw:      rtSecret{server: f.r2, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(-50 * time.Minute)}.gateway(),
			clients: rtTracked(rtClient(t, "ns/a", f.r2, f.r2), rtClient(t, "ns/b", f.r1, f.r2, f.r1)),
			now:     rtNow,
			want:    rtNow.Add(2*h + time.Second), // the leaves of rtClient expire then: valid through NotAfter
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := rtRoot(t, f.r2, tc.now)
			d := bundle.Plan(tc.gw, root, tc.clients, rtTimings, tc.now)
			rtExpectConsistent(g, d, root, tc.now)
			g.Expect(d.NextCheck).To(BeTemporally("==", tc.want), "NextCheck")

			// Nothing changes by time alone before NextCheck.
			written := rtApply(d)
			for _, at := range []time.Time{tc.now.Add(time.Second), d.NextCheck.Add(-time.Second)} {
				if !at.After(tc.now) || !at.Before(d.NextCheck) {
					continue
				}
				again := bundle.Plan(written, rtRoot(t, f.r2, at), tc.clients, rtTimings, at)
				g.Expect(again.Events).To(BeEmpty(), "events at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(bytes.Equal(again.CertPEM, d.CertPEM)).To(BeTrue(), "tls.crt changed at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(bytes.Equal(again.CAPEM, d.CAPEM)).To(BeTrue(), "ca.crt changed at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(again.State.Annotations()).To(Equal(d.State.Annotations()), "annotations at %s, before NextCheck %s", at, d.NextCheck)
			}
		})
	}
}

// TestPlanIsIdempotent plans again on the Secret a decision produced, its
// annotations round-tripped through their text form as on the API server:
// nothing may change and nothing may be reported (invariant 6).
func TestPlanIsIdempotent(t *testing.T) {
	t.Parallel()
	f := rtNewFixture(t)
	h := time.Hour
	onR1 := rtClient(t, "ns/a", f.r1, f.r1)
	onR2 := rtClient(t, "ns/b", f.r2, f.r2, f.r1)
	steady := rtSecret{server: f.r1, roots: rtList(f.r1), root: f.r1, addedAt: rtNow.Add(-2 * h), switchedAt: rtNow.Add(-2 * h)}
	renewing := rtSecret{server: f.r1, roots: rtList(f.r2, f.r1), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(-2 * h)}
	retiring := rtSecret{server: f.r2, roots: rtList(f.r2, f.r1, f.r0), root: f.r2, addedAt: rtNow.Add(-h), switchedAt: rtNow.Add(-50 * time.Minute)}
	garbage, replaced := renewing, renewing
	garbage.caPEM = []byte("garbage")
	replaced.certPEM, replaced.keyPEM = f.foreign.CertPEM, f.foreign.KeyPEM
	clockBack := renewing
	clockBack.addedAt = rtNow.Add(time.Hour)

	tests := map[string]struct {
		gw      bundle.Gateway
		root    *certs.CA
		clients bundle.Clients
		now     time.Time
	}{
		"a created gateway": {gw: bundle.Gateway{}, root: f.r1, clients: rtTracked(onR1), now: rtNow},
		"a steady gateway":  {gw: steady.gateway(), root: f.r1, clients: rtTracked(onR1), now: rtNow},
		"a rotation":        {gw: steady.gateway(), root: f.r2, clients: rtTracked(onR1, onR2), now: rtNow},
		"a rotation at a time with a fraction of a second": {gw: steady.gateway(), root: f.r2, clients: rtTracked(onR1), now: rtNow.Add(500 * time.Millisecond)},
		"clients due for renewal":                          {gw: renewing.gateway(), root: f.r2, clients: rtTracked(onR1, onR2), now: rtNow.Add(-59 * time.Minute)},
		"a switch when every client is ready":              {gw: renewing.gateway(), root: f.r2, clients: rtTracked(onR2), now: rtNow.Add(-59 * time.Minute)},
		"a switch forced by the grace period":              {gw: renewing.gateway(), root: f.r2, clients: rtTracked(onR1, onR2), now: rtNow},
		"an untracked switch at the grace period":          {gw: renewing.gateway(), root: f.r2, clients: bundle.Clients{}, now: rtNow},
		"retirement of an unused and an expired root":      {gw: retiring.gateway(), root: f.r2, clients: rtTracked(onR2), now: rtNow},
		"a repaired ca.crt":                                {gw: garbage.gateway(), root: f.r2, clients: rtTracked(onR1), now: rtNow.Add(-59 * time.Minute)},
		"a repaired server credential":                     {gw: replaced.gateway(), root: f.r2, clients: rtTracked(onR1), now: rtNow.Add(-59 * time.Minute)},
		"a clock that went back":                           {gw: clockBack.gateway(), root: f.r2, clients: rtTracked(onR1), now: rtNow},
		"an adopted legacy copy":                           {gw: rtLegacyCopy(t, f.r1), root: f.r2, clients: rtTracked(onR1), now: rtNow},
		"an overlapping rotation":                          {gw: renewing.gateway(), root: f.r3, clients: rtTracked(onR1, onR2), now: rtNow},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := rtRoot(t, tc.root, tc.now)
			first := bundle.Plan(tc.gw, root, tc.clients, rtTimings, tc.now)
			again := bundle.Plan(rtApply(first), root, tc.clients, rtTimings, tc.now)
			g.Expect(again.Events).To(BeEmpty(), "a second decision reports nothing")
			g.Expect(bytes.Equal(again.CertPEM, first.CertPEM)).To(BeTrue(), "tls.crt is the same")
			g.Expect(bytes.Equal(again.KeyPEM, first.KeyPEM)).To(BeTrue(), "tls.key is the same")
			g.Expect(bytes.Equal(again.CAPEM, first.CAPEM)).To(BeTrue(), "ca.crt is the same")
			g.Expect(maps.Equal(again.State.Annotations(), first.State.Annotations())).To(BeTrue(),
				"annotations are the same: %v then %v", first.State.Annotations(), again.State.Annotations())
			g.Expect(again.Renew).To(Equal(first.Renew), "the same clients are due")
			g.Expect(again.NextCheck).To(BeTemporally("==", first.NextCheck))
		})
	}
}

// TestPlanWalksARotationThroughItsPhases follows one rotation from the
// creation of the gateway to the retirement of the old root, each decision
// written before the next is made.
func TestPlanWalksARotationThroughItsPhases(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := rtNewFixture(t)
	a1, b1 := rtClient(t, "ns/a", f.r1, f.r1), rtClient(t, "ns/b", f.r1, f.r1)
	a2, b2 := rtClient(t, "ns/a", f.r2, f.r2), rtClient(t, "ns/b", f.r2, f.r2, f.r1)
	m := time.Minute

	steps := []struct {
		what    string
		at      time.Duration
		root    *certs.CA
		clients []bundle.Client
		server  *certs.CA
		bundle  []*certs.CA
		phase   bundle.Phase
		events  []string
		renew   []string
	}{
		{"the gateway is created", 0, f.r1, []bundle.Client{a1, b1}, f.r1, rtList(f.r1), bundle.PhaseSteady, []string{bundle.ReasonBundleUpdated}, nil},
		{"nothing happens", 5 * m, f.r1, []bundle.Client{a1, b1}, f.r1, rtList(f.r1), bundle.PhaseSteady, nil, nil},
		{"the root rotates", 10 * m, f.r2, []bundle.Client{a1, b1}, f.r1, rtList(f.r2, f.r1), bundle.PhaseBundle, []string{bundle.ReasonRootRotated, bundle.ReasonBundleUpdated}, nil},
		{"the gateway loads the bundle", 10*m + 59*time.Second, f.r2, []bundle.Client{a1, b1}, f.r1, rtList(f.r2, f.r1), bundle.PhaseBundle, nil, nil},
		{"the clients are due", 11 * m, f.r2, []bundle.Client{a1, b1}, f.r1, rtList(f.r2, f.r1), bundle.PhaseRenewing, nil, []string{"ns/a", "ns/b"}},
		{"one client has renewed", 12 * m, f.r2, []bundle.Client{a2, b1}, f.r1, rtList(f.r2, f.r1), bundle.PhaseRenewing, nil, []string{"ns/b"}},
		{"every client has renewed: they get time to load it", 13 * m, f.r2, []bundle.Client{a2, b2}, f.r1, rtList(f.r2, f.r1), bundle.PhaseRenewing, nil, nil},
		{"the server switches", 14 * m, f.r2, []bundle.Client{a2, b2}, f.r2, rtList(f.r2, f.r1), bundle.PhaseRetiring, []string{bundle.ReasonServerSwitched}, nil},
		{"the clients reload", 14*m + 59*time.Second, f.r2, []bundle.Client{a2, b2}, f.r2, rtList(f.r2, f.r1), bundle.PhaseRetiring, nil, nil},
		{"the old root is retired", 15 * m, f.r2, []bundle.Client{a2, b2}, f.r2, rtList(f.r2), bundle.PhaseSteady, []string{bundle.ReasonRootRetired, bundle.ReasonBundleUpdated}, nil},
		{"nothing more happens", 60 * m, f.r2, []bundle.Client{a2, b2}, f.r2, rtList(f.r2), bundle.PhaseSteady, nil, nil},
	}
	gw := bundle.Gateway{}
	for _, s := range steps {
		now := rtNow.Add(s.at)
		root := rtRoot(t, s.root, now)
		d := bundle.Plan(gw, root, rtTracked(s.clients...), rtTimings, now)
		rtExpectConsistent(g, d, root, now)
		var reasons []string
		for _, e := range d.Events {
			g.Expect(e.Warning).To(BeFalse(), "%s: no Warning in a smooth rotation, got %+v", s.what, e)
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(Equal(s.events), "%s: events", s.what)
		g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(s.server.Cert)), "%s: server", s.what)
		for _, c := range s.clients {
			for _, trusted := range c.CA {
				if bundle.Fingerprint(trusted) == d.State.Server || bundle.Fingerprint(trusted) == root.Fingerprint {
					g.Expect(verifyServer(d.CertPEM, trusted, now)).To(Succeed(), "%s: %s verifies the server", s.what, c.Name)
				}
			}
		}
		g.Expect(rtNames(rtParse(g, d.CAPEM))).To(Equal(rtCANames(s.bundle)), "%s: bundle", s.what)
		g.Expect(d.State.Phase).To(Equal(s.phase), "%s: phase", s.what)
		g.Expect(d.Renew).To(Equal(s.renew), "%s: renew", s.what)
		gw = rtApply(d)
	}
	g.Expect(strings.Join(gw.State.BundleRoots, ",")).To(Equal(bundle.Fingerprint(f.r2.Cert)))
}

// TestPlanServerCredentialServesEveryClientPopulation follows the server
// credential through an overlapping rotation: the leaf stays while clients
// move, each new root adds its cross-certificate, and clients that trust only
// R1, only R2 or only R3 all verify the server at every step.
func TestPlanServerCredentialServesEveryClientPopulation(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := rtNewFixture(t)
	on1, on2, on3 := rtClient(t, "ns/a", f.r1, f.r1), rtClient(t, "ns/b", f.r2, f.r2), rtClient(t, "ns/c", f.r3, f.r3)
	crosses := func(d bundle.Decision) []string {
		chain := rtParse(g, d.CertPEM)
		var out []string
		for _, c := range chain[1:] {
			out = append(out, c.Issuer.CommonName)
		}
		return out
	}
	verifiedBy := func(d bundle.Decision, now time.Time, roots ...*certs.CA) {
		for _, r := range roots {
			g.Expect(verifyServer(d.CertPEM, r.Cert, now)).To(Succeed(), "a client trusting only %s verifies the server", r.Cert.Subject.CommonName)
		}
	}

	now := rtNow
	d := bundle.Plan(bundle.Gateway{}, rtRoot(t, f.r1, now), rtTracked(on1), rtTimings, now)
	g.Expect(crosses(d)).To(BeEmpty(), "a new gateway serves a leaf of the root alone")
	verifiedBy(d, now, f.r1)
	g.Expect(bytes.Equal(d.KeyPEM, f.r1.KeyPEM)).To(BeFalse(), "the gateway never holds the root's key")
	leaf := rtParse(g, d.CertPEM)[0]
	g.Expect(leaf.IsCA).To(BeFalse())
	g.Expect(leaf.ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
	g.Expect(leaf.Subject.String()).NotTo(Equal(leaf.Issuer.String()),
		"a leaf named like its issuer is taken for self-signed by OpenSSL")
	g.Expect(leaf.Subject.CommonName).To(Equal("root-1 server"))
	g.Expect(leaf.NotAfter).To(Equal(f.r1.Cert.NotAfter), "valid as long as its root")

	now = now.Add(time.Minute)
	d = bundle.Plan(rtApply(d), rtRoot(t, f.r2, now), rtTracked(on1, on2), rtTimings, now)
	g.Expect(crosses(d)).To(Equal([]string{"root-2"}), "R2 cross-signs the server root")
	g.Expect(rtParse(g, d.CertPEM)[0].Raw).To(Equal(leaf.Raw), "the leaf stays while clients move")
	verifiedBy(d, now, f.r1, f.r2)

	now = now.Add(time.Minute)
	d = bundle.Plan(rtApply(d), rtRoot(t, f.r3, now), rtTracked(on1, on2, on3), rtTimings, now)
	g.Expect(crosses(d)).To(Equal([]string{"root-2", "root-3", "root-3"}),
		"R3 certifies R2, extending the path R1 <- R2, and R1 directly")
	chain := rtParse(g, d.CertPEM)
	g.Expect(chain[2].Subject.CommonName).To(Equal("root-2"), "the second link certifies R2")
	g.Expect(chain[3].Subject.CommonName).To(Equal("root-1"), "the direct cross-certificate certifies R1")
	g.Expect(chain[2].AuthorityKeyId).To(Equal(f.r3.Cert.SubjectKeyId), "links name their signer's key")
	verifiedBy(d, now, f.r1, f.r2, f.r3)

	// Every client moves to R3: after the propagation delay twice (the
	// gateway, then the clients) the server switches to a leaf of R3.
	on1, on2 = rtClient(t, "ns/a", f.r3, f.r3), rtClient(t, "ns/b", f.r3, f.r3)
	for range 3 {
		now = now.Add(time.Minute)
		d = bundle.Plan(rtApply(d), rtRoot(t, f.r3, now), rtTracked(on1, on2, on3), rtTimings, now)
	}
	g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(f.r3.Cert)), "the server switched to R3")
	g.Expect(crosses(d)).To(BeEmpty(), "a leaf of the newest root needs no cross-certificate")
	verifiedBy(d, now, f.r3)
}

func TestPlanAdoptsALegacyCopyWithAServerLeaf(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := rtNewFixture(t)
	old := rtClient(t, "ns/a", f.r1, f.r1)
	// The legacy copy of R2 serves R2 itself; a client still on R1 must keep
	// being trusted by the gateway after the switch back.
	d := bundle.Plan(rtLegacyCopy(t, f.r2), rtRoot(t, f.r2, rtNow), rtTracked(old), rtTimings, rtNow)
	g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(f.r2.Cert)))
	g.Expect(verifyServer(d.CertPEM, f.r2.Cert, rtNow)).To(Succeed(), "the self-signed root became a leaf of it")
	g.Expect(bytes.Equal(d.KeyPEM, f.r2.KeyPEM)).To(BeFalse(), "the root's key left the gateway Secret")
	g.Expect(rtNames(rtParse(g, d.CAPEM))).To(Equal([]string{"root-2"}),
		"a client CA with another subject is not adopted (fixture roots have distinct names)")
}

// TestPlanAdoptionKeepsTheRootsClientsStillUse: switching back from legacy,
// the plain copy holds only the current root, but clients not yet renewed
// still present leaves of the previous root of the same CA. That root is
// taken from their ca.crt, and only when it really signed their leaf.
func TestPlanAdoptionKeepsTheRootsClientsStillUse(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := rtNewFixture(t)
	// previous is an older root of the same CA as f.r2: same subject.
	previous := certs.MustNew(t, "root-2", rtNow.Add(-3*time.Hour), rtNow.Add(5*time.Hour), certs.Options{IsCA: true}, nil)
	stillOld := rtClient(t, "ns/a", previous, previous)
	// A client Secret naming a CA that did not sign its leaf adds nothing.
	smuggler := rtClient(t, "ns/b", f.r2, f.r2)
	smuggler.CA = append(smuggler.CA, certs.MustNew(t, "root-2", rtNow.Add(-time.Hour), rtNow.Add(time.Hour), certs.Options{IsCA: true}, nil).Cert)

	d := bundle.Plan(rtLegacyCopy(t, f.r2), rtRoot(t, f.r2, rtNow), rtTracked(stillOld, smuggler), rtTimings, rtNow)
	roots := rtParse(g, d.CAPEM)
	g.Expect(rtFingerprints(roots)).To(Equal(rtFingerprints([]*x509.Certificate{f.r2.Cert, previous.Cert})),
		"the bundle holds the current root and the root a client still uses, nothing else")
	g.Expect(d.Renew).To(Equal([]string{"ns/a"}))
}

// TestPlanKeepsTheServerWhenTheRootIsRenewedWithTheSameKey: cert-manager
// re-issues a root with the same subject and key when its private key
// rotation policy is Never. The server leaf of the old root then verifies
// with the new one too, and must still be read as on the root dualca
// recorded: not taken for a credential replaced by hand, which forces the
// switch with a Warning. Found by FuzzPlan (a cross-certificate in ca.crt,
// which also shares the root's subject and key, re-issued the credential at
// every decision).
func TestPlanKeepsTheServerWhenTheRootIsRenewedWithTheSameKey(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	old := certs.MustNew(t, "root", rtNow.Add(-2*time.Hour), rtNow.Add(10*time.Hour), certs.Options{IsCA: true}, nil)
	renewed := certs.MustNew(t, "root", rtNow.Add(-time.Hour), rtNow.Add(20*time.Hour), certs.Options{IsCA: true, Key: old.Key}, nil)
	clients := rtTracked(rtClient(t, "ns/a", old, old))

	now := rtNow.Add(-30 * time.Minute)
	d := bundle.Plan(bundle.Gateway{}, rtRoot(t, old, now), clients, rtTimings, now)
	for _, step := range []time.Duration{time.Minute, time.Second} {
		now = now.Add(step)
		prev := d
		d = bundle.Plan(rtApply(d), rtRoot(t, renewed, now), clients, rtTimings, now)
		rtExpectConsistent(g, d, rtRoot(t, renewed, now), now)
		g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(old.Cert)), "the server stays on the old root at %s", now)
		g.Expect(bytes.Equal(rtParse(g, d.CertPEM)[0].Raw, rtParse(g, prev.CertPEM)[0].Raw)).To(BeTrue(), "the server leaf is kept at %s", now)
		g.Expect(bytes.Equal(d.KeyPEM, prev.KeyPEM)).To(BeTrue(), "the server key is kept at %s", now)
		for _, e := range d.Events {
			g.Expect(e.Reason).NotTo(Equal(bundle.ReasonServerSwitchForced), "at %s: %s", now, e.Message)
		}
	}
	g.Expect(rtNames(rtParse(g, d.CAPEM))).To(Equal([]string{"root", "root"}), "both roots are trusted")
}
