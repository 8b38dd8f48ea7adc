package bundle_test

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanAdoptsTheLegacyStrategy checks the rule adopt (adopt.go): a
// gateway Secret without dualca's annotations seeds the bundle, without a
// Warning.
func TestPlanAdoptsTheLegacyStrategy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	onR1 := newClient(t, "ns/a", f.r1, f.r1)
	editedCopy := legacyCopy(t, f.r1)
	editedCopy.CAPEM = certs.Bundle(f.r1, f.foreign)

	runPlan(t, map[string]planCase{
		"a legacy plain copy of the old root is adopted when the root has rotated: the old root keeps serving": {
			gw:         legacyCopy(t, f.r1),
			root:       f.r2,
			clients:    tracked(onR1),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonRootRotated, contains: `"root-2"`},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow,
			wantNextCheck:   testNow.Add(time.Minute),
		},
		"a legacy plain copy of the current root is adopted as it is": {
			gw:              legacyCopy(t, f.r1),
			root:            f.r1,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: testNow,
		},
		"a legacy copy whose ca.crt was edited by hand keeps only the roots read from the root Secret, with a Warning for the other": {
			gw:         editedCopy,
			root:       f.r2,
			clients:    tracked(onR1),
			wantServer: f.r1,
			wantBundle: list(f.r2, f.r1),
			wantPhase:  bundle.PhaseBundle,
			wantEvents: []wantEvent{
				{reason: bundle.ReasonUntrustedRoot, warning: true, contains: `ca.crt held 1 CA dualca never read from the root Secret, not trusted: "foreign"`},
				{reason: bundle.ReasonRootRotated},
				{reason: bundle.ReasonBundleUpdated, contains: "2 roots"},
			},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow,
		},
	})

	t.Run("the adopted Secret records the zero-downtime strategy", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		d := bundle.Plan(legacyCopy(t, f.r1), validRoot(t, f.r2, testNow), tracked(onR1), testTimings, testNow)
		g.Expect(d.State.Annotations()).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
		g.Expect(d.State.Annotations()).NotTo(HaveKey(bundle.AnnotationServerSwitchedAt), "no switch has happened under dualca's watch")
	})
}

func TestPlanAdoptsALegacyCopyWithAServerLeaf(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	old := newClient(t, "ns/a", f.r1, f.r1)
	// The legacy copy of R2 serves R2 itself; a client still on R1 must keep
	// being trusted by the gateway after the switch back.
	d := bundle.Plan(legacyCopy(t, f.r2), validRoot(t, f.r2, testNow), tracked(old), testTimings, testNow)
	g.Expect(d.State.Server).To(Equal(bundle.Fingerprint(f.r2.Cert)))
	g.Expect(verifyServer(d.CertPEM, f.r2.Cert, testNow)).To(Succeed(), "the self-signed root became a leaf of it")
	g.Expect(bytes.Equal(d.KeyPEM, f.r2.KeyPEM)).To(BeFalse(), "the root's key left the gateway Secret")
	g.Expect(names(parsed(t, d.CAPEM))).To(Equal([]string{"root-2"}),
		"a client CA with another subject is not adopted (fixture roots have distinct names)")
}

// TestPlanAdoptionKeepsTheRootsClientsStillUse: switching back from legacy,
// the plain copy holds only the current root, but clients not yet renewed
// still present leaves of the previous root of the same CA. That root is
// taken from their ca.crt, and only when it really signed their leaf.
func TestPlanAdoptionKeepsTheRootsClientsStillUse(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	// previous is an older root of the same CA as f.r2: same subject.
	previous := certs.MustNew(t, "root-2", testNow.Add(-3*time.Hour), testNow.Add(5*time.Hour), certs.Options{IsCA: true}, nil)
	stillOld := newClient(t, "ns/a", previous, previous)
	// A client Secret naming a CA that did not sign its leaf adds nothing.
	smuggler := newClient(t, "ns/b", f.r2, f.r2)
	smuggler.CA = append(smuggler.CA, certs.MustNew(t, "root-2", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true}, nil).Cert)

	// dualca read previous from the root Secret before the legacy strategy ran.
	copied := legacyCopy(t, f.r2)
	copied.Known = append(copied.Known, previous.Cert)
	d := bundle.Plan(copied, validRoot(t, f.r2, testNow), tracked(stillOld, smuggler), testTimings, testNow)
	roots := parsed(t, d.CAPEM)
	g.Expect(fingerprints(roots)).To(Equal(fingerprints([]*x509.Certificate{f.r2.Cert, previous.Cert})),
		"the bundle holds the current root and the root a client still uses, nothing else")
	g.Expect(d.Renew).To(Equal([]string{"ns/a"}))
}

// TestPlanAdoptionNeverTrustsARootItDidNotReadFromTheRootSecret: anyone who
// may create an Issuer in a client namespace can make a CA with the root's
// subject (subjects are public) and have it sign a selected client's leaf.
// Adopted from that client's ca.crt, it would be trusted by the gateway and
// never retire. Only a root dualca read from the root Secret is adopted, on
// a first install and on a flip from the legacy strategy alike.
func TestPlanAdoptionNeverTrustsARootItDidNotReadFromTheRootSecret(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	impostor := certs.MustNew(t, "root-2", testNow.Add(-time.Hour), testNow.Add(30*time.Hour), certs.Options{IsCA: true}, nil)
	g := NewWithT(t)
	g.Expect(impostor.Cert.RawSubject).To(Equal(f.r2.Cert.RawSubject), "the impostor has the root's exact subject")
	hostile := newClient(t, "attacker/agent", impostor, impostor)
	honest := newClient(t, "ns/a", f.r2, f.r2)

	for name, gw := range map[string]bundle.Gateway{
		"first install (no gateway Secret, no record)": {},
		"flip from the legacy strategy":                legacyCopy(t, f.r2),
		"an upgrade that finds no record":              {Exists: true, CertPEM: f.r2.CertPEM, KeyPEM: f.r2.KeyPEM, CAPEM: f.r2.CertPEM},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			d := bundle.Plan(gw, validRoot(t, f.r2, testNow), tracked(honest, hostile), testTimings, testNow)
			g.Expect(names(parsed(t, d.CAPEM))).To(Equal([]string{"root-2"}), "only the current root is trusted")
			g.Expect(fingerprints(parsed(t, d.CAPEM))).To(Equal(fingerprints([]*x509.Certificate{f.r2.Cert})))
			g.Expect(bundle.Contains(d.Known, impostor.Cert)).To(BeFalse(), "the impostor is not remembered as read from the root Secret")
			e := event(d, bundle.ReasonUntrustedRoot)
			g.Expect(e).NotTo(BeNil(), "a Warning says a client's CA was not trusted")
			g.Expect(e.Warning).To(BeTrue())
			g.Expect(e.Message).To(ContainSubstring("a selected client's ca.crt held 1 CA dualca never read from the root Secret"))
		})
	}
}
