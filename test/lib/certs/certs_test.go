package certs_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/certs"
)

// The tests check the generated certificates with the standard library only,
// so that they do not depend on the package the certificates are meant to
// test.

var start = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func TestNewCA(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ca, err := certs.NewCA("dualca root", start, start.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())

	c := ca.Cert
	g.Expect(c.Subject.CommonName).To(Equal("dualca root"))
	g.Expect(c.NotBefore).To(Equal(start))
	g.Expect(c.NotAfter).To(Equal(start.Add(time.Hour)))
	g.Expect(c.IsCA).To(BeTrue())
	g.Expect(c.BasicConstraintsValid).To(BeTrue())
	g.Expect(c.KeyUsage).To(Equal(x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature))
	g.Expect(c.SerialNumber.Sign()).To(Equal(1))
	g.Expect(c.CheckSignatureFrom(c)).To(Succeed(), "self-signed")
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	g.Expect(ok).To(BeTrue(), "ECDSA by default")
	g.Expect(pub.Curve).To(Equal(elliptic.P256()))

	block, rest := pem.Decode(ca.CertPEM)
	g.Expect(rest).To(BeEmpty())
	g.Expect(block.Type).To(Equal("CERTIFICATE"))
	g.Expect(block.Bytes).To(Equal(c.Raw))
	_, err = tls.X509KeyPair(ca.CertPEM, ca.KeyPEM)
	g.Expect(err).NotTo(HaveOccurred(), "the key PEM belongs to the certificate")

	other, err := certs.NewCA("dualca root", start, start.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(other.Cert.SerialNumber).NotTo(Equal(c.SerialNumber), "serial numbers are random")
	g.Expect(other.Cert.RawSubject).To(Equal(c.RawSubject), "the same name gives the same subject")
}

func TestLeaf(t *testing.T) {
	t.Parallel()
	ca, err := certs.NewCA("root", start, start.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		cn        string
		wantNames []string
	}{
		"a host name is also the DNS name, so the leaf can serve TLS": {
			cn:        "gateway.ns.svc",
			wantNames: []string{"gateway.ns.svc"},
		},
		"a name that is no host name is only the common name": {
			cn:        "system:node client",
			wantNames: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			cert, certPEM, keyPEM, err := ca.Leaf(tc.cn, start, start.Add(time.Hour))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cert.Subject.CommonName).To(Equal(tc.cn))
			g.Expect(cert.DNSNames).To(Equal(tc.wantNames))
			g.Expect(cert.IsCA).To(BeFalse())
			g.Expect(cert.NotAfter).To(Equal(start.Add(time.Hour)))
			g.Expect(cert.ExtKeyUsage).To(ConsistOf(x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth))
			g.Expect(cert.CheckSignatureFrom(ca.Cert)).To(Succeed())

			pool := x509.NewCertPool()
			pool.AddCert(ca.Cert)
			_, err = cert.Verify(x509.VerifyOptions{
				Roots:       pool,
				CurrentTime: start.Add(time.Minute),
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			g.Expect(err).NotTo(HaveOccurred())

			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pair.Leaf.Raw).To(Equal(cert.Raw))
		})
	}
	t.Run("a nil CA cannot issue", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		var none *certs.CA
		_, _, _, err := none.Leaf("x", start, start.Add(time.Hour))
		g.Expect(err).To(HaveOccurred())
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	parent, err := certs.NewCA("parent", start, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	reused, err := certs.NewCA("reused", start, start.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}

	tests := map[string]struct {
		opts      certs.Options
		parent    *certs.CA
		check     func(g Gomega, c *certs.CA)
		wantBlock string
		wantErr   bool
	}{
		"an RSA CA has a 2048-bit key written as PKCS#1, like cert-manager does": {
			opts:      certs.Options{IsCA: true, KeyType: certs.KeyRSA},
			wantBlock: "RSA PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				pub, ok := c.Cert.PublicKey.(*rsa.PublicKey)
				g.Expect(ok).To(BeTrue())
				g.Expect(pub.N.BitLen()).To(Equal(2048))
				g.Expect(c.Cert.IsCA).To(BeTrue())
			},
		},
		"an ECDSA key is written as SEC1 by default": {
			opts:      certs.Options{},
			wantBlock: "EC PRIVATE KEY",
		},
		"an ECDSA key can be written as PKCS#8": {
			opts:      certs.Options{KeyEncoding: certs.EncodingPKCS8},
			wantBlock: "PRIVATE KEY",
		},
		"an Ed25519 key is written as PKCS#8": {
			opts:      certs.Options{IsCA: true, KeyType: certs.KeyEd25519},
			wantBlock: "PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				_, ok := c.Cert.PublicKey.(ed25519.PublicKey)
				g.Expect(ok).To(BeTrue())
			},
		},
		"a CA without cert sign keeps its other usages": {
			opts:      certs.Options{IsCA: true, NoCertSign: true},
			wantBlock: "EC PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				g.Expect(c.Cert.IsCA).To(BeTrue())
				g.Expect(c.Cert.KeyUsage).To(Equal(x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature))
			},
		},
		"a CA can lack the key usage extension": {
			opts:      certs.Options{IsCA: true, NoKeyUsage: true},
			wantBlock: "EC PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				g.Expect(c.Cert.IsCA).To(BeTrue())
				g.Expect(c.Cert.KeyUsage).To(BeZero())
			},
		},
		"a certificate can lack basic constraints": {
			opts:      certs.Options{IsCA: true, NoBasicConstraints: true},
			wantBlock: "EC PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				g.Expect(c.Cert.BasicConstraintsValid).To(BeFalse())
				g.Expect(c.Cert.IsCA).To(BeFalse())
			},
		},
		"an intermediate CA is signed by its parent": {
			opts:      certs.Options{IsCA: true},
			parent:    parent,
			wantBlock: "EC PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				g.Expect(c.Cert.CheckSignatureFrom(parent.Cert)).To(Succeed())
				g.Expect(c.Cert.RawIssuer).To(Equal(parent.Cert.RawSubject))
			},
		},
		"a given key is reused, as for a root re-issued with the same key": {
			opts:      certs.Options{IsCA: true, Key: reused.Key},
			wantBlock: "EC PRIVATE KEY",
			check: func(g Gomega, c *certs.CA) {
				g.Expect(c.Cert.PublicKey).To(Equal(reused.Cert.PublicKey))
				g.Expect(c.KeyPEM).To(Equal(reused.KeyPEM))
				g.Expect(c.Cert.Raw).NotTo(Equal(reused.Cert.Raw))
			},
		},
		"an unknown key type is an error": {
			opts:    certs.Options{KeyType: "dsa"},
			wantErr: true,
		},
		"an unknown key encoding is an error": {
			opts:    certs.Options{KeyEncoding: "pkcs12"},
			wantErr: true,
		},
		"PKCS#1 for a non-RSA key is an error": {
			opts:    certs.Options{KeyEncoding: certs.EncodingPKCS1},
			wantErr: true,
		},
		"SEC1 for a non-ECDSA key is an error": {
			opts:    certs.Options{KeyType: certs.KeyEd25519, KeyEncoding: certs.EncodingSEC1},
			wantErr: true,
		},
		"a parent without a key is an error": {
			opts:    certs.Options{},
			parent:  &certs.CA{Cert: parent.Cert},
			wantErr: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			c, err := certs.New("subject", start, start.Add(time.Hour), tc.opts, tc.parent)
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				g.Expect(c).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			block, rest := pem.Decode(c.KeyPEM)
			g.Expect(rest).To(BeEmpty())
			g.Expect(block.Type).To(Equal(tc.wantBlock))
			_, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM)
			g.Expect(err).NotTo(HaveOccurred())
			if tc.check != nil {
				tc.check(g, c)
			}
		})
	}
}

