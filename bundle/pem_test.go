package bundle_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

func TestParseCertificates(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root a")
	b := newRoot(t, "root b")
	keyPEM := newCert(t, "key", certs.Options{KeyEncoding: certs.EncodingPKCS8}, nil).KeyPEM
	two := certs.Bundle(a, b)
	aBody := strings.TrimSuffix(string(a.CertPEM), "-----END CERTIFICATE-----\n")

	keyDER, _ := pem.Decode(keyPEM)
	// Padding with whitespace gives inputs of an exact size that are valid
	// apart from their size.
	exactPEM := append(bytes.Clone(a.CertPEM), bytes.Repeat([]byte("\n"), bundle.MaxPEMBytes-len(a.CertPEM))...)
	bigPEM := append(bytes.Clone(exactPEM), '\n')

	tests := map[string]struct {
		input      []byte
		want       []*certs.CA
		wantReason string
	}{
		"a single certificate parses": {
			input: a.CertPEM,
			want:  []*certs.CA{a},
		},
		"several certificates parse in order": {
			input: two,
			want:  []*certs.CA{a, b},
		},
		"blank lines, CRLF line endings and surrounding whitespace are allowed": {
			input: []byte("\r\n \t\n" + strings.ReplaceAll(string(a.CertPEM), "\n", "\r\n") + "\n\n\t " + string(b.CertPEM) + "\n  \n"),
			want:  []*certs.CA{a, b},
		},
		"an input of exactly MaxPEMBytes is accepted": {
			input: exactPEM,
			want:  []*certs.CA{a},
		},
		"empty input is missing": {
			input:      nil,
			wantReason: "missing",
		},
		"whitespace-only input has no blocks": {
			input:      []byte(" \n\r\n\t"),
			wantReason: "contains no PEM blocks",
		},
		"a PRIVATE KEY block in ca.crt is rejected": {
			input:      append(bytes.Clone(a.CertPEM), keyPEM...),
			wantReason: "block 2 is a PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
		"an RSA PRIVATE KEY block is named with the right article": {
			input:      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte{1}}),
			wantReason: "block 1 is an RSA PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
		"a block type that is not a plain name is not echoed": {
			input:      pem.EncodeToMemory(&pem.Block{Type: "<script>x", Bytes: []byte{1}}),
			wantReason: "block 1 is a block of an unrecognised type, only CERTIFICATE blocks are allowed",
		},
		"PEM headers are rejected": {
			input: append(bytes.Clone(a.CertPEM), pem.EncodeToMemory(&pem.Block{
				Type: "CERTIFICATE", Headers: map[string]string{"Comment": "old root"}, Bytes: b.Cert.Raw,
			})...),
			wantReason: "block 2 has PEM headers, which are not allowed",
		},
		"trailing garbage is rejected": {
			input:      append(bytes.Clone(two), "# rotated on Monday\n"...),
			wantReason: "has data after block 2 that is not a PEM block",
		},
		"garbage between blocks is rejected": {
			input:      []byte(string(a.CertPEM) + "subject=CN = root b\n" + string(b.CertPEM)),
			wantReason: "has data after block 1 that is not a PEM block",
		},
		"leading garbage such as openssl's Bag Attributes is rejected": {
			input:      append([]byte("Bag Attributes\n"), a.CertPEM...),
			wantReason: "has data before the first PEM block",
		},
		"text after the END line on the same line is rejected": {
			input:      []byte(strings.TrimSuffix(string(a.CertPEM), "\n") + " trailing\n"),
			wantReason: "block 1 is not well-formed PEM",
		},
		"PEM cut off inside the base64 body is truncated": {
			input:      a.CertPEM[:len(a.CertPEM)/2],
			wantReason: "block 1 is truncated: no END line",
		},
		"PEM cut off inside the END line is malformed": {
			input:      a.CertPEM[:len(a.CertPEM)-8],
			wantReason: "block 1 is not well-formed PEM",
		},
		"a block without END followed by a complete block is rejected, not skipped": {
			input:      []byte(aBody + string(b.CertPEM)),
			wantReason: "block 1 is truncated: it has no END line before the next block",
		},
		"an END line of another type is rejected": {
			input:      []byte(aBody + "-----END PRIVATE KEY-----\n"),
			wantReason: "block 1 is not well-formed PEM",
		},
		"invalid base64 is rejected": {
			input:      []byte("-----BEGIN CERTIFICATE-----\nnot*base64!\n-----END CERTIFICATE-----\n"),
			wantReason: "block 1 is not well-formed PEM",
		},
		"non-certificate DER in a CERTIFICATE block is rejected": {
			input: pem.EncodeToMemory(&pem.Block{
				Type:  "CERTIFICATE",
				Bytes: keyDER.Bytes,
			}),
			wantReason: "block 1 is not a valid x509 certificate",
		},
		"a certificate with bytes after its DER is rejected": {
			input:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: append(bytes.Clone(a.Cert.Raw), 0)}),
			wantReason: "block 1 is not a valid x509 certificate",
		},
		"an empty CERTIFICATE block is rejected": {
			input:      []byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
			wantReason: "block 1 is not a valid x509 certificate",
		},
		"input larger than MaxPEMBytes is rejected before parsing": {
			input:      bigPEM,
			wantReason: "is 262145 bytes, more than the limit of 262144",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			got, err := bundle.ParseCertificates("ca.crt", tc.input)
			if tc.wantReason != "" {
				expectInvalid(g, err, "ca.crt", tc.wantReason)
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			want := make([]*x509.Certificate, len(tc.want))
			for i, c := range tc.want {
				want[i] = c.Cert
			}
			g.Expect(fingerprints(got)).To(Equal(fingerprints(want)))
		})
	}
}

