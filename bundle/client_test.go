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

func TestParseClient(t *testing.T) {
	t.Parallel()
	now := time.Now()
	root := certs.MustCA(t, "root", time.Hour)
	other := certs.MustCA(t, "root", time.Hour) // same name, another key
	leaf := certs.MustNew(t, "agent", now.Add(-time.Minute), now.Add(time.Hour), certs.Options{}, root)
	tests := map[string]struct {
		tlsCrt, caCrt []byte
		wantLeaf      bool
		// wantVerified: ca.crt's root verified the leaf as it was read.
		wantVerified bool
		wantCA       int
		wantProblem  string
	}{
		"a leaf and the root that issued it are a good client": {
			tlsCrt: leaf.CertPEM, caCrt: root.CertPEM, wantLeaf: true, wantVerified: true, wantCA: 1},
		"a leaf followed by its chain is read by its first certificate": {
			tlsCrt: append(bytes.Clone(leaf.CertPEM), root.CertPEM...), caCrt: root.CertPEM, wantLeaf: true, wantVerified: true, wantCA: 1},
		"a root trusted twice is still a good client": {
			tlsCrt: leaf.CertPEM, caCrt: append(bytes.Clone(root.CertPEM), root.CertPEM...), wantLeaf: true, wantVerified: true, wantCA: 2},
		"the root that issued the leaf after another in ca.crt verifies it": {
			tlsCrt: leaf.CertPEM, caCrt: append(bytes.Clone(other.CertPEM), root.CertPEM...), wantLeaf: true, wantVerified: true, wantCA: 2},
		"a CA in tls.crt is no client certificate": {
			tlsCrt: root.CertPEM, caCrt: root.CertPEM, wantCA: 1, wantProblem: "tls.crt: holds a CA certificate"},
		"a root of the same name that did not sign the leaf is reported, and still returned": {
			tlsCrt: leaf.CertPEM, caCrt: other.CertPEM, wantLeaf: true, wantCA: 1, wantProblem: "tls.crt: not issued by any certificate of ca.crt"},
		"a leaf in ca.crt is reported": {
			tlsCrt: leaf.CertPEM, caCrt: leaf.CertPEM, wantLeaf: true, wantCA: 1, wantProblem: "ca.crt: block 1 is not a CA certificate"},
		"a private key in ca.crt makes ca.crt unusable": {
			tlsCrt: leaf.CertPEM, caCrt: append(bytes.Clone(root.CertPEM), leaf.KeyPEM...), wantLeaf: true, wantProblem: "ca.crt: block 2 is an EC PRIVATE KEY"},
		"garbage in both reports tls.crt first": {
			tlsCrt: []byte("junk"), caCrt: []byte("junk"), wantProblem: "tls.crt: has data before the first PEM block"},
		"an empty ca.crt is missing": {
			tlsCrt: leaf.CertPEM, wantLeaf: true, wantProblem: "ca.crt: missing"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			gotLeaf, gotCA, problem := bundle.ParseClient(tt.tlsCrt, tt.caCrt)
			g.Expect(gotLeaf != nil).To(Equal(tt.wantLeaf))
			if tt.wantLeaf {
				g.Expect(gotLeaf.Is(leaf.Cert)).To(BeTrue(), "the leaf is tls.crt's first certificate")
				g.Expect(gotLeaf.Verified()).To(Equal(tt.wantVerified))
				g.Expect(gotLeaf.NotAfter()).To(Equal(leaf.Cert.NotAfter))
			}
			g.Expect(gotCA).To(HaveLen(tt.wantCA))
			if tt.wantProblem == "" {
				g.Expect(problem).To(BeEmpty())
			} else {
				g.Expect(problem).To(HavePrefix(tt.wantProblem))
			}
			g.Expect(problem).NotTo(ContainSubstring("BEGIN"))
		})
	}
}

