package bundle_test

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

func TestCheckCA(t *testing.T) {
	t.Parallel()
	ca := newRoot(t, "root")
	window := func(cn string, notBefore, notAfter time.Time) *x509.Certificate {
		return certs.MustNew(t, cn, notBefore, notAfter, certs.Options{IsCA: true}, nil).Cert
	}

	tests := map[string]struct {
		cert       *x509.Certificate
		wantReason string
	}{
		"a valid CA is accepted": {
			cert: ca.Cert,
		},
		"an RSA CA is accepted": {
			cert: newCert(t, "rsa", certs.Options{IsCA: true, KeyType: certs.KeyRSA}, nil).Cert,
		},
		"an Ed25519 CA is accepted": {
			cert: newCert(t, "ed25519", certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil).Cert,
		},
		"a CA without a key usage extension is accepted, since nothing restricts it": {
			cert: newCert(t, "no usage", certs.Options{IsCA: true, NoKeyUsage: true}, nil).Cert,
		},
		"a leaf is not a CA": {
			cert:       newCert(t, "leaf.example.com", certs.Options{}, ca).Cert,
			wantReason: "certificate is not a CA",
		},
		"a self-signed leaf is not a CA either": {
			cert:       newCert(t, "self.example.com", certs.Options{}, nil).Cert,
			wantReason: "certificate is not a CA",
		},
		"a certificate without basic constraints is not a CA": {
			cert:       newCert(t, "no constraints", certs.Options{IsCA: true, NoBasicConstraints: true}, nil).Cert,
			wantReason: "certificate is not a CA",
		},
		"a CA without the cert sign key usage may not sign certificates": {
			cert:       newCert(t, "no cert sign", certs.Options{IsCA: true, NoCertSign: true}, nil).Cert,
			wantReason: "CA may not sign certificates",
		},
		"an expired CA is rejected with its expiry time": {
			cert:       window("expired", testNow.Add(-2*time.Hour), testNow.Add(-time.Hour)),
			wantReason: "certificate expired at 2026-01-02T02:04:05Z",
		},
		"a CA one second past its NotAfter is expired": {
			cert:       window("just expired", testNow.Add(-time.Hour), testNow.Add(-time.Second)),
			wantReason: "certificate expired at 2026-01-02T03:04:04Z",
		},
		"a CA at exactly its NotAfter is still valid": {
			cert: window("last second", testNow.Add(-time.Hour), testNow),
		},
		"a CA that becomes valid beyond the clock skew is not valid yet": {
			cert:       window("future", testNow.Add(bundle.ClockSkew+time.Second), testNow.Add(time.Hour)),
			wantReason: "certificate not valid before 2026-01-02T03:09:06Z",
		},
		"a CA that becomes valid within the clock skew is accepted": {
			cert: window("slightly ahead", testNow.Add(bundle.ClockSkew-time.Minute), testNow.Add(time.Hour)),
		},
		"a CA that becomes valid exactly at the clock skew is accepted": {
			cert: window("at the skew", testNow.Add(bundle.ClockSkew), testNow.Add(time.Hour)),
		},
		"no certificate is rejected rather than panicking": {
			cert:       nil,
			wantReason: "certificate is missing",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			err := bundle.CheckCA("tls.crt", tc.cert, testNow)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			expectInvalid(g, err, "tls.crt", tc.wantReason)
		})
	}
}

func TestParseBundle(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root a")
	b := newRoot(t, "root b")
	expired := certs.MustNew(t, "expired", testNow.Add(-2*time.Hour), testNow.Add(-time.Hour), certs.Options{IsCA: true}, nil)
	leaf := newCert(t, "leaf.example.com", certs.Options{}, a)

	tests := map[string]struct {
		input      []byte
		want       []*x509.Certificate
		wantReason string
	}{
		"a bundle of valid roots is returned in its order": {
			input: certs.Bundle(b, a),
			want:  []*x509.Certificate{b.Cert, a.Cert},
		},
		"an expired root makes the whole bundle invalid and says which block": {
			input:      certs.Bundle(a, expired),
			wantReason: "block 2: certificate expired at 2026-01-02T02:04:05Z",
		},
		"a leaf in a trust bundle is rejected": {
			input:      certs.Bundle(leaf, a),
			wantReason: "block 1: certificate is not a CA",
		},
		"parse errors are reported as by ParseCertificates": {
			input:      append(certs.Bundle(a), leaf.KeyPEM...),
			wantReason: "block 2 is an EC PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			got, err := bundle.ParseBundle("ca.crt", tc.input, testNow)
			if tc.wantReason != "" {
				expectInvalid(g, err, "ca.crt", tc.wantReason)
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fingerprints(got)).To(Equal(fingerprints(tc.want)))
		})
	}
}

