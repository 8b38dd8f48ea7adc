package bundle_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
)

// fuzzSeeds generates the certificates of the seed corpus at run time (no
// key material is checked in), with lifetimes around fxNow so that the
// validity checks pass for the valid seeds.
func fuzzSeeds(f *testing.F) (ec, rsa, ed, leaf *certs.CA) {
	f.Helper()
	mk := func(cn string, opts certs.Options, parent *certs.CA) *certs.CA {
		c, err := certs.New(cn, fxNow.Add(-time.Hour), fxNow.Add(time.Hour), opts, parent)
		if err != nil {
			f.Fatal(err)
		}
		return c
	}
	ec = mk("ecdsa root", certs.Options{IsCA: true}, nil)
	rsa = mk("rsa root", certs.Options{IsCA: true, KeyType: certs.KeyRSA, KeyEncoding: certs.EncodingPKCS8}, nil)
	ed = mk("ed25519 root", certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)
	leaf = mk("leaf.example.com", certs.Options{KeyType: certs.KeyEd25519}, ec)
	return ec, rsa, ed, leaf
}

// truncations returns data cut at a few interesting places.
func truncations(data []byte) [][]byte {
	n := len(data)
	return [][]byte{data[:n/3], data[:n/2], data[:n-1], data[:n-10], data[1:]}
}

func FuzzParseCertificates(f *testing.F) {
	// The seeds are small on purpose: the fuzzer minimizes every new
	// interesting input, which costs time quadratic in its length, so large
	// seeds (an RSA bundle is kilobytes) stall the search for minutes.
	ec, rsa, ed, _ := fuzzSeeds(f)
	for _, seed := range [][]byte{
		ec.CertPEM,
		ed.CertPEM,
		rsa.CertPEM,
		certs.Bundle(ed, ed),
		[]byte("\r\n" + strings.ReplaceAll(string(ed.CertPEM), "\n", "\r\n") + "\n\t "),
		append(bytes.Clone(ed.CertPEM), ed.KeyPEM...),
		append(bytes.Clone(ed.CertPEM), "junk"...),
		[]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n"),
		[]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
		[]byte("-----BEGIN CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\n"),
		[]byte("-----BEGIN \n-----END \n"),
		[]byte("junk"),
		{},
	} {
		f.Add(seed)
	}
	for _, seed := range truncations(ec.CertPEM) {
		f.Add(seed)
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		input := bytes.Clone(data)
		got, err := bundle.ParseCertificates("ca.crt", data)
		if !bytes.Equal(input, data) {
			t.Fatal("ParseCertificates modified its input")
		}
		if err != nil {
			checkFuzzError(t, err, "ca.crt")
			if got != nil {
				t.Fatal("certificates returned together with an error")
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("success without certificates")
		}
		// What we accept we can publish, and what we publish reads back as
		// the same certificates.
		again, err := bundle.ParseCertificates("ca.crt", bundle.Encode(got))
		if err != nil {
			t.Fatalf("the encoding of accepted certificates does not parse: %v", err)
		}
		if !slices.Equal(fxFingerprints(got), fxFingerprints(again)) {
			t.Fatal("round trip changed the certificates")
		}
		// Normalize must not panic on anything we parsed and must keep a
		// subset of it.
		for _, c := range bundle.Normalize(got, fxNow) {
			if !bundle.Contains(got, c) {
				t.Fatal("Normalize invented a certificate")
			}
		}
	})
}

func FuzzValidateRoot(f *testing.F) {
	ec, rsa, ed, leaf := fuzzSeeds(f)
	f.Add(ec.CertPEM, ec.KeyPEM, ec.CertPEM)
	f.Add(ed.CertPEM, ed.KeyPEM, []byte{})
	f.Add(rsa.CertPEM, rsa.KeyPEM, ed.CertPEM)
	f.Add(leaf.CertPEM, leaf.KeyPEM, ec.CertPEM)
	f.Add(ec.CertPEM, ed.KeyPEM, ec.KeyPEM)
	f.Add(ed.CertPEM, append(bytes.Clone(ed.KeyPEM), ed.KeyPEM...), []byte("junk"))
	for _, k := range truncations(ec.KeyPEM) {
		f.Add(ed.CertPEM, k, []byte{})
	}
	for _, c := range truncations(ed.CertPEM) {
		f.Add(c, ed.KeyPEM, c)
	}
	f.Add([]byte{}, []byte{}, []byte{})

	f.Fuzz(func(t *testing.T, certPEM, keyPEM, caPEM []byte) {
		root, err := bundle.ValidateRoot(certPEM, keyPEM, caPEM, fxNow)
		if err != nil {
			checkFuzzError(t, err, "tls.crt", "tls.key", "ca.crt")
			if root != nil {
				t.Fatal("root returned together with an error")
			}
			return
		}
		if root.Cert == nil || root.Fingerprint != bundle.Fingerprint(root.Cert) {
			t.Fatal("root without certificate or with a wrong fingerprint")
		}
		if !bytes.Equal(root.CertPEM, certPEM) || !bytes.Equal(root.KeyPEM, keyPEM) || !bytes.Equal(root.CAPEM, caPEM) {
			t.Fatal("root does not hold its input exactly")
		}
		if err := bundle.CheckCA("tls.crt", root.Cert, fxNow); err != nil {
			t.Fatalf("accepted root fails CheckCA: %v", err)
		}
		if !bundle.KeyMatches(certPEM, keyPEM) {
			t.Fatal("accepted root's key does not match by KeyMatches")
		}
		if !bundle.ChainsTo(root.Cert, root.Cert) {
			t.Fatal("root does not chain to itself")
		}
	})
}

// checkFuzzError checks that err is an *InvalidError for one of fields whose
// message does not echo the input.
func checkFuzzError(t *testing.T, err error, fields ...string) {
	t.Helper()
	var ie *bundle.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v is not an *InvalidError", err)
	}
	if !slices.Contains(fields, ie.Field) {
		t.Fatalf("error names field %q", ie.Field)
	}
	if ie.Reason == "" || len(ie.Reason) > 160 || strings.Contains(ie.Reason, "-----") {
		t.Fatalf("unfit reason %q", ie.Reason)
	}
}
