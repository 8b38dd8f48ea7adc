package legacy_test

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
	"github.com/dualca/dualca/test/lib/certs"
)

var lgNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func lgCA(t *testing.T, cn string, notBefore, notAfter time.Duration) *certs.CA {
	t.Helper()
	return certs.MustNew(t, cn, lgNow.Add(notBefore), lgNow.Add(notAfter), certs.Options{IsCA: true}, nil)
}

// lgRoot validates a root Secret holding ca's pair and caPEM as ca.crt.
func lgRoot(t *testing.T, ca *certs.CA, caPEM []byte) *bundle.Root {
	t.Helper()
	r, err := bundle.ValidateRoot(ca.CertPEM, ca.KeyPEM, caPEM, lgNow)
	if err != nil {
		t.Fatalf("root %s: %v", ca.Cert.Subject.CommonName, err)
	}
	return r
}

// lgWritten is the gateway Secret after d was written, its annotations read
// back through their text form.
func lgWritten(d bundle.Decision) bundle.Gateway {
	return bundle.Gateway{Exists: true, CertPEM: d.CertPEM, KeyPEM: d.KeyPEM, CAPEM: d.CAPEM,
		State: bundle.ParseState(d.State.Annotations())}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	r1 := lgCA(t, "root-1", -2*time.Hour, 10*time.Hour)
	r2 := lgCA(t, "root-2", -time.Hour, 20*time.Hour)
	parent := lgCA(t, "parent", -3*time.Hour, 30*time.Hour)
	other := lgCA(t, "other", -time.Hour, time.Hour)

	root1 := lgRoot(t, r1, r1.CertPEM)
	root2 := lgRoot(t, r2, r2.CertPEM)
	// A CA issuer's Secret: ca.crt is the issuer, not tls.crt.
	root1Issued := lgRoot(t, r1, parent.CertPEM)
	root1Chain := lgRoot(t, r1, certs.Bundle(r1, parent))
	copyOf := func(r *bundle.Root) bundle.Gateway {
		return lgWritten(legacy.Plan(bundle.Gateway{}, r, bundle.Clients{}, lgNow))
	}
	edited := func(gw bundle.Gateway, ca, key []byte) bundle.Gateway {
		if ca != nil {
			gw.CAPEM = ca
		}
		if key != nil {
			gw.KeyPEM = key
		}
		return gw
	}
	zeroDowntime := func(recorded *certs.CA) bundle.Gateway {
		ca := certs.Bundle(r2, r1)
		st := bundle.State{
			Strategy: bundle.StrategyZeroDowntime, Phase: bundle.PhaseRenewing,
			Root: bundle.Fingerprint(recorded.Cert), Server: bundle.Fingerprint(r1.Cert),
			RootAddedAt: lgNow.Add(-time.Hour), BundleHash: bundle.Hash(ca),
			BundleRoots: []string{bundle.Fingerprint(r2.Cert), bundle.Fingerprint(r1.Cert)},
			Clients:     &bundle.Progress{Pending: 3},
		}
		return bundle.Gateway{Exists: true, CertPEM: r1.CertPEM, KeyPEM: r1.KeyPEM, CAPEM: ca,
			State: bundle.ParseState(st.Annotations())}
	}

	tests := map[string]struct {
		gw   bundle.Gateway
		root *bundle.Root
		// wantEvents are the reasons, in order; nil: none.
		wantEvents []string
		// ignoreEvents: the case is about the data only.
		ignoreEvents bool
	}{
		"a missing gateway is created as a plain copy of the root, without events": {
			gw:   bundle.Gateway{},
			root: root1,
		},
		"a ca.crt that differs from tls.crt is copied as given": {
			gw:   bundle.Gateway{},
			root: root1Issued,
		},
		"a ca.crt holding a chain is copied as given, order and all": {
			gw:   bundle.Gateway{},
			root: root1Chain,
		},
		"an unchanged root rewrites the same copy without events": {
			gw:   copyOf(root1),
			root: root1,
		},
		"an unchanged root with its own ca.crt rewrites the same copy without events": {
			gw:   copyOf(root1Issued),
			root: root1Issued,
		},
		"a rotated root replaces the copy and is reported as a rotation": {
			gw:         copyOf(root1),
			root:       root2,
			wantEvents: []string{bundle.ReasonRootRotated, bundle.ReasonBundleUpdated},
		},
		"a change of the root's ca.crt alone replaces the copy but is no rotation": {
			gw:         copyOf(root1),
			root:       root1Issued,
			wantEvents: []string{bundle.ReasonBundleUpdated},
		},
		"a hand-edited ca.crt is replaced by the root's, and is no rotation": {
			gw:         edited(copyOf(root1), []byte("garbage"), nil),
			root:       root1,
			wantEvents: []string{bundle.ReasonBundleUpdated},
		},
		"a hand-edited tls.key is replaced by the root's": {
			gw:           edited(copyOf(root1), nil, other.KeyPEM),
			root:         root1,
			ignoreEvents: true,
		},
		"a zero-downtime gateway becomes a plain copy of its current root again, which is no rotation": {
			gw:         zeroDowntime(r2),
			root:       root2,
			wantEvents: []string{bundle.ReasonBundleUpdated},
		},
		"a zero-downtime gateway that recorded an older root reports the rotation": {
			gw:         zeroDowntime(r1),
			root:       root2,
			wantEvents: []string{bundle.ReasonRootRotated, bundle.ReasonBundleUpdated},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			d := legacy.Plan(tc.gw, tc.root, bundle.Clients{}, lgNow)

			g.Expect(bytes.Equal(d.CertPEM, tc.root.CertPEM)).To(BeTrue(), "tls.crt is the root's tls.crt")
			g.Expect(bytes.Equal(d.KeyPEM, tc.root.KeyPEM)).To(BeTrue(), "tls.key is the root's tls.key")
			g.Expect(bytes.Equal(d.CAPEM, tc.root.CAPEM)).To(BeTrue(), "ca.crt is the root's ca.crt")
			g.Expect(d.State.Annotations()).To(Equal(map[string]string{
				bundle.AnnotationStrategy: bundle.StrategyLegacy,
				bundle.AnnotationRoot:     tc.root.Fingerprint,
				bundle.AnnotationServer:   tc.root.Fingerprint,
			}), "only the strategy and the root are recorded")
			g.Expect(d.Renew).To(BeEmpty(), "the legacy strategy triggers no renewal through the decision")
			g.Expect(d.NextCheck.IsZero()).To(BeTrue(), "nothing in a plain copy changes by time alone")

			if !tc.ignoreEvents {
				var reasons []string
				for _, e := range d.Events {
					g.Expect(e.Warning).To(BeFalse(), "event %+v", e)
					g.Expect(e.Message).NotTo(ContainSubstring("-----"), "event messages carry no PEM")
					reasons = append(reasons, e.Reason)
				}
				g.Expect(reasons).To(Equal(tc.wantEvents), "events %+v", d.Events)
			}

			// Written and planned again, the copy is stable and silent.
			again := legacy.Plan(lgWritten(d), tc.root, bundle.Clients{}, lgNow.Add(time.Hour))
			g.Expect(again.Events).To(BeEmpty(), "a second plan on the written copy reports nothing")
			g.Expect(bytes.Equal(again.CAPEM, d.CAPEM) && bytes.Equal(again.CertPEM, d.CertPEM) && bytes.Equal(again.KeyPEM, d.KeyPEM)).To(BeTrue())
			g.Expect(again.State.Annotations()).To(Equal(d.State.Annotations()))
		})
	}
}

