package memo

import (
	"bytes"
	"crypto/x509"
	"slices"
	"sync"
	"sync/atomic"
)

// Bonds remembers, for each root asked about, a Table of what each item of
// a list has to do with it (in bundle: each client's bond to the root). A
// decision asks every client about the current root, the old roots and,
// for the metrics, each root of the bundle, again at every reconcile:
// even remembered by digest, that cost a lookup per client and root, and
// a reconcile at rest over fifty thousand clients was almost nothing else.
// A Table answers an item with a comparison instead.
//
// A root is identified by its bytes (two parses of one root share a
// Table); an item by a key K naming the values its B is computed from,
// compared by address (see the package doc).
type Bonds[K comparable, B any] struct {
	tables []*Table[K, B]
	// computed counts the Bs computed, for the tests of their reuse.
	computed atomic.Uint64
}

// maxRoots bounds the roots Bonds keeps tables for: a bundle holds a few
// (and at most sixty in the pile-up benchmarks). Beyond it, it starts
// again empty.
const maxRoots = 128

// To returns root's Table, marked asked about in generation gen.
func (b *Bonds[K, B]) To(root *x509.Certificate, gen uint64) *Table[K, B] {
	for _, t := range b.tables {
		if t.root == root || bytes.Equal(t.root.Raw, root.Raw) {
			t.gen = gen
			return t
		}
	}
	if len(b.tables) >= maxRoots {
		b.tables = nil
	}
	t := &Table[K, B]{root: root, gen: gen, computed: &b.computed}
	b.tables = append(b.tables, t)
	return t
}

// Sweep drops the tables of roots not asked about in generation gen or
// the one before.
func (b *Bonds[K, B]) Sweep(gen uint64) {
	b.tables = slices.DeleteFunc(b.tables, func(t *Table[K, B]) bool { return t.gen+1 < gen })
}

// Roots is how many roots b keeps tables for.
func (b *Bonds[K, B]) Roots() int { return len(b.tables) }

// Computed is how many Bs b has computed since it was made.
func (b *Bonds[K, B]) Computed() uint64 { return b.computed.Load() }

// Table is what each item of a list has to do with one root. An entry is
// kept by position in the last list asked about, with the key it was
// computed from. When the item at that position has another key (a list
// comes in another order after any change), its B is looked up by key,
// and computed only for a key never seen (in bundle: a renewal).
type Table[K comparable, B any] struct {
	mu       sync.Mutex
	root     *x509.Certificate
	gen      uint64        // the last generation that asked about root; guarded by the Bonds' owner
	entries  []entry[K, B] // by position
	byKey    map[K]B
	computed *atomic.Uint64
}

type entry[K comparable, B any] struct {
	key K
	b   B
	set bool
}

// Begin starts a pass over a list of n items: it locks t until End. In
// between, At and Put take the items by position, each at most once. The
// caller loops over the items itself: a call through a function value per
// item was the cost of a pass over fifty thousand.
func (t *Table[K, B]) Begin(n int) {
	t.mu.Lock()
	if len(t.entries) != n {
		t.entries = slices.Grow(t.entries[:0], n)[:n]
		clear(t.entries)
	}
	if t.byKey == nil {
		t.byKey = map[K]B{}
	}
}

// At returns the B of item i, whose key is k, and whether one is kept.
func (t *Table[K, B]) At(i int, k K) (B, bool) {
	e := &t.entries[i]
	if e.set && e.key == k {
		return e.b, true
	}
	b, ok := t.byKey[k]
	if ok {
		*e = entry[K, B]{key: k, b: b, set: true}
	}
	return b, ok
}

// Put keeps b, computed for item i whose key is k.
func (t *Table[K, B]) Put(i int, k K, b B) {
	t.byKey[k] = b
	t.computed.Add(1)
	t.entries[i] = entry[K, B]{key: k, b: b, set: true}
}

// End ends the pass Begin started: the keys of the past (renewed items)
// are left behind, the list's own kept.
func (t *Table[K, B]) End() {
	if len(t.byKey) > max(2*len(t.entries), MinSweep) {
		clear(t.byKey)
		for _, e := range t.entries {
			t.byKey[e.key] = e.b
		}
	}
	t.mu.Unlock()
}
