package bundle

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"
)

// ClockSkew is how far before its NotBefore a CA is already accepted. A root
// that cert-manager has just issued on a node whose clock runs slightly ahead
// must not be rejected as "not yet valid" by a sidecar on a node whose clock
// runs behind.
const ClockSkew = 5 * time.Minute

// timeFormat is how times appear in error reasons: UTC so that events read
// the same wherever they are viewed.
const timeFormat = time.RFC3339

// CheckCA returns nil when c can act as a trust anchor and issuing CA at now:
// it has valid basic constraints with IsCA set, its key usage (when present)
// allows signing certificates, and now lies within
// [NotBefore - ClockSkew, NotAfter]. Otherwise it returns an *InvalidError for
// field, with a reason such as "certificate is not a CA".
func CheckCA(field string, c *x509.Certificate, now time.Time) error {
	if reason := checkCA(c, now); reason != "" {
		return invalid(field, "%s", reason)
	}
	return nil
}

// checkCA returns "" when c is a usable CA at now, else the reason it is not.
func checkCA(c *x509.Certificate, now time.Time) string {
	switch {
	case c == nil:
		return "certificate is missing"
	case !c.BasicConstraintsValid || !c.IsCA:
		return "certificate is not a CA"
	case c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0:
		// Verifiers (including Go's CheckSignatureFrom) refuse chains
		// through such a CA, so publishing it would break clients.
		return "CA may not sign certificates"
	case now.After(c.NotAfter):
		return "certificate expired at " + c.NotAfter.UTC().Format(timeFormat)
	case now.Before(c.NotBefore.Add(-ClockSkew)):
		return "certificate not valid before " + c.NotBefore.UTC().Format(timeFormat)
	}
	return ""
}

// ParseBundle parses a trust bundle strictly (see ParseCertificates) and
// checks every certificate with CheckCA at now. Expired certificates are an
// error here: a bundle someone hands us must be usable as a whole; dropping
// expired roots from our own set is Normalize's job.
func ParseBundle(field string, data []byte, now time.Time) ([]*x509.Certificate, error) {
	certs, err := ParseCertificates(field, data)
	if err != nil {
		return nil, err
	}
	for i, c := range certs {
		if reason := checkCA(c, now); reason != "" {
			return nil, invalid(field, "block %d: %s", i+1, reason)
		}
	}
	return certs, nil
}

// Root is a validated root CA from the root Secret that cert-manager
// maintains.
type Root struct {
	// Cert is the root CA certificate: the first block of tls.crt.
	Cert *x509.Certificate
	// CertPEM is tls.crt exactly as given (validated), copied so that later
	// changes to the caller's buffer do not affect it.
	CertPEM []byte
	// KeyPEM is tls.key exactly as given, validated to match Cert, copied
	// like CertPEM.
	KeyPEM []byte
	// CA holds the certificates of ca.crt; it is empty when ca.crt is
	// absent or empty.
	CA []*x509.Certificate
	// CAPEM is ca.crt exactly as given (validated), for the legacy strategy's
	// plain copy.
	CAPEM []byte
	// Fingerprint is Fingerprint(Cert).
	Fingerprint string
}

// ValidateRoot checks the three fields of a cert-manager CA Secret at now:
// tls.crt parses strictly and its first certificate passes CheckCA; tls.key is
// a single PEM private key block (PKCS#1 RSA, SEC1 EC, or PKCS#8 holding RSA,
// ECDSA or Ed25519; no headers; at most MaxPEMBytes) that is the private key
// of that certificate; and ca.crt, when not empty, holds only certificates.
// Empty tls.crt or tls.key is reported as "missing". Any problem is an
// *InvalidError naming the field at fault.
func ValidateRoot(certPEM, keyPEM, caPEM []byte, now time.Time) (*Root, error) {
	certs, err := ParseCertificates("tls.crt", certPEM)
	if err != nil {
		return nil, err
	}
	key, err := parsePrivateKey("tls.key", keyPEM)
	if err != nil {
		return nil, err
	}
	var ca []*x509.Certificate
	// A whitespace-only ca.crt carries no certificates, the same as an
	// absent one; cert-manager leaves ca.crt empty for some issuers.
	if len(bytes.TrimLeft(caPEM, pemWhitespace)) > 0 {
		if ca, err = ParseCertificates("ca.crt", caPEM); err != nil {
			return nil, err
		}
	}
	cert := certs[0]
	if err := CheckCA("tls.crt", cert, now); err != nil {
		return nil, err
	}
	if reason := keyMismatch(cert, key); reason != "" {
		return nil, invalid("tls.key", "%s", reason)
	}
	return &Root{
		Cert:        cert,
		CertPEM:     bytes.Clone(certPEM),
		KeyPEM:      bytes.Clone(keyPEM),
		CA:          ca,
		CAPEM:       bytes.Clone(caPEM),
		Fingerprint: Fingerprint(cert),
	}, nil
}

// KeyMatches reports whether keyPEM is the private key of the first
// certificate in certPEM. The decisions check a pair as they parse it;
// KeyMatches is for the tests and harnesses that check what dualca wrote
// (the model test's invariant 5, the integration suite's gateway). Both
// inputs are parsed as strictly as in ValidateRoot, so malformed input is
// reported as not matching.
func KeyMatches(certPEM, keyPEM []byte) bool {
	certs, err := ParseCertificates("tls.crt", certPEM)
	if err != nil {
		return false
	}
	key, err := parsePrivateKey("tls.key", keyPEM)
	if err != nil {
		return false
	}
	return keyMismatch(certs[0], key) == ""
}

// String describes the root for logs by fingerprint and validity, never by
// its key.
func (r *Root) String() string {
	if r == nil || r.Cert == nil {
		return "<no root>"
	}
	return fmt.Sprintf("root %s (valid %s to %s)", r.Fingerprint,
		r.Cert.NotBefore.UTC().Format(timeFormat), r.Cert.NotAfter.UTC().Format(timeFormat))
}
