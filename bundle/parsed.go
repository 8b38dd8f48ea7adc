package bundle

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"slices"
	"sync"
)

// Parsed remembers what decisions parsed from the gateway Secret's PEM:
// ca.crt's roots, tls.crt's chain and tls.key. A gateway at rest holds the
// same bytes at every reconcile, and with roots piled up (one per rotation
// the server did not follow, and as many cross-certificates in tls.crt)
// parsing them again, and encoding the same certificates back to the same
// bytes, was most of what a decision cost, growing with every root. The
// results are pure functions of the bytes, so they never go stale; the
// certificates it returns are shared and must not be modified, as
// x509.Certificate values never are here.
//
// Whoever decides repeatedly (the syncer's gateway store, for as long as it
// runs) keeps one and hands it to the decisions in Gateway.Parsed. It is
// safe for concurrent use; a nil *Parsed parses every time.
type Parsed struct {
	mu      sync.Mutex
	entries map[string]map[string]*parsedPEM // by kind, then PEM bytes
	size    int
}

// maxParsed bounds a Parsed: the gateway's three fields as they are now and
// as they were a few writes ago. When full it starts again empty, which
// costs one parse of each field.
const maxParsed = 16

// parsedPEM is what one PEM field parsed to.
type parsedPEM struct {
	data  []byte // a copy: the caller's Secret may be reused
	certs []*x509.Certificate
	key   crypto.Signer
	err   error
	// canonical: Encode(certs) is data, so data can be written again as is.
	canonical bool
	// hash is Hash(data), once asked for (guarded by Parsed.mu).
	hash string
}

// NewParsed returns an empty Parsed.
func NewParsed() *Parsed {
	return &Parsed{entries: map[string]map[string]*parsedPEM{}}
}

// Parse kinds: what a field was parsed as (the same bytes parse differently
// as ca.crt, leniently, and as tls.crt, strictly).
const (
	parsedCAs   = "cas\x00"
	parsedChain = "chain\x00"
	parsedKey   = "key\x00"
)

// lookup returns the entry for data parsed as kind, parsing it with parse
// when it is not remembered.
func (m *Parsed) lookup(kind string, data []byte, parse func(*parsedPEM)) *parsedPEM {
	m.mu.Lock()
	e, ok := m.entries[kind][string(data)] // no copy of data for a lookup
	m.mu.Unlock()
	if ok {
		return e
	}
	e = &parsedPEM{data: bytes.Clone(data)}
	parse(e)
	e.canonical = e.certs != nil && bytes.Equal(Encode(e.certs), data)
	m.store(kind, e)
	return e
}

func (m *Parsed) store(kind string, e *parsedPEM) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.storeLocked(kind, e)
}

// remember stores what data parses to as kind, unless it is known.
func (m *Parsed) remember(kind string, data []byte, certs []*x509.Certificate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[kind][string(data)]; !ok {
		m.storeLocked(kind, &parsedPEM{data: bytes.Clone(data), certs: slices.Clone(certs), canonical: true})
	}
}

func (m *Parsed) storeLocked(kind string, e *parsedPEM) {
	if m.entries == nil || m.size >= maxParsed {
		m.entries, m.size = map[string]map[string]*parsedPEM{}, 0
	}
	if m.entries[kind] == nil {
		m.entries[kind] = map[string]*parsedPEM{}
	}
	if _, ok := m.entries[kind][string(e.data)]; !ok {
		m.size++
	}
	m.entries[kind][string(e.data)] = e
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
		m.remember(parsedCAs, caPEM, roots)
	}
	if len(chain) > 0 && len(certPEM) <= MaxPEMBytes {
		m.remember(parsedChain+"tls.crt\x00", certPEM, chain)
	}
}

// hash is Hash, remembered for a ca.crt that is: the bundle's hash is
// checked and recorded at every decision.
func (m *Parsed) hash(data []byte) string {
	if m == nil {
		return Hash(data)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[parsedCAs][string(data)]
	if !ok {
		return Hash(data)
	}
	if e.hash == "" {
		e.hash = Hash(data)
	}
	return e.hash
}

// casIn is the package's casIn, remembered.
func (m *Parsed) casIn(data []byte) []*x509.Certificate {
	if m == nil {
		return casIn(data)
	}
	// A clone: callers append to what they get.
	return slices.Clone(m.lookup(parsedCAs, data, func(e *parsedPEM) { e.certs = casIn(data) }).certs)
}

// certificates is ParseCertificates, remembered.
func (m *Parsed) certificates(field string, data []byte) ([]*x509.Certificate, error) {
	if m == nil {
		return ParseCertificates(field, data)
	}
	e := m.lookup(parsedChain+field+"\x00", data, func(e *parsedPEM) { e.certs, e.err = ParseCertificates(field, data) })
	return slices.Clone(e.certs), e.err
}

// privateKey is parsePrivateKey, remembered.
func (m *Parsed) privateKey(field string, data []byte) (crypto.Signer, error) {
	if m == nil {
		return parsePrivateKey(field, data)
	}
	e := m.lookup(parsedKey+field+"\x00", data, func(e *parsedPEM) { e.key, e.err = parsePrivateKey(field, data) })
	return e.key, e.err
}

// encode is Encode, returning the bytes certs were parsed from when they
// are exactly the certificates (the same values, in the same order) of a
// canonical entry: the same bundle at rest is not encoded again.
func (m *Parsed) encode(certs []*x509.Certificate) []byte {
	if m != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, byData := range m.entries {
			for _, e := range byData {
				if e.canonical && slices.Equal(e.certs, certs) {
					return bytes.Clone(e.data) // the decision's own, as Encode's would be
				}
			}
		}
	}
	return Encode(certs)
}