// TestPlanMarksTheClientsOfOldRootsForDeletion: right after a rotation the
// legacy strategy deletes the Secret of every selected client whose leaf the
// new root did not issue; a missing Secret has nothing to delete.
func TestPlanMarksTheClientsOfOldRootsForDeletion(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r1 := lgCA(t, "root-1", -2*time.Hour, 10*time.Hour)
	r2 := lgCA(t, "root-2", -time.Hour, 20*time.Hour)
	leaf := func(issuer *certs.CA, name string) bundle.Client {
		l := certs.MustNew(t, name, lgNow.Add(-time.Hour), lgNow.Add(time.Hour), certs.Options{}, issuer)
		ca := []*x509.Certificate{issuer.Cert}
		return bundle.Client{Name: name, Leaf: bundle.NewClientLeaf(l.Cert, ca), CA: ca}
	}
	clients := bundle.Clients{Tracked: true, Items: []bundle.Client{
		leaf(r1, "ns/old-b"), leaf(r2, "ns/renewed"), leaf(r1, "ns/old-a"),
		{Name: "ns/missing"}, {Name: "ns/broken", Failed: true},
	}}
	d := legacy.Plan(bundle.Gateway{}, lgRoot(t, r2, r2.CertPEM), clients, lgNow)
	g.Expect(d.Renew).To(Equal([]string{"ns/old-a", "ns/old-b"}), "the secrets to delete, in a stable order")
	g.Expect(d.State.Clients).To(Equal(&bundle.Progress{Renewed: 1, Pending: 3, Failed: 1}))
	g.Expect(legacy.Plan(bundle.Gateway{}, lgRoot(t, r2, r2.CertPEM), bundle.Clients{}, lgNow).Renew).To(BeEmpty(),
		"untracked clients are never touched")
}