func TestClientsUsing(t *testing.T) {
	t.Parallel()
	r1 := newRoot(t, "root")
	r2 := newRoot(t, "root") // same name, another key
	// A client's leaf, read against its ca.crt as the syncer reads it.
	client := func(name string, issuer *certs.CA, notAfter time.Duration, trusts *certs.CA) bundle.Client {
		ca := []*x509.Certificate{trusts.Cert}
		leaf := certs.MustNew(t, "agent", testNow.Add(-time.Hour), testNow.Add(notAfter), certs.Options{}, issuer).Cert
		return bundle.Client{Name: name, Leaf: bundle.NewClientLeaf(leaf, ca), CA: ca}
	}
	onR1 := client("ns/a", r1, time.Hour, r1)
	onR2 := client("ns/b", r2, time.Hour, r2)
	// A leaf of r1 whose ca.crt already holds r2 still uses r1: its
	// signature is checked against each root asked about.
	movingToR2 := client("ns/c", r1, time.Hour, r2)
	expired := client("ns/d", r1, -time.Second, r1)
	missing := bundle.Client{Name: "ns/e"}

	tests := map[string]struct {
		clients bundle.Clients
		root    *x509.Certificate
		want    int
	}{
		"no client uses a root": {
			clients: bundle.Clients{Tracked: true}, root: r1.Cert, want: 0},
		"clients whose leaf the root signed use it, whatever their ca.crt holds": {
			clients: bundle.Clients{Tracked: true, Items: []bundle.Client{onR1, onR2, movingToR2}}, root: r1.Cert, want: 2},
		"a root of the same name with another key is used only by its own leaves": {
			clients: bundle.Clients{Tracked: true, Items: []bundle.Client{onR1, onR2, movingToR2}}, root: r2.Cert, want: 1},
		"an expired leaf and a missing Secret use no root": {
			clients: bundle.Clients{Tracked: true, Items: []bundle.Client{expired, missing}}, root: r1.Cert, want: 0},
		"the count is the same with the checks remembered": {
			clients: bundle.Clients{Tracked: true, Items: []bundle.Client{onR1, onR2, movingToR2, expired}, Memory: bundle.NewMemory()},
			root:    r1.Cert, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(tc.clients.Using(tc.root, testNow)).To(Equal(tc.want))
			g.Expect(tc.clients.Using(tc.root, testNow)).To(Equal(tc.want), "asked again")
		})
	}
}

// TestClientLeafChainsAsItsCertificate: what dualca keeps of a client's
// leaf chains to exactly the roots the whole certificate does, whether it
// was verified as it was read (against which root: the one that issued it,
// or another) or keeps its signature to check, with the checks remembered
// or not: roots of the same name with another key, renewed with the same
// key, with the same key but not allowed to sign (no CA, no certificate
// signing usage, no basic constraints), the leaf itself, another leaf.
func TestClientLeafChainsAsItsCertificate(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	root := newRoot(t, "dualca root")
	ca := func(opts certs.Options) *x509.Certificate {
		return certs.MustNew(t, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), opts, nil).Cert
	}
	renewed := ca(certs.Options{IsCA: true, Key: root.Key})
	notCA := ca(certs.Options{Key: root.Key})
	noCertSign := ca(certs.Options{IsCA: true, NoCertSign: true, Key: root.Key})
	noConstraints := ca(certs.Options{IsCA: true, NoBasicConstraints: true, Key: root.Key})
	other := ca(certs.Options{IsCA: true})
	leaf := certs.MustNew(t, "agent", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{}, root).Cert
	foreignLeaf := certs.MustNew(t, "agent", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{}, newRoot(t, "dualca root")).Cert
	roots := []*x509.Certificate{root.Cert, reparse(t, root.Cert), renewed, notCA, noCertSign, noConstraints, other, leaf, foreignLeaf}
	for _, c := range []*x509.Certificate{leaf, foreignLeaf} {
		for vi, verifiers := range [][]*x509.Certificate{nil, {root.Cert}, {renewed}, {other, root.Cert}, {noCertSign}} {
			l := bundle.NewClientLeaf(c, verifiers)
			for _, sigs := range []*bundle.Memory{nil, bundle.NewMemory()} {
				for turn := range 2 {
					for ri, r := range roots {
						g.Expect(sigs.LeafChainsTo(l, r)).To(Equal(bundle.ChainsTo(c, r)),
							"leaf %s, verifiers %d (verified: %t), root %d, remembered %t, turn %d", c.Subject.CommonName, vi, l.Verified(), ri, sigs != nil, turn)
					}
				}
			}
		}
	}
	g.Expect(bundle.NewClientLeaf(leaf, []*x509.Certificate{renewed}).Verified()).To(BeTrue(), "a root of the same key verifies")
	g.Expect(bundle.NewClientLeaf(leaf, []*x509.Certificate{noCertSign, other}).Verified()).To(BeFalse(), "a root that may not sign, or of another key, does not")
	g.Expect(bundle.NewClientLeaf(nil, nil)).To(BeNil())
}