func TestMustCA(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	before := time.Now().Truncate(time.Second)
	ca := certs.MustCA(t, "root", time.Hour)
	g.Expect(ca.Cert.NotBefore).To(BeTemporally("~", before.Add(-time.Minute), 2*time.Second))
	g.Expect(ca.Cert.NotAfter).To(BeTemporally("~", before.Add(time.Hour), 2*time.Second))
	g.Expect(ca.Cert.IsCA).To(BeTrue())

	leaf := certs.MustNew(t, "leaf.example.com", ca.Cert.NotBefore, ca.Cert.NotAfter, certs.Options{}, ca)
	g.Expect(leaf.Cert.CheckSignatureFrom(ca.Cert)).To(Succeed())
}

func TestBundle(t *testing.T) {
	t.Parallel()
	a := certs.MustCA(t, "a", time.Hour)
	b := certs.MustCA(t, "b", time.Hour)
	tests := map[string]struct {
		in   []*certs.CA
		want []byte
	}{
		"certificates are concatenated in order": {
			in:   []*certs.CA{b, a},
			want: append(bytes.Clone(b.CertPEM), a.CertPEM...),
		},
		"nil entries are skipped": {
			in:   []*certs.CA{nil, a},
			want: a.CertPEM,
		},
		"no certificates give no bytes": {
			in:   nil,
			want: nil,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bytes.Equal(certs.Bundle(tc.in...), tc.want)).To(BeTrue())
		})
	}
}