func TestValidateRoot(t *testing.T) {
	t.Parallel()
	ecRoot := newRoot(t, "ecdsa root")
	ecPKCS8Root := newCert(t, "ecdsa pkcs8 root", certs.Options{IsCA: true, KeyEncoding: certs.EncodingPKCS8}, nil)
	rsaRoot := newCert(t, "rsa root", certs.Options{IsCA: true, KeyType: certs.KeyRSA}, nil)
	rsaPKCS8Root := newCert(t, "rsa pkcs8 root", certs.Options{IsCA: true, KeyType: certs.KeyRSA, KeyEncoding: certs.EncodingPKCS8}, nil)
	edRoot := newCert(t, "ed25519 root", certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)
	// Same subject name, different key: what a re-issued root looks like.
	otherEC := newRoot(t, "ecdsa root")
	leaf := newCert(t, "leaf.example.com", certs.Options{}, ecRoot)
	expired := certs.MustNew(t, "expired", testNow.Add(-2*time.Hour), testNow.Add(-time.Hour), certs.Options{IsCA: true}, nil)

	x25519, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x25519DER, err := x509.MarshalPKCS8PrivateKey(x25519)
	if err != nil {
		t.Fatal(err)
	}
	ecKeyDER, _ := pem.Decode(ecRoot.KeyPEM)

	tests := map[string]struct {
		cert, key, ca []byte
		wantCA        int
		wantField     string
		wantReason    string
	}{
		"a cert-manager ECDSA root with a SEC1 key is valid": {
			cert: ecRoot.CertPEM, key: ecRoot.KeyPEM, ca: ecRoot.CertPEM,
			wantCA: 1,
		},
		"an ECDSA root with a PKCS#8 key is valid": {
			cert: ecPKCS8Root.CertPEM, key: ecPKCS8Root.KeyPEM,
		},
		"an RSA root with a PKCS#1 key is valid": {
			cert: rsaRoot.CertPEM, key: rsaRoot.KeyPEM, ca: rsaRoot.CertPEM,
			wantCA: 1,
		},
		"an RSA root with a PKCS#8 key is valid": {
			cert: rsaPKCS8Root.CertPEM, key: rsaPKCS8Root.KeyPEM,
		},
		"an Ed25519 root is valid": {
			cert: edRoot.CertPEM, key: edRoot.KeyPEM, ca: edRoot.CertPEM,
			wantCA: 1,
		},
		"the first certificate of tls.crt is the root, later ones are ignored by the key check": {
			cert: certs.Bundle(ecRoot, rsaRoot), key: ecRoot.KeyPEM, ca: certs.Bundle(ecRoot, rsaRoot),
			wantCA: 2,
		},
		"a whitespace-only ca.crt counts as absent": {
			cert: ecRoot.CertPEM, key: ecRoot.KeyPEM, ca: []byte("\n \n"),
		},
		"ca.crt only has to parse, it may hold a leaf": {
			cert: ecRoot.CertPEM, key: ecRoot.KeyPEM, ca: leaf.CertPEM,
			wantCA: 1,
		},
		"an empty tls.crt is missing": {
			cert: nil, key: ecRoot.KeyPEM,
			wantField: "tls.crt", wantReason: "missing",
		},
		"an empty tls.key is missing": {
			cert: ecRoot.CertPEM, key: []byte{},
			wantField: "tls.key", wantReason: "missing",
		},
		"a key of the same type that belongs to another root does not match": {
			cert: ecRoot.CertPEM, key: otherEC.KeyPEM,
			wantField: "tls.key", wantReason: "ECDSA private key does not match the certificate",
		},
		"a key of another type does not match and says so": {
			cert: ecRoot.CertPEM, key: rsaRoot.KeyPEM,
			wantField: "tls.key", wantReason: "private key is RSA but the certificate's public key is ECDSA",
		},
		"an Ed25519 key for an RSA root does not match": {
			cert: rsaRoot.CertPEM, key: edRoot.KeyPEM,
			wantField: "tls.key", wantReason: "private key is Ed25519 but the certificate's public key is RSA",
		},
		"a ca.crt holding a private key is rejected": {
			cert: ecRoot.CertPEM, key: ecRoot.KeyPEM, ca: append(bytes.Clone(ecRoot.CertPEM), ecRoot.KeyPEM...),
			wantField: "ca.crt", wantReason: "block 2 is an EC PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
		"a tls.crt holding a private key is rejected": {
			cert: append(bytes.Clone(ecRoot.CertPEM), ecRoot.KeyPEM...), key: ecRoot.KeyPEM,
			wantField: "tls.crt", wantReason: "block 2 is an EC PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
		"a leaf in tls.crt is not a root": {
			cert: leaf.CertPEM, key: leaf.KeyPEM,
			wantField: "tls.crt", wantReason: "certificate is not a CA",
		},
		"an expired root is rejected": {
			cert: expired.CertPEM, key: expired.KeyPEM,
			wantField: "tls.crt", wantReason: "certificate expired at 2026-01-02T02:04:05Z",
		},
		"two keys in tls.key are rejected": {
			cert: ecRoot.CertPEM, key: append(bytes.Clone(ecRoot.KeyPEM), otherEC.KeyPEM...),
			wantField: "tls.key", wantReason: "has 2 PEM blocks, expected a single private key",
		},
		"a certificate in tls.key is rejected": {
			cert: ecRoot.CertPEM, key: ecRoot.CertPEM,
			wantField: "tls.key", wantReason: "is a CERTIFICATE, expected RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY",
		},
		"a legacy encrypted key with PEM headers is rejected": {
			cert: ecRoot.CertPEM,
			key: pem.EncodeToMemory(&pem.Block{
				Type: "EC PRIVATE KEY", Bytes: ecKeyDER.Bytes,
				Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-256-CBC,00000000000000000000000000000000"},
			}),
			wantField: "tls.key", wantReason: "block 1 has PEM headers, which are not allowed",
		},
		"a PKCS#8 encrypted key is rejected": {
			cert:      ecRoot.CertPEM,
			key:       pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{0x30, 0}}),
			wantField: "tls.key", wantReason: "is an encrypted private key, which is not supported",
		},
		"an EC key labelled as an RSA key is rejected": {
			cert:      ecRoot.CertPEM,
			key:       pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: ecKeyDER.Bytes}),
			wantField: "tls.key", wantReason: "is not a valid PKCS#1 RSA private key",
		},
		"an RSA key labelled as an EC key is rejected": {
			cert:      rsaRoot.CertPEM,
			key:       bytes.Replace(rsaRoot.KeyPEM, []byte("RSA PRIVATE KEY"), []byte("EC PRIVATE KEY"), 2),
			wantField: "tls.key", wantReason: "is not a valid SEC1 EC private key",
		},
		"a SEC1 key labelled as PKCS#8 is rejected": {
			cert:      ecRoot.CertPEM,
			key:       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecKeyDER.Bytes}),
			wantField: "tls.key", wantReason: "is not a valid PKCS#8 private key",
		},
		"a PKCS#8 key of an unsupported type is rejected": {
			cert:      ecRoot.CertPEM,
			key:       pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: x25519DER}),
			wantField: "tls.key", wantReason: "holds a key type that is not supported, only RSA, ECDSA and Ed25519 are",
		},
		"a key with trailing garbage is rejected": {
			cert:      ecRoot.CertPEM,
			key:       append(bytes.Clone(ecRoot.KeyPEM), "garbage"...),
			wantField: "tls.key", wantReason: "has data after block 1 that is not a PEM block",
		},
		"an oversized key is rejected": {
			cert:      ecRoot.CertPEM,
			key:       append(bytes.Clone(ecRoot.KeyPEM), bytes.Repeat([]byte(" "), bundle.MaxPEMBytes)...),
			wantField: "tls.key", wantReason: "is " + strconv.Itoa(len(ecRoot.KeyPEM)+bundle.MaxPEMBytes) + " bytes, more than the limit of 262144",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root, err := bundle.ValidateRoot(tc.cert, tc.key, tc.ca, testNow)
			if tc.wantReason != "" {
				expectInvalid(g, err, tc.wantField, tc.wantReason)
				g.Expect(root).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			first, err := bundle.ParseCertificates("tls.crt", tc.cert)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(root.Cert.Raw).To(Equal(first[0].Raw))
			g.Expect(root.Fingerprint).To(Equal(bundle.Fingerprint(first[0])))
			g.Expect(root.CertPEM).To(Equal(tc.cert))
			g.Expect(root.KeyPEM).To(Equal(tc.key))
			g.Expect(root.CA).To(HaveLen(tc.wantCA))
			g.Expect(root.CAPEM).To(Equal(tc.ca))
			g.Expect(root.String()).To(ContainSubstring(root.Fingerprint))
			expectNoKeyMaterial(g, root.String())
		})
	}
}

