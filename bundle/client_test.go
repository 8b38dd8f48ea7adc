package bundle_test

import (
	"bytes"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
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
		wantCA        int
		wantProblem   string
	}{
		"a leaf and the root that issued it are a good client": {
			tlsCrt: leaf.CertPEM, caCrt: root.CertPEM, wantLeaf: true, wantCA: 1},
		"a leaf followed by its chain is read by its first certificate": {
			tlsCrt: append(bytes.Clone(leaf.CertPEM), root.CertPEM...), caCrt: root.CertPEM, wantLeaf: true, wantCA: 1},
		"a root trusted twice is still a good client": {
			tlsCrt: leaf.CertPEM, caCrt: append(bytes.Clone(root.CertPEM), root.CertPEM...), wantLeaf: true, wantCA: 2},
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
	leaf := func(issuer *certs.CA, notAfter time.Duration) *x509.Certificate {
		return certs.MustNew(t, "agent", testNow.Add(-time.Hour), testNow.Add(notAfter), certs.Options{}, issuer).Cert
	}
	onR1 := bundle.Client{Name: "ns/a", Leaf: leaf(r1, time.Hour), CA: []*x509.Certificate{r1.Cert}}
	onR2 := bundle.Client{Name: "ns/b", Leaf: leaf(r2, time.Hour), CA: []*x509.Certificate{r2.Cert}}
	// A leaf of r1 whose ca.crt already holds r2 still uses r1.
	movingToR2 := bundle.Client{Name: "ns/c", Leaf: leaf(r1, time.Hour), CA: []*x509.Certificate{r2.Cert}}
	expired := bundle.Client{Name: "ns/d", Leaf: leaf(r1, -time.Second), CA: []*x509.Certificate{r1.Cert}}
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
			clients: bundle.Clients{Tracked: true, Items: []bundle.Client{onR1, onR2, movingToR2, expired}, Signatures: bundle.NewSignatures()},
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
