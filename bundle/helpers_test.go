package bundle_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
	"github.com/dualca/dualca/test/lib/certs"
)

// The helpers of the package's tests, once: the fixed clock, certificates
// and roots, gateway Secrets as dualca writes them, the table runner of
// the Plan tests (runPlan) with what holds for every decision
// (expectConsistent), and comparisons of decisions and certificates.

// testNow is the fixed clock of the tests, so that nothing depends on the
// wall clock.
var testNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testTimings are short, so that every moment of a rotation falls within the
// lifetimes of the certificates below.
var testTimings = bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: time.Hour}

// testMargin is how long before its expiry a server root forces the switch.
var testMargin = testTimings.TrustPropagationDelay + bundle.ClockSkew

// fixture holds the roots of a rotation history. They are ordered by age
// (NotBefore), which is the order Normalize puts them in, newest first:
// root-3, root-2, root-1, root-0.
type fixture struct {
	r0      *certs.CA // expired a second before testNow
	r1      *certs.CA // the old root
	r2      *certs.CA // the new root
	r3      *certs.CA // a newer root, for overlapping rotations
	soon    *certs.CA // an old root that expires half an hour after testNow
	brink   *certs.CA // an old root already inside the expiry margin
	edge    *certs.CA // an old root exactly at the expiry margin
	foreign *certs.CA // a CA that has nothing to do with dualca
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca := func(cn string, notBefore, notAfter time.Duration) *certs.CA {
		return certs.MustNew(t, cn, testNow.Add(notBefore), testNow.Add(notAfter), certs.Options{IsCA: true}, nil)
	}
	return &fixture{
		r0:      ca("root-0", -3*time.Hour, -time.Second),
		r1:      ca("root-1", -2*time.Hour, 10*time.Hour),
		r2:      ca("root-2", -time.Hour, 20*time.Hour),
		r3:      ca("root-3", -10*time.Minute, 30*time.Hour),
		soon:    ca("root-1-soon", -2*time.Hour, 30*time.Minute),
		brink:   ca("root-1-brink", -2*time.Hour, testMargin-time.Second),
		edge:    ca("root-1-edge", -2*time.Hour, testMargin),
		foreign: ca("foreign", -30*time.Minute, 5*time.Hour),
	}
}

// newClient is a selected client whose leaf, issued by issuer, is valid for
// two hours after testNow, and whose ca.crt holds trusts.
func newClient(t *testing.T, name string, issuer *certs.CA, trusts ...*certs.CA) bundle.Client {
	t.Helper()
	leaf := certs.MustNew(t, name, testNow.Add(-30*time.Minute), testNow.Add(2*time.Hour), certs.Options{}, issuer)
	c := bundle.Client{Name: name}
	for _, r := range trusts {
		c.CA = append(c.CA, r.Cert)
	}
	// Read against its ca.crt, as the syncer reads it: verified when
	// issuer is among trusts, else with its signature to check.
	c.Leaf = bundle.NewClientLeaf(leaf.Cert, c.CA)
	return c
}

// failedClient marks a client whose last renewal failed.
func failedClient(c bundle.Client) bundle.Client {
	c.Failed = true
	return c
}

func tracked(items ...bundle.Client) bundle.Clients {
	return bundle.Clients{Tracked: true, Items: items}
}

func list(cas ...*certs.CA) []*certs.CA { return cas }

// gatewaySecret describes a gateway Secret as dualca wrote it: the server pair of
// server, ca.crt holding roots in the given order, and annotations recording
// them, read back through their text form as from the API server. The
// overrides stand for hand edits made afterwards.
type gatewaySecret struct {
	server              *certs.CA
	roots               []*certs.CA
	root                *certs.CA
	addedAt, switchedAt time.Time
	// readyAt is when every client was first seen on root (zero: not yet).
	readyAt time.Time
	// Hand edits: when not nil, the field is replaced after the
	// annotations were recorded.
	caPEM, certPEM, keyPEM []byte
	// known are the roots dualca read from the root Secret; nil: those of
	// roots, server and root, as when dualca wrote it all.
	known []*certs.CA
}