func TestInvalidErrorError(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		err  *bundle.InvalidError
		want string
	}{
		"the field prefixes the reason": {
			err:  &bundle.InvalidError{Field: "ca.crt", Reason: "block 2 is a PRIVATE KEY, only CERTIFICATE blocks are allowed"},
			want: "ca.crt: block 2 is a PRIVATE KEY, only CERTIFICATE blocks are allowed",
		},
		"without a field only the reason is shown": {
			err:  &bundle.InvalidError{Reason: "missing"},
			want: "missing",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(tc.err.Error()).To(Equal(tc.want))
		})
	}
}

func TestEncode(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root a")
	b := newRoot(t, "root b")
	rsaRoot := newCert(t, "rsa root", certs.Options{IsCA: true, KeyType: certs.KeyRSA}, nil)
	edRoot := newCert(t, "ed25519 root", certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)

	tests := map[string]struct {
		in   []*x509.Certificate
		want []byte
	}{
		"nothing encodes to nothing": {
			in:   nil,
			want: nil,
		},
		"certificates are encoded in the given order, exactly as the generator wrote them": {
			in:   []*x509.Certificate{b.Cert, a.Cert, rsaRoot.Cert, edRoot.Cert},
			want: certs.Bundle(b, a, rsaRoot, edRoot),
		},
		"nil entries are skipped instead of panicking": {
			in:   []*x509.Certificate{nil, a.Cert, nil},
			want: a.CertPEM,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			got := bundle.Encode(tc.in)
			g.Expect(got).To(HaveLen(len(tc.want)))
			g.Expect(bytes.Equal(got, tc.want)).To(BeTrue())
			if len(got) == 0 {
				return
			}
			// The round trip: whatever we publish, we can read back.
			parsed, err := bundle.ParseCertificates("ca.crt", got)
			g.Expect(err).NotTo(HaveOccurred())
			var nonNil []*x509.Certificate
			for _, c := range tc.in {
				if c != nil {
					nonNil = append(nonNil, c)
				}
			}
			g.Expect(fingerprints(parsed)).To(Equal(fingerprints(nonNil)))
		})
	}
}

func TestHash(t *testing.T) {
	t.Parallel()
	a := newRoot(t, "root a")
	b := newRoot(t, "root b")

	tests := map[string]struct {
		data      []byte
		want      string
		differsOf []byte
	}{
		"the hash of nothing is the well-known SHA-256 prefix": {
			data: nil,
			want: "sha256:e3b0c44298fc1c14",
		},
		"the hash of a short string is stable across releases": {
			data: []byte("abc"),
			want: "sha256:ba7816bf8f01cfea",
		},
		"a bundle hashes differently from the same bundle in another order": {
			data:      certs.Bundle(a, b),
			differsOf: certs.Bundle(b, a),
		},
		"one trailing newline changes the hash, so hand edits are noticed": {
			data:      certs.Bundle(a),
			differsOf: append(certs.Bundle(a), '\n'),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			got := bundle.Hash(tc.data)
			g.Expect(got).To(MatchRegexp(`^sha256:[0-9a-f]{16}$`))
			g.Expect(bundle.Hash(bytes.Clone(tc.data))).To(Equal(got), "same bytes, same hash")
			if tc.want != "" {
				g.Expect(got).To(Equal(tc.want))
			}
			if tc.differsOf != nil {
				g.Expect(bundle.Hash(tc.differsOf)).NotTo(Equal(got))
			}
		})
	}
}

// Encode writes what encoding/pem writes, whatever the length of the DER
// (a last line full or partial, padded or not): the gateway reloads on any
// byte that changes.
func TestEncodeIsEncodingPEMs(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	var all []*x509.Certificate
	var want []byte
	lengths := map[int]bool{}
	for n := range 60 {
		c := newCert(t, strings.Repeat("x", n+1), certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)
		lengths[len(c.Cert.Raw)%48] = true
		all = append(all, c.Cert)
		want = append(want, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})...)
		g.Expect(bundle.Encode([]*x509.Certificate{c.Cert})).To(Equal(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Cert.Raw})))
	}
	g.Expect(bundle.Encode(all)).To(Equal(want))
	g.Expect(lengths).To(HaveKey(0), "a DER length that fills its last line exactly is covered")
}
