package bundle

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
)

// MaxPEMBytes bounds any single PEM field we accept (a Kubernetes Secret is at
// most 1 MiB in total). The bound keeps parsing cost predictable for input
// that may have been written by anyone allowed to edit the Secret.
const MaxPEMBytes = 256 << 10

// Names of the PEM block types we understand.
const (
	blockCertificate = "CERTIFICATE"
	blockPKCS1Key    = "RSA PRIVATE KEY"
	blockSEC1Key     = "EC PRIVATE KEY"
	blockPKCS8Key    = "PRIVATE KEY"
	blockEncrypted   = "ENCRYPTED PRIVATE KEY"
)

// InvalidError says why input was rejected. It is the only error type the
// parsing and validation functions of this package return, so callers can
// tell bad input (report it, do not retry) from their own failures.
type InvalidError struct {
	// Field is the Secret key the input came from, e.g. "tls.crt", "tls.key"
	// or "ca.crt".
	Field string
	// Reason is a short lower-case sentence fit for an event and a log line.
	// It never contains certificate or key bytes, because events and logs
	// are readable by more people than the Secret.
	Reason string
}

// Error returns the field and the reason, e.g.
// "ca.crt: block 2 is a PRIVATE KEY, only CERTIFICATE blocks are allowed".
func (e *InvalidError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ParseCertificates parses PEM strictly: only "CERTIFICATE" blocks, no PEM
// headers, nothing but whitespace outside blocks, at least one block, at most
// MaxPEMBytes, and every block a valid x509 certificate. Strictness matters
// because the result is republished to clients: anything we silently skipped
// (a stray private key, a comment hiding a second bundle) would either leak or
// make the published bundle differ from what the operator believes it is.
// field names the Secret key for the error. Any problem is an *InvalidError.
func ParseCertificates(field string, data []byte) ([]*x509.Certificate, error) {
	blocks, err := decodePEM(field, data)
	if err != nil {
		return nil, err
	}
	certs := make([]*x509.Certificate, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != blockCertificate {
			return nil, invalid(field, "block %d is %s, only CERTIFICATE blocks are allowed", i+1, describeType(b.Type))
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			// The x509 error can quote parts of the certificate (names,
			// for example), so it is deliberately not included.
			return nil, invalid(field, "block %d is not a valid x509 certificate", i+1)
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// Encode returns the PEM encoding of certs in the given order ("CERTIFICATE"
// blocks, no headers), which ParseCertificates accepts. Nil entries are
// skipped rather than panicking.
//
// The bytes are pem.Encode's, written into one buffer sized up front: a
// bundle of many roots is encoded at every rotation, and pem.Encode's
// encoder and line breaker per block made that most of what the decision
// allocated.
func Encode(certs []*x509.Certificate) []byte {
	size := EncodedLen(certs)
	if size == 0 {
		return nil
	}
	out := make([]byte, 0, size)
	line := make([]byte, base64.StdEncoding.EncodedLen(pemLineLength/4*3))
	for _, c := range certs {
		if c == nil {
			continue
		}
		out = append(out, pemCertBegin...)
		for raw := c.Raw; len(raw) > 0; {
			chunk := raw[:min(len(raw), pemLineLength/4*3)]
			raw = raw[len(chunk):]
			n := base64.StdEncoding.EncodedLen(len(chunk))
			base64.StdEncoding.Encode(line[:n], chunk)
			out = append(append(out, line[:n]...), '\n')
		}
		out = append(out, pemCertEnd...)
	}
	return out
}

// EncodedLen is len(Encode(certs)), without encoding them.
func EncodedLen(certs []*x509.Certificate) int {
	size := 0
	for _, c := range certs {
		if c != nil {
			n := base64.StdEncoding.EncodedLen(len(c.Raw))
			size += len(pemCertBegin) + n + (n+pemLineLength-1)/pemLineLength + len(pemCertEnd)
		}
	}
	return size
}

// pemLineLength is the length of a base64 line in PEM, as encoding/pem
// writes it.
const pemLineLength = 64

var (
	pemCertBegin = "-----BEGIN " + blockCertificate + "-----\n"
	pemCertEnd   = "-----END " + blockCertificate + "-----\n"
)

// Hash is a short content hash of PEM bytes: "sha256:" followed by the first
// 16 hex characters of the SHA-256 digest. It is stored in an annotation to
// detect hand edits of a field we wrote; 64 bits are plenty against
// accidental collisions and keep the annotation readable.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])[:16]
}

// pemWhitespace is what may appear between and around PEM blocks.
const pemWhitespace = " \t\r\n"

var (
	pemBegin = []byte("-----BEGIN ")
	pemEnd   = []byte("\n-----END ")
)

// decodePEM splits data into PEM blocks strictly. encoding/pem on its own
// skips any text it does not recognise, including malformed blocks, so each
// block is first cut out by hand and then handed to pem.Decode alone: that
// way nothing can be skipped silently.
func decodePEM(field string, data []byte) ([]*pem.Block, error) {
	if len(data) == 0 {
		return nil, invalid(field, "missing")
	}
	if len(data) > MaxPEMBytes {
		return nil, invalid(field, "is %d bytes, more than the limit of %d", len(data), MaxPEMBytes)
	}
	var blocks []*pem.Block
	rest := bytes.TrimLeft(data, pemWhitespace)
	for len(rest) > 0 {
		n := len(blocks) + 1
		if !bytes.HasPrefix(rest, pemBegin) {
			if n == 1 {
				return nil, invalid(field, "has data before the first PEM block")
			}
			return nil, invalid(field, "has data after block %d that is not a PEM block", n-1)
		}
		// The block ends with the first END line; pem.Decode looks for END
		// lines the same way (at the start of a line).
		end := bytes.Index(rest, pemEnd)
		if end < 0 {
			return nil, invalid(field, "block %d is truncated: no END line", n)
		}
		end += len(pemEnd)
		if nl := bytes.IndexByte(rest[end:], '\n'); nl >= 0 {
			end += nl + 1
		} else {
			end = len(rest)
		}
		segment := rest[:end]
		// A second BEGIN before the END means the first block never ended;
		// pem.Decode would quietly use the second one.
		if bytes.Count(segment, pemBegin) != 1 {
			return nil, invalid(field, "block %d is truncated: it has no END line before the next block", n)
		}
		b, tail := pem.Decode(segment)
		if b == nil || len(bytes.TrimLeft(tail, pemWhitespace)) != 0 {
			return nil, invalid(field, "block %d is not well-formed PEM", n)
		}
		if len(b.Headers) > 0 {
			return nil, invalid(field, "block %d has PEM headers, which are not allowed", n)
		}
		blocks = append(blocks, b)
		rest = bytes.TrimLeft(rest[end:], pemWhitespace)
	}
	if len(blocks) == 0 {
		return nil, invalid(field, "contains no PEM blocks")
	}
	return blocks, nil
}

// describeType names a PEM block type for an error message, with an article.
// The type comes from the input, so anything that does not look like an
// ordinary type name is not echoed back.
func describeType(t string) string {
	ok := t != "" && len(t) <= 32
	for i := 0; ok && i < len(t); i++ {
		c := t[i]
		ok = c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ' '
	}
	if !ok {
		return "a block of an unrecognised type"
	}
	switch t[0] {
	case 'A', 'E', 'I', 'O', 'U', 'R', 'X':
		// R and X because "RSA" and "X509" are read letter by letter.
		return "an " + t
	}
	return "a " + t
}

// parsePrivateKey strictly parses a single PEM private key block: PKCS#1
// RSA, SEC1 EC, or PKCS#8 holding an RSA, ECDSA or Ed25519 key. The block type
// must agree with its contents; a lenient parser that guesses would accept
// keys that other TLS stacks reject.
func parsePrivateKey(field string, data []byte) (crypto.Signer, error) {
	blocks, err := decodePEM(field, data)
	if err != nil {
		return nil, err
	}
	if len(blocks) != 1 {
		return nil, invalid(field, "has %d PEM blocks, expected a single private key", len(blocks))
	}
	b := blocks[0]
	switch b.Type {
	case blockPKCS1Key:
		k, err := x509.ParsePKCS1PrivateKey(b.Bytes)
		if err != nil {
			return nil, invalid(field, "is not a valid PKCS#1 RSA private key")
		}
		return k, nil
	case blockSEC1Key:
		k, err := x509.ParseECPrivateKey(b.Bytes)
		if err != nil {
			return nil, invalid(field, "is not a valid SEC1 EC private key")
		}
		return k, nil
	case blockPKCS8Key:
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, invalid(field, "is not a valid PKCS#8 private key")
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, nil
		case *ecdsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		}
		return nil, invalid(field, "holds a key type that is not supported, only RSA, ECDSA and Ed25519 are")
	case blockEncrypted:
		return nil, invalid(field, "is an encrypted private key, which is not supported")
	}
	return nil, invalid(field, "is %s, expected RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY", describeType(b.Type))
}

// keyAlgorithm names the algorithm of a public key for error messages.
func keyAlgorithm(pub crypto.PublicKey) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "ECDSA"
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return "of an unsupported type"
}

// keyMismatch returns "" when key is the private key of c, else why not.
func keyMismatch(c *x509.Certificate, key crypto.Signer) string {
	pub := key.Public()
	ka, ca := keyAlgorithm(pub), keyAlgorithm(c.PublicKey)
	if ka != ca {
		return fmt.Sprintf("private key is %s but the certificate's public key is %s", ka, ca)
	}
	eq, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !eq.Equal(c.PublicKey) {
		return fmt.Sprintf("%s private key does not match the certificate", ka)
	}
	return ""
}
