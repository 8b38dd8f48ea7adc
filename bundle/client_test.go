package bundle_test

import (
	"bytes"
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