func TestValidateRootCopiesItsInput(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ca := newRoot(t, "root")
	cert, key, caPEM := bytes.Clone(ca.CertPEM), bytes.Clone(ca.KeyPEM), bytes.Clone(ca.CertPEM)

	root, err := bundle.ValidateRoot(cert, key, caPEM, testNow)
	g.Expect(err).NotTo(HaveOccurred())
	// The caller's buffers may be reused or edited later; the validated
	// copy must not change behind our back.
	clear(cert)
	clear(key)
	clear(caPEM)
	g.Expect(root.CertPEM).To(Equal(ca.CertPEM))
	g.Expect(root.KeyPEM).To(Equal(ca.KeyPEM))
	g.Expect(root.CAPEM).To(Equal(ca.CertPEM))
	g.Expect(root.CA).To(HaveLen(1))
}

func TestKeyMatches(t *testing.T) {
	t.Parallel()
	root := newRoot(t, "root")
	other := newRoot(t, "root")
	leaf := newCert(t, "gateway.example.com", certs.Options{}, root)
	rsaLeaf := newCert(t, "rsa.example.com", certs.Options{KeyType: certs.KeyRSA}, root)

	tests := map[string]struct {
		cert, key []byte
		want      bool
	}{
		"a server certificate and its key match": {
			cert: leaf.CertPEM, key: leaf.KeyPEM, want: true,
		},
		"a server chain matches the key of its first certificate": {
			cert: certs.Bundle(leaf, root), key: leaf.KeyPEM, want: true,
		},
		"an RSA server pair matches": {
			cert: rsaLeaf.CertPEM, key: rsaLeaf.KeyPEM, want: true,
		},
		"a chain does not match the key of a later certificate": {
			cert: certs.Bundle(leaf, root), key: root.KeyPEM, want: false,
		},
		"the key of another certificate with the same name does not match": {
			cert: root.CertPEM, key: other.KeyPEM, want: false,
		},
		"a key of another type does not match": {
			cert: leaf.CertPEM, key: rsaLeaf.KeyPEM, want: false,
		},
		"an empty key does not match": {
			cert: leaf.CertPEM, key: nil, want: false,
		},
		"an empty certificate does not match": {
			cert: nil, key: leaf.KeyPEM, want: false,
		},
		"garbage does not match": {
			cert: []byte("garbage"), key: []byte("garbage"), want: false,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.KeyMatches(tc.cert, tc.key)).To(Equal(tc.want))
		})
	}
}

func TestRootString(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		root *bundle.Root
		want string
	}{
		"a nil root says so": {
			root: nil,
			want: "<no root>",
		},
		"a root without a certificate says so": {
			root: &bundle.Root{KeyPEM: []byte("-----BEGIN PRIVATE KEY-----")},
			want: "<no root>",
		},
		"a root is described by fingerprint and validity, never by its key": {
			root: &bundle.Root{
				Cert:        &x509.Certificate{NotBefore: testNow, NotAfter: testNow.Add(time.Hour)},
				KeyPEM:      []byte("-----BEGIN PRIVATE KEY-----"),
				Fingerprint: "ab12",
			},
			want: "root ab12 (valid 2026-01-02T03:04:05Z to 2026-01-02T04:04:05Z)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(tc.root.String()).To(Equal(tc.want))
		})
	}
}
