package bundle

import (
	"bytes"
	"crypto/x509"
	"slices"
	"time"

	"github.com/dualca/dualca/bundle/internal/memo"
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

func bondOf(sigs *Memory, c *Client, root *x509.Certificate) bond {
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

// bondCerts identifies what a client's bond is computed from (the key of
// its entry in a memo.Table): its leaf, and its ca.crt by the first
// certificate and how many it holds, and whether it is unknown. The
// tracker parses a Secret into new values when its content changes, and
// never modifies what it returned, so these addresses name the values. Without
// unknown, an unknown client and a known one with no leaf and no ca.crt (a
// missing Secret) would share a key, and so a bond: the unknown one would
// use no root, or the missing one every root.
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

// eachBond calls f with each client of items and its bond to root, in
// order, remembered across decisions (see memo.Bonds). A nil s remembers
// nothing; a nil root bonds no client.
func (s *Memory) eachBond(items []Client, root *x509.Certificate, f func(c *Client, b bond)) {
	switch {
	case root == nil:
		for i := range items {
			f(&items[i], bond{})
		}
	case s == nil:
		for i := range items {
			f(&items[i], bondOf(nil, &items[i], root))
		}
	default:
		t := s.bondsTo(root)
		t.Begin(len(items))
		defer t.End()
		for i := range items {
			c := &items[i]
			k := certsOf(c)
			b, ok := t.At(i, k)
			if !ok {
				b = bondOf(s, c, root)
				t.Put(i, k, b)
			}
			f(c, b)
		}
	}
}

// bondsTo returns the bonds kept for root, a root with the same bytes
// counting as the same root, marked asked in this generation.
func (s *Memory) bondsTo(root *x509.Certificate) *memo.Table[bondCerts, bond] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bonds.To(root, s.gen)
}
