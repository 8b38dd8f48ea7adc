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

// Each calls f with the index and the B of each of n items in order:
// keyOf names what item i's B is computed from, and compute computes it
// when no entry holds it.
func (t *Table[K, B]) Each(n int, keyOf func(i int) K, compute func(i int) B, f func(i int, b B)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.entries) != n {
		t.entries = slices.Grow(t.entries[:0], n)[:n]
		clear(t.entries)
	}
	if t.byKey == nil {
		t.byKey = map[K]B{}
	}
	for i := range n {
		e := &t.entries[i]
		if k := keyOf(i); !e.set || e.key != k {
			b, ok := t.byKey[k]
			if !ok {
				b = compute(i)
				t.byKey[k] = b
				t.computed.Add(1)
			}
			*e = entry[K, B]{key: k, b: b, set: true}
		}
		f(i, e.b)
	}
	if len(t.byKey) > max(2*n, MinSweep) {
		// The keys of the past (renewed items) are left behind: keep the
		// list's own.
		clear(t.byKey)
		for _, e := range t.entries {
			t.byKey[e.key] = e.b
		}
	}
}