func (s gatewaySecret) gateway() bundle.Gateway {
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
	known := s.known
	if known == nil {
		known = append(list(s.server, s.root), s.roots...)
	}
	for _, c := range known {
		gw.Known = append(gw.Known, c.Cert)
	}
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

// validRoot validates ca as the root Secret cert-manager writes for a
// self-signed CA (ca.crt is the root itself).
func validRoot(t testing.TB, ca *certs.CA, now time.Time) *bundle.Root {
	t.Helper()
	r, err := bundle.ValidateRoot(ca.CertPEM, ca.KeyPEM, ca.CertPEM, now)
	if err != nil {
		t.Fatalf("root %s is not valid at %s: %v", ca.Cert.Subject.CommonName, now, err)
	}
	return r
}

// written is the gateway Secret after a decision was written to it, its
// annotations read back through their text form.
func written(d bundle.Decision) bundle.Gateway {
	return bundle.Gateway{Exists: true, CertPEM: d.CertPEM, KeyPEM: d.KeyPEM, CAPEM: d.CAPEM,
		State: bundle.ParseState(d.State.Annotations()), Known: d.Known}
}

// legacyCopy is the gateway Secret the legacy strategy wrote for ca.
func legacyCopy(t testing.TB, ca *certs.CA) bundle.Gateway {
	t.Helper()
	return written(legacy.Plan(bundle.Gateway{}, validRoot(t, ca, testNow), bundle.Clients{}, testNow))
}

func caNames(cas []*certs.CA) []string {
	out := make([]string, len(cas))
	for i, c := range cas {
		out[i] = c.Cert.Subject.CommonName
	}
	return out
}

// wantEvent is an expected event: its reason, whether it is a Warning, and a
// part of its message (empty: not checked).
type wantEvent struct {
	reason   string
	warning  bool
	contains string
}

func eventKeys(reasons []string, warnings []bool) []string {
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

// planCase is one decision of bundle.Plan and what it must be.
type planCase struct {
	gw      bundle.Gateway
	root    *certs.CA
	clients bundle.Clients
	now     time.Time // zero: testNow

	wantServer      *certs.CA
	wantBundle      []*certs.CA // exactly, in this order
	wantPhase       bundle.Phase
	wantEvents      []wantEvent // exactly, in this order
	wantRenew       []string
	wantProgress    *bundle.Progress // nil: clients are not tracked
	wantRootAddedAt time.Time
	wantSwitchedAt  time.Time
	// wantNextCheck, when not zero, is NextCheck exactly; NextCheck is
	// always checked to be zero or after now.
	wantNextCheck time.Time
}

func runPlan(t *testing.T, tests map[string]planCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			now := tc.now
			if now.IsZero() {
				now = testNow
			}
			root := validRoot(t, tc.root, now)
			d := bundle.Plan(tc.gw, root, tc.clients, testTimings, now)
			expectConsistent(t, d, root, now)

			g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(tc.wantServer.Cert)), "the server root is %s", tc.wantServer.Cert.Subject.CommonName)
			g.Expect(verifyServer(d.CertPEM, tc.wantServer.Cert, now)).To(Succeed(), "clients trusting the server root accept the server")
			g.Expect(bytes.Contains(d.KeyPEM, tc.wantServer.KeyPEM)).To(BeFalse(), "tls.key is not the root's key")
			g.Expect(names(parsed(t, d.CAPEM))).To(Equal(caNames(tc.wantBundle)), "the roots in ca.crt")
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
			g.Expect(eventKeys(reasons, warnings)).To(Equal(eventKeys(wantReasons, wantWarnings)), "events %+v", d.Events)
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

// expectConsistent checks what holds for every zero-downtime decision:
// the recorded state describes the data, the tls pair matches, the bundle
// holds the server's root and the current root, no event carries PEM, and
// NextCheck is never in the past.
func expectConsistent(t testing.TB, d bundle.Decision, root *bundle.Root, now time.Time) {
	t.Helper()
	g := NewWithT(t)
	roots := parsed(t, d.CAPEM)
	server := bundle.Find(roots, d.State.Server)
	g.Expect(server).NotTo(BeNil(), "ca.crt holds the recorded server root")
	g.Expect(bundle.KeyMatches(d.CertPEM, d.KeyPEM)).To(BeTrue(), "tls.crt and tls.key match")
	g.Expect(d.State.Strategy).To(Equal(bundle.StrategyZeroDowntime))
	g.Expect(d.State.Root).To(Equal(root.Fingerprint), "the recorded root")
	g.Expect(verifyServer(d.CertPEM, server, now)).To(Succeed(), "the server certificate chains to the recorded server root")
	// Nothing verifies through a root before it is valid: then only from its NotBefore.
	g.Expect(verifyServer(d.CertPEM, root.Cert, later(now, root.Cert.NotBefore))).To(Succeed(), "clients of the current root accept the server")
	g.Expect(d.State.BundleHash).To(Equal(bundle.Hash(d.CAPEM)), "the recorded bundle hash")
	g.Expect(d.State.BundleRoots).To(Equal(fingerprints(roots)), "the recorded bundle roots")
	g.Expect(bundle.Contains(roots, server)).To(BeTrue(), "ca.crt holds the server root")
	g.Expect(bundle.Contains(roots, root.Cert)).To(BeTrue(), "ca.crt holds the current root")
	g.Expect(d.NextCheck.IsZero() || d.NextCheck.After(now)).To(BeTrue(), "NextCheck %s is zero or after %s", d.NextCheck, now)
	for _, e := range d.Events {
		g.Expect(e.Message).NotTo(ContainSubstring("-----"), "event messages carry no PEM")
	}
}

// verifyServer is what a client does with the server credential.
var verifyServer = bundle.VerifyServer

// newCert makes a certificate valid for an hour either side of testNow.
func newCert(t testing.TB, cn string, opts certs.Options, parent *certs.CA) *certs.CA {
	t.Helper()
	return certs.MustNew(t, cn, testNow.Add(-time.Hour), testNow.Add(time.Hour), opts, parent)
}

// newRoot makes a self-signed ECDSA root CA valid for an hour either side of
// testNow.
func newRoot(t testing.TB, cn string) *certs.CA {
	t.Helper()
	return newCert(t, cn, certs.Options{IsCA: true}, nil)
}

// expectInvalid asserts that err is an *InvalidError for field with exactly
// reason, and that its message leaks no PEM or base64 DER.
func expectInvalid(g Gomega, err error, field, reason string) {
	var ie *bundle.InvalidError
	g.Expect(errors.As(err, &ie)).To(BeTrue(), "error %v is not an *InvalidError", err)
	g.Expect(ie.Field).To(Equal(field))
	g.Expect(ie.Reason).To(Equal(reason))
	expectNoKeyMaterial(g, err.Error())
}

// expectNoKeyMaterial checks that msg holds no PEM armour and no base64 DER
// (every DER SEQUENCE longer than 255 bytes encodes to "MII").
func expectNoKeyMaterial(g Gomega, msg string) {
	g.Expect(msg).NotTo(ContainSubstring("-----"))
	g.Expect(msg).NotTo(ContainSubstring("MII"))
	g.Expect(len(msg)).To(BeNumerically("<", 200))
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}

func reparse(t testing.TB, c *x509.Certificate) *x509.Certificate {
	t.Helper()
	p, err := x509.ParseCertificate(c.Raw)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sameDecision compares two decisions made on the same input. A server
// credential issued by a decision is new each time (fresh key, randomized
// signatures), so those are compared by shape: which certificates, issued by
// whom. Reusing an issued credential is checked by the idempotence step.
func sameDecision(a, b bundle.Decision) bool {
	return slices.Equal(credentialShape(a.CertPEM), credentialShape(b.CertPEM)) &&
		string(a.CAPEM) == string(b.CAPEM) && maps.Equal(a.State.Annotations(), b.State.Annotations()) &&
		slices.Equal(a.Events, b.Events) && slices.Equal(a.Renew, b.Renew)
}

func sameCert(a, b *x509.Certificate) bool { return bundle.Fingerprint(a) == bundle.Fingerprint(b) }

func credentialShape(certPEM []byte) []string {
	cs, err := bundle.ParseCertificates("tls.crt", certPEM)
	if err != nil {
		return []string{err.Error()}
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("ca=%v subject=%s issuer=%s aki=%x", c.IsCA, c.Subject, c.Issuer, c.AuthorityKeyId)
	}
	return out
}

// certsOfPEM is lenient, for messages.
func certsOfPEM(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for b, rest := pem.Decode(data); b != nil; b, rest = pem.Decode(rest) {
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
	return out
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// parsed is the certificates of PEM a decision wrote: it must parse
// strictly and hold at least one.
func parsed(tb testing.TB, data []byte) []*x509.Certificate {
	tb.Helper()
	cs, err := bundle.ParseCertificates("pem", data)
	if err != nil {
		tb.Fatalf("the decision holds unparseable PEM: %v", err)
	}
	if len(cs) == 0 {
		tb.Fatal("the decision holds no certificate")
	}
	return cs
}

// names are the common names of certificates, "" for a nil one.
func names(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		if c != nil {
			out[i] = c.Subject.CommonName
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
