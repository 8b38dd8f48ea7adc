// Package certs generates throw-away certificate authorities and leaf
// certificates in memory for unit tests, integration tests and the demo
// program.
//
// It exists so that no key material is ever checked into the repository:
// every certificate a test needs is created at run time with an explicit,
// short lifetime chosen by the test. The package never reads files and never
// panics; the Must helpers report failures through testing.TB instead.
package certs

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"
)

// Key types accepted by Options.KeyType.
const (
	// KeyECDSA is an ECDSA P-256 key, the default because it is what
	// cert-manager issues most often and it is fast to generate.
	KeyECDSA = "ecdsa"
	// KeyRSA is a 2048-bit RSA key.
	KeyRSA = "rsa"
	// KeyEd25519 is an Ed25519 key.
	KeyEd25519 = "ed25519"
	// KeyRSA3072 is a 3072-bit RSA key, the size cert-manager's RSA
	// Certificates commonly ask for beyond the default.
	KeyRSA3072 = "rsa-3072"
)

// Key encodings accepted by Options.KeyEncoding.
const (
	// EncodingPKCS1 is the "RSA PRIVATE KEY" PEM block (RSA only).
	EncodingPKCS1 = "pkcs1"
	// EncodingSEC1 is the "EC PRIVATE KEY" PEM block (ECDSA only).
	EncodingSEC1 = "sec1"
	// EncodingPKCS8 is the "PRIVATE KEY" PEM block (any key type).
	EncodingPKCS8 = "pkcs8"
)

// rsaBits is the RSA key size: large enough for Go's crypto/rsa to accept,
// small enough to keep tests fast.
const rsaBits = 2048

// CA is a generated certificate together with its private key. Despite the
// name it also holds leaves made by New, so that a single type can be passed
// around by tests.
type CA struct {
	// Cert is the parsed certificate.
	Cert *x509.Certificate
	// Key is the private key belonging to Cert.
	Key crypto.Signer
	// CertPEM is Cert as a single "CERTIFICATE" PEM block.
	CertPEM []byte
	// KeyPEM is Key as a single PEM block, encoded as Options.KeyEncoding
	// asked for.
	KeyPEM []byte
}

// Options describes the unusual certificates that bad-input tests need. The
// zero value describes an ECDSA leaf certificate.
type Options struct {
	// KeyType is KeyECDSA (default when empty), KeyRSA or KeyEd25519. It is
	// ignored when Key is set.
	KeyType string
	// KeyEncoding selects the PEM form of KeyPEM. Empty means what
	// cert-manager writes by default: PKCS#1 for RSA, SEC1 for ECDSA and
	// PKCS#8 for Ed25519 (which has no other form).
	KeyEncoding string
	// Key, when set, is used instead of generating a new key. Tests use it to
	// re-issue a root with the same key, as cert-manager does when the
	// private key rotation policy is Never.
	Key crypto.Signer
	// IsCA makes a CA certificate (basic constraints CA:TRUE and the
	// certificate signing key usage).
	IsCA bool
	// NoCertSign drops x509.KeyUsageCertSign from a CA's key usage, making a
	// CA that may not sign certificates.
	NoCertSign bool
	// NoKeyUsage omits the key usage extension entirely.
	NoKeyUsage bool
	// NoBasicConstraints omits the basic constraints extension entirely, so
	// that even IsCA certificates are not usable as a CA.
	NoBasicConstraints bool
	// DNSNames are subject alternative names for a leaf.
	DNSNames []string
	// Edit, when set, changes the template last, before it is signed: name
	// constraints, a path length, what no other option says.
	Edit func(tmpl *x509.Certificate)
}

// NewCA makes a self-signed ECDSA P-256 CA named cn, valid from notBefore to
// notAfter, that may sign certificates and CRLs.
func NewCA(cn string, notBefore, notAfter time.Time) (*CA, error) {
	return New(cn, notBefore, notAfter, Options{IsCA: true}, nil)
}

// Leaf issues an ECDSA server and client certificate (not a CA) signed by ca,
// valid from notBefore to notAfter. When cn looks like a host name it is also
// the certificate's DNS name, so that the leaf can serve TLS in tests. It
// returns the certificate, its PEM and the PEM of its key.
func (ca *CA) Leaf(cn string, notBefore, notAfter time.Time) (*x509.Certificate, []byte, []byte, error) {
	if ca == nil {
		return nil, nil, nil, errors.New("issue leaf: issuing CA is nil")
	}
	var names []string
	if looksLikeHostName(cn) {
		names = []string{cn}
	}
	l, err := New(cn, notBefore, notAfter, Options{DNSNames: names}, ca)
	if err != nil {
		return nil, nil, nil, err
	}
	return l.Cert, l.CertPEM, l.KeyPEM, nil
}

