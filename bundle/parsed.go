package bundle

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"slices"

	"github.com/dualca/dualca/bundle/internal/memo"
)

// Parsed remembers what decisions parsed from the gateway Secret's PEM:
// ca.crt's roots, tls.crt's chain and tls.key. A gateway at rest holds the
// same bytes at every reconcile, and with roots piled up (one per rotation
// the server did not follow, and as many cross-certificates in tls.crt)
// parsing them again, and encoding the same certificates back to the same
// bytes, was most of what a decision cost, growing with every root. The
// results are pure functions of the bytes, so they never go stale (see
// package memo for what a hit promises); the certificates it returns are
// shared and must not be modified, as x509.Certificate values never are
// here.
//
// Whoever decides repeatedly (the syncer's gateway store, for as long as it
// runs) keeps one and hands it to the decisions in Gateway.Parsed. It is
// safe for concurrent use; a nil *Parsed parses every time.
type Parsed struct {
	pem memo.PEM
}

// NewParsed returns an empty Parsed.
func NewParsed() *Parsed {
	return &Parsed{}
}

// Parse kinds: what a field was parsed as (the same bytes parse differently
// as ca.crt, leniently, and as tls.crt, strictly).
const (
	parsedCAs   = "cas\x00"
	parsedChain = "chain\x00"
	parsedKey   = "key\x00"
)

// lookup returns what data parsed to as kind, parsing it with parse when
// it is not remembered.
func (m *Parsed) lookup(kind string, data []byte, parse func(*memo.Parse)) *memo.Parse {
	return m.pem.Lookup(kind, data, func(e *memo.Parse) {
		parse(e)
		e.Canonical = e.Certs != nil && bytes.Equal(Encode(e.Certs), data)
	})
}

// written remembers what a decision wrote, as the next reconcile will read
// it back: ca.crt encodes the roots kept, tls.crt the chain. A rotation
// writes a new tls.crt (its cross-chain moves) and ca.crt, whose parse
// would otherwise be the next reconcile's largest cost. Only what parses
// back to the same certificates is remembered: ca.crt when all of them are
// CAs (casIn keeps nothing else), tls.crt within the size ParseCertificates
// accepts.
func (m *Parsed) written(caPEM []byte, roots []*x509.Certificate, certPEM []byte, chain []*x509.Certificate) {
	if m == nil {
		return
	}
	if len(roots) > 0 && !slices.ContainsFunc(roots, func(c *x509.Certificate) bool { return !isCA(c) }) {
		m.pem.Remember(parsedCAs, caPEM, roots)
	}
	if len(chain) > 0 && len(certPEM) <= MaxPEMBytes {
		m.pem.Remember(parsedChain+"tls.crt\x00", certPEM, chain)
	}
}

// hash is Hash, remembered for a ca.crt that is: the bundle's hash is
// checked and recorded at every decision.
func (m *Parsed) hash(data []byte) string {
	if m == nil {
		return Hash(data)
	}
	return m.pem.Hash(parsedCAs, data, Hash)
}

// casIn is the package's casIn, remembered.
func (m *Parsed) casIn(data []byte) []*x509.Certificate {
	if m == nil {
		return casIn(data)
	}
	// A clone: callers append to what they get.
	return slices.Clone(m.lookup(parsedCAs, data, func(e *memo.Parse) { e.Certs = casIn(data) }).Certs)
}

// certificates is ParseCertificates, remembered.
func (m *Parsed) certificates(field string, data []byte) ([]*x509.Certificate, error) {
	if m == nil {
		return ParseCertificates(field, data)
	}
	e := m.lookup(parsedChain+field+"\x00", data, func(e *memo.Parse) { e.Certs, e.Err = ParseCertificates(field, data) })
	return slices.Clone(e.Certs), e.Err
}

// privateKey is parsePrivateKey, remembered.
func (m *Parsed) privateKey(field string, data []byte) (crypto.Signer, error) {
	if m == nil {
		return parsePrivateKey(field, data)
	}
	e := m.lookup(parsedKey+field+"\x00", data, func(e *memo.Parse) { e.Key, e.Err = parsePrivateKey(field, data) })
	return e.Key, e.Err
}

// encode is Encode, returning the bytes certs were parsed from when they
// are exactly the certificates of a canonical parse: the same bundle at
// rest is not encoded again.
func (m *Parsed) encode(certs []*x509.Certificate) []byte {
	if m != nil {
		if data, ok := m.pem.Encoded(certs); ok {
			return data // a copy, the decision's own, as Encode's would be
		}
	}
	return Encode(certs)
}