// TestPlanNeverDeletesWhatItCannotSee: a client whose credential dualca
// cannot see (bundle.Client.Unknown: its CertificateRequest was
// garbage-collected and dualca has no memory of it) is never listed for
// deletion, whatever else is, and never counts as renewed: deleting a
// Secret on a guess could cut off a client that was already on the root.
func TestPlanNeverDeletesWhatItCannotSee(t *testing.T) {
	t.Parallel()
	r1 := lgCA(t, "root-1", -2*time.Hour, 10*time.Hour)
	r2 := lgCA(t, "root-2", -time.Hour, 20*time.Hour)
	leaf := func(issuer *certs.CA, name string) bundle.Client {
		l := certs.MustNew(t, name, lgNow.Add(-time.Hour), lgNow.Add(time.Hour), certs.Options{}, issuer)
		ca := []*x509.Certificate{issuer.Cert}
		return bundle.Client{Name: name, Leaf: bundle.NewClientLeaf(l.Cert, ca), CA: ca}
	}
	unknown := func(c bundle.Client) bundle.Client { c.Unknown = true; return c }
	tests := map[string]struct {
		items        []bundle.Client
		wantRenew    []string
		wantProgress bundle.Progress
	}{
		"an unknown client is not deleted while the clients of the old root are": {
			items:     []bundle.Client{leaf(r1, "ns/old"), {Name: "ns/hidden", Unknown: true}, leaf(r2, "ns/renewed")},
			wantRenew: []string{"ns/old"}, wantProgress: bundle.Progress{Renewed: 1, Pending: 2}},
		"an unknown client alone: nothing to delete": {
			items: []bundle.Client{{Name: "ns/hidden", Unknown: true}}, wantProgress: bundle.Progress{Pending: 1}},
		"an unknown client whose renewal failed is not deleted either": {
			items: []bundle.Client{{Name: "ns/hidden", Unknown: true, Failed: true}}, wantProgress: bundle.Progress{Failed: 1}},
		"an unknown client that came with a stale leaf of the old root is not deleted": {
			items: []bundle.Client{unknown(leaf(r1, "ns/stale"))}, wantProgress: bundle.Progress{Pending: 1}},
		"an unknown client that came with a stale leaf of the new root is not counted renewed": {
			items: []bundle.Client{unknown(leaf(r2, "ns/stale"))}, wantProgress: bundle.Progress{Pending: 1}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			for _, sigs := range []*bundle.Memory{nil, bundle.NewMemory()} {
				clients := bundle.Clients{Tracked: true, Items: tc.items, Memory: sigs}
				d := legacy.Plan(bundle.Gateway{}, lgRoot(t, r2, r2.CertPEM), clients, lgNow)
				if len(tc.wantRenew) == 0 {
					g.Expect(d.Renew).To(BeEmpty(), "the secrets to delete")
				} else {
					g.Expect(d.Renew).To(Equal(tc.wantRenew), "the secrets to delete")
				}
				g.Expect(d.State.Clients).To(Equal(&tc.wantProgress))
			}
		})
	}
}