// New is the general form of NewCA and Leaf: it makes a certificate named cn,
// valid from notBefore to notAfter, shaped by opts, signed by parent or
// self-signed when parent is nil.
func New(cn string, notBefore, notAfter time.Time, opts Options, parent *CA) (*CA, error) {
	key := opts.Key
	if key == nil {
		var err error
		key, err = generateKey(opts.KeyType)
		if err != nil {
			return nil, fmt.Errorf("generate key for %q: %w", cn, err)
		}
	}
	keyPEM, err := encodeKey(key, opts.KeyEncoding)
	if err != nil {
		return nil, fmt.Errorf("encode key for %q: %w", cn, err)
	}

	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number for %q: %w", cn, err)
	}
	// A zero serial number is not allowed, so shift the range to start at 1.
	serial.Add(serial, big.NewInt(1))

	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		BasicConstraintsValid: !opts.NoBasicConstraints,
		IsCA:                  opts.IsCA && !opts.NoBasicConstraints,
		DNSNames:              opts.DNSNames,
	}
	if opts.IsCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
		if opts.NoCertSign {
			tmpl.KeyUsage &^= x509.KeyUsageCertSign
		}
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		if _, ok := key.(*rsa.PrivateKey); ok {
			// RSA key exchange in TLS 1.2 encrypts with the leaf's key.
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	if opts.NoKeyUsage {
		tmpl.KeyUsage = 0
	}
	if opts.Edit != nil {
		opts.Edit(tmpl)
	}

	issuer, signer := tmpl, key
	if parent != nil {
		if parent.Cert == nil || parent.Key == nil {
			return nil, fmt.Errorf("issue %q: parent CA has no certificate or key", cn)
		}
		issuer, signer = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("create certificate %q: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse generated certificate %q: %w", cn, err)
	}
	return &CA{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  keyPEM,
	}, nil
}

// MustCA is NewCA for tests: a CA valid from one minute ago (so that small
// clock differences do not matter) for lifetime from now. It fails the test
// on error.
func MustCA(t testing.TB, cn string, lifetime time.Duration) *CA {
	t.Helper()
	now := time.Now()
	ca, err := NewCA(cn, now.Add(-time.Minute), now.Add(lifetime))
	if err != nil {
		t.Fatalf("generate CA %q: %v", cn, err)
	}
	return ca
}

// MustNew is New for tests; it fails the test on error.
func MustNew(t testing.TB, cn string, notBefore, notAfter time.Time, opts Options, parent *CA) *CA {
	t.Helper()
	c, err := New(cn, notBefore, notAfter, opts, parent)
	if err != nil {
		t.Fatalf("generate certificate %q: %v", cn, err)
	}
	return c
}

// Bundle concatenates the PEM of the given CAs in order, the way a trust
// bundle (ca.crt) is written.
func Bundle(cas ...*CA) []byte {
	var b bytes.Buffer
	for _, ca := range cas {
		if ca != nil {
			b.Write(ca.CertPEM)
		}
	}
	return b.Bytes()
}

func generateKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case "", KeyECDSA:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyRSA:
		return rsa.GenerateKey(rand.Reader, rsaBits)
	case KeyRSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case KeyEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	default:
		return nil, fmt.Errorf("unknown key type %q (want %q, %q, %q or %q)", keyType, KeyECDSA, KeyRSA, KeyRSA3072, KeyEd25519)
	}
}

func encodeKey(key crypto.Signer, encoding string) ([]byte, error) {
	if encoding == "" {
		switch key.(type) {
		case *rsa.PrivateKey:
			encoding = EncodingPKCS1
		case *ecdsa.PrivateKey:
			encoding = EncodingSEC1
		default:
			encoding = EncodingPKCS8
		}
	}
	var (
		block pem.Block
		err   error
	)
	switch encoding {
	case EncodingPKCS1:
		k, ok := key.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PKCS#1 encoding needs an RSA key, not %T", key)
		}
		block = pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	case EncodingSEC1:
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("SEC1 encoding needs an ECDSA key, not %T", key)
		}
		block.Type = "EC PRIVATE KEY"
		block.Bytes, err = x509.MarshalECPrivateKey(k)
	case EncodingPKCS8:
		block.Type = "PRIVATE KEY"
		block.Bytes, err = x509.MarshalPKCS8PrivateKey(key)
	default:
		return nil, fmt.Errorf("unknown key encoding %q (want %q, %q or %q)", encoding, EncodingPKCS1, EncodingSEC1, EncodingPKCS8)
	}
	if err != nil {
		return nil, fmt.Errorf("marshal %s key: %w", encoding, err)
	}
	return pem.EncodeToMemory(&block), nil
}

// looksLikeHostName reports whether s can go into a DNS subject alternative
// name; common names such as "old root" cannot.
func looksLikeHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '*':
		default:
			return false
		}
	}
	return true
}
