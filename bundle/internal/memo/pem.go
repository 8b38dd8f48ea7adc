package memo

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"slices"
	"sync"
)

// PEM remembers what PEM fields parsed to, by the kind of parse and the
// bytes: a gateway at rest holds the same bytes at every reconcile, and
// with roots piled up parsing them again was most of what a decision
// cost. The certificates and keys it returns are shared: no one modifies
// them, as x509.Certificate values never are in dualca. It is safe for
// concurrent use.
type PEM struct {
	mu      sync.Mutex
	entries map[string]map[string]*Parse // by kind, then PEM bytes
	size    int
}

// maxPEM bounds a PEM: the gateway's three fields as they are now and as
// they were a few writes ago. When full it starts again empty, which costs
// one parse of each field.
const maxPEM = 16

// Parse is what one PEM field parsed to. Its fields other than hash are
// set before it is shared, and never after.
type Parse struct {
	Data  []byte // a copy: the caller's Secret may be reused
	Certs []*x509.Certificate
	Key   crypto.Signer
	Err   error
	// Canonical: Data is the encoding of Certs, so it can be written again
	// as it is.
	Canonical bool
	hash      string // guarded by PEM.mu
}

// Lookup returns what data parsed to as kind, calling parse to fill in a
// Parse of it when it is not remembered.
func (m *PEM) Lookup(kind string, data []byte, parse func(*Parse)) *Parse {
	m.mu.Lock()
	e, ok := m.entries[kind][string(data)] // no copy of data for a lookup
	m.mu.Unlock()
	if ok {
		return e
	}
	e = &Parse{Data: bytes.Clone(data)}
	parse(e)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store(kind, e)
	return e
}

// Remember stores that data, the canonical encoding of certs, parses to
// them as kind, unless data is known.
func (m *PEM) Remember(kind string, data []byte, certs []*x509.Certificate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.entries[kind][string(data)]; !ok {
		m.store(kind, &Parse{Data: bytes.Clone(data), Certs: slices.Clone(certs), Canonical: true})
	}
}

// store keeps e; the caller holds m.mu.
func (m *PEM) store(kind string, e *Parse) {
	if m.entries == nil || m.size >= maxPEM {
		m.entries, m.size = map[string]map[string]*Parse{}, 0
	}
	if m.entries[kind] == nil {
		m.entries[kind] = map[string]*Parse{}
	}
	if _, ok := m.entries[kind][string(e.Data)]; !ok {
		m.size++
	}
	m.entries[kind][string(e.Data)] = e
}

// Hash returns hash(data), computed once for data remembered as kind and
// afresh for anything else.
func (m *PEM) Hash(kind string, data []byte, hash func([]byte) string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[kind][string(data)]
	if !ok {
		return hash(data)
	}
	if e.hash == "" {
		e.hash = hash(data)
	}
	return e.hash
}

// Encoded returns a copy of the bytes that certs were parsed from, when
// they are exactly the certificates (the same values, in the same order)
// of a canonical Parse.
func (m *PEM) Encoded(certs []*x509.Certificate) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, byData := range m.entries {
		for _, e := range byData {
			if e.Canonical && slices.Equal(e.Certs, certs) {
				return bytes.Clone(e.Data), true
			}
		}
	}
	return nil, false
}
