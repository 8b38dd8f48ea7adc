package bundle

import (
	"bytes"
	"crypto/x509"
	"slices"
	"sync"
	"time"
)

// bond is what one client has to do with one root, whatever the time:
// whether its leaf chains to the root, and whether its ca.crt holds it.
// Whether the client still uses the root then depends only on its leaf's
// expiry. An Unknown client's bond is unknown: whatever its leaf and
// ca.crt are, dualca cannot see them, so it must assume the worst of each
// question (uses the root: yes; on it: no).
type bond struct {
	chains, trusts bool
	unknown        bool
}

func bondOf(sigs *Signatures, c *Client, root *x509.Certificate) bond {
	if c.Unknown {
		// Leaf and CA are nil by contract; were they not, they would be a
		// stale view, not the credential the client loads.
		return bond{unknown: true}
	}
	return bond{
		chains: c.Leaf != nil && sigs.LeafChainsTo(c.Leaf, root),
		trusts: slices.ContainsFunc(c.CA, func(ca *x509.Certificate) bool { return bytes.Equal(ca.Raw, root.Raw) }),
	}
}

// uses: the client's unexpired leaf chains to the root, or the client is
// unknown and may depend on it. An unknown client has no expiry to wait
// for: the root itself expiring is what lets it go (retire.go).
func (b bond) uses(c *Client, now time.Time) bool {
	return b.unknown || b.chains && !now.After(c.Leaf.NotAfter())
}

// on: the client uses the root and trusts it, so it will accept a server
// credential from it. An unknown client is on no root: counting it renewed
// could switch the server away from the root it verifies with.
func (b bond) on(c *Client, now time.Time) bool {
	return !b.unknown && b.trusts && b.uses(c, now)
}

// bonds remembers, for one root, the bond of each client of a list: a
// decision asks every client about the current root (progress, renewals),
// about the old roots (retirement) and the per-root client gauge about each
// root of the bundle, and it does so again at every reconcile. Asked of a
// Signatures, each of those questions cost a lookup per client and root;
// a reconcile at rest over fifty thousand clients was almost nothing else.
// bonds answers each client with a comparison of addresses instead: an
// entry holds the leaf and ca.crt it was computed from. When the client at
// that position holds others (the cache lists in another order after any
// change), the bond is looked up by those certificates, and computed only
// for a client never seen with them (a renewal). A bond is a pure function
// of the certificates, so a matching entry is never stale.
type bonds struct {
	mu      sync.Mutex
	root    *x509.Certificate
	gen     uint64      // the last generation that asked about root
	entries []bondEntry // by position in the last list asked about
	byCerts map[bondCerts]bond
}

// bondCerts identifies what a client's bond is computed from: its leaf, and
// its ca.crt by the first certificate and how many it holds, and whether it
// is unknown. The tracker parses a Secret into new values when its content
// changes, and never modifies what it returned. Without unknown, an unknown
// client and a known one with no leaf and no ca.crt (a missing Secret)
// would share a key, and so a bond: the unknown one would use no root, or
// the missing one every root.
type bondCerts struct {
	leaf    *ClientLeaf
	ca      *x509.Certificate
	cas     int
	unknown bool
}

func certsOf(c *Client) bondCerts {
	k := bondCerts{leaf: c.Leaf, cas: len(c.CA), unknown: c.Unknown}
	if len(c.CA) > 0 {
		k.ca = c.CA[0]
	}
	return k
}

type bondEntry struct {
	certs bondCerts
	bond  bond
}

// maxBonds bounds the roots a Signatures keeps bonds for: a bundle holds a
// few (and at most sixty in the pile-up benchmarks). Beyond it, it starts
// again empty.
const maxBonds = 128

// eachBond calls f with each client of items and its bond to root, in
// order. A nil s remembers nothing; a nil root bonds no client.
func (s *Signatures) eachBond(items []Client, root *x509.Certificate, f func(c *Client, b bond)) {
	if root == nil {
		for i := range items {
			f(&items[i], bond{})
		}
		return
	}
	if s == nil {
		for i := range items {
			f(&items[i], bondOf(nil, &items[i], root))
		}
		return
	}
	l := s.bondsTo(root)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) != len(items) {
		l.entries = slices.Grow(l.entries[:0], len(items))[:len(items)]
		clear(l.entries) // a zero entry is the bond of a known client with no leaf and no ca.crt: none
	}
	if l.byCerts == nil {
		l.byCerts = map[bondCerts]bond{}
	}
	for i := range items {
		c := &items[i]
		e := &l.entries[i]
		if k := certsOf(c); e.certs != k {
			b, ok := l.byCerts[k]
			if !ok {
				b = bondOf(s, c, root)
				l.byCerts[k] = b
				s.computed.Add(1)
			}
			*e = bondEntry{certs: k, bond: b}
		}
		f(c, e.bond)
	}
	if len(l.byCerts) > max(2*len(items), minSweep) {
		// Renewals left the certificates of the past behind: keep the
		// list's own.
		clear(l.byCerts)
		for _, e := range l.entries {
			l.byCerts[e.certs] = e.bond
		}
	}
}

// bondsTo returns the bonds kept for root, a root with the same bytes
// counting as the same root, marked asked in this generation.
func (s *Signatures) bondsTo(root *x509.Certificate) *bonds {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.bonds {
		if l.root == root || bytes.Equal(l.root.Raw, root.Raw) {
			l.gen = s.gen
			return l
		}
	}
	if len(s.bonds) >= maxBonds {
		s.bonds = nil
	}
	l := &bonds{root: root, gen: s.gen}
	s.bonds = append(s.bonds, l)
	return l
}

// sweepBonds drops the bonds of roots not asked about in this generation
// or the one before. The caller holds s.mu.
func (s *Signatures) sweepBonds() {
	s.bonds = slices.DeleteFunc(s.bonds, func(l *bonds) bool { return l.gen+1 < s.gen })
}
