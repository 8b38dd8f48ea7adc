package memo

import (
	"crypto/x509"
	"testing"

	. "github.com/onsi/gomega"
)

// TestRecentForgetsWhatTwoGenerationsDidNotUse: an entry asked for in the
// current generation or the one before survives a sweep, an older one
// leaves, and a map that has not doubled is not swept at all.
func TestRecentForgetsWhatTwoGenerationsDidNotUse(t *testing.T) {
	g := NewWithT(t)
	var r Recent[int, int]
	for k := range MinSweep {
		r.Put(k, k, 1, 1<<20)
	}
	r.Sweep(3)
	g.Expect(r.Len()).To(Equal(MinSweep), "not swept under MinSweep")
	for k := MinSweep; k < 2*MinSweep; k++ {
		r.Put(k, k, 2, 1<<20)
	}
	g.Expect(r.Get(0, 3)).NotTo(BeNil(), "asked for in generation 3")
	r.Sweep(3)
	g.Expect(r.Len()).To(Equal(MinSweep+1), "generations 2 and 3 kept, 1 gone")
	g.Expect(r.Get(1, 3)).To(BeNil())
	g.Expect(*r.Get(0, 3)).To(Equal(0))
	r.Sweep(5)
	g.Expect(r.Len()).To(Equal(MinSweep+1), "not swept before it doubles again")
}

// TestDigestsKeepFewCertificatesNoLongerAskedAbout: with two
// certificates asked about at every generation and a new one at each (a
// root a rotation brings, then retires), Digests never holds more than
// twice what two generations asked about, or minSweepCertificates: the
// certificates it keeps alive stay few, however many generations pass.
func TestDigestsKeepFewCertificatesNoLongerAskedAbout(t *testing.T) {
	g := NewWithT(t)
	var d Digests
	live := []*x509.Certificate{{Raw: []byte("root")}, {Raw: []byte("server")}}
	most := 0
	for gen := uint64(1); gen <= 1000; gen++ {
		d.Sweep(gen)
		for _, c := range live {
			d.Of(c, gen)
		}
		d.Of(&x509.Certificate{Raw: []byte{byte(gen), byte(gen >> 8)}}, gen)
		most = max(most, d.Len())
	}
	g.Expect(most).To(BeNumerically("<=", minSweepCertificates+1), "at most the floor and the one asked about since")
	g.Expect(most).To(BeNumerically(">", 2*4), "swept only once doubled: the floor is what bounds it here")
}

// TestRecentStartsAgainWhenFull: the limit bounds a caller that never
// starts a generation.
func TestRecentStartsAgainWhenFull(t *testing.T) {
	g := NewWithT(t)
	var r Recent[int, string]
	for k := range 10 {
		r.Put(k, "v", 0, 4)
	}
	g.Expect(r.Len()).To(BeNumerically("<=", 4))
	g.Expect(r.Get(9, 0)).NotTo(BeNil(), "the last put is kept")
}

// TestATableComputesEachKeyOnce: items are answered by position, then by
// key when the list comes in another order, and computed only for a key
// never seen; a table is found again by its root's bytes.
func TestATableComputesEachKeyOnce(t *testing.T) {
	g := NewWithT(t)
	root := &x509.Certificate{Raw: []byte("root")}
	var b Bonds[string, int]
	computed := map[string]int{}
	each := func(keys ...string) []int {
		var got []int
		each(b.To(root, 1), len(keys), func(i int) string { return keys[i] },
			func(i int) int { computed[keys[i]]++; return len(keys[i]) },
			func(_ int, v int) { got = append(got, v) })
		return got
	}
	g.Expect(each("a", "bb", "")).To(Equal([]int{1, 2, 0}))
	g.Expect(each("", "a", "bb")).To(Equal([]int{0, 1, 2}), "another order")
	g.Expect(each("ccc", "a", "bb")).To(Equal([]int{3, 1, 2}), "a new key")
	g.Expect(computed).To(Equal(map[string]int{"a": 1, "bb": 1, "": 1, "ccc": 1}))
	g.Expect(b.Computed()).To(Equal(uint64(4)))

	g.Expect(b.To(&x509.Certificate{Raw: []byte("root")}, 2)).To(BeIdenticalTo(b.To(root, 2)), "the same bytes, the same table")
	b.To(&x509.Certificate{Raw: []byte("other")}, 3)
	b.Sweep(3)
	g.Expect(b.Roots()).To(Equal(2), "asked about in generation 2 and 3")
	b.Sweep(4)
	g.Expect(b.Roots()).To(Equal(1), "root not asked about since generation 2")
}

// TestPEMParsesOnceAndGivesBackACopy: the same bytes of one kind are
// parsed once; another kind is another parse; the bytes a canonical parse
// came from are given back as a copy.
func TestPEMParsesOnceAndGivesBackACopy(t *testing.T) {
	g := NewWithT(t)
	var m PEM
	cert := &x509.Certificate{Raw: []byte("c")}
	parses := 0
	parse := func(e *Parse) { parses++; e.Certs, e.Canonical = []*x509.Certificate{cert}, true }
	data := []byte("pem")
	first := m.Lookup("a", data, parse)
	data[0] = 'X' // the caller's buffer is reused
	g.Expect(m.Lookup("a", []byte("pem"), parse)).To(BeIdenticalTo(first))
	m.Lookup("b", []byte("pem"), parse)
	g.Expect(parses).To(Equal(2))

	out, ok := m.Encoded([]*x509.Certificate{cert})
	g.Expect(ok).To(BeTrue())
	g.Expect(string(out)).To(Equal("pem"))
	out[0] = 'Y'
	again, _ := m.Encoded([]*x509.Certificate{cert})
	g.Expect(string(again)).To(Equal("pem"), "a copy")
	_, ok = m.Encoded([]*x509.Certificate{{Raw: []byte("c")}})
	g.Expect(ok).To(BeFalse(), "other values with the same bytes: encoded afresh")

	hashes := 0
	hash := func([]byte) string { hashes++; return "h" }
	m.Hash("a", []byte("pem"), hash)
	m.Hash("a", []byte("pem"), hash)
	m.Hash("a", []byte("unknown"), hash)
	g.Expect(hashes).To(Equal(2), "remembered for what is remembered only")
}

// each is a pass over n items as a caller makes it: f gets item i's B,
// computed by compute when t keeps none for keyOf(i).
func each[K comparable, B any](t *Table[K, B], n int, keyOf func(i int) K, compute func(i int) B, f func(i int, b B)) {
	t.Begin(n)
	defer t.End()
	for i := range n {
		k := keyOf(i)
		b, ok := t.At(i, k)
		if !ok {
			b = compute(i)
			t.Put(i, k, b)
		}
		f(i, b)
	}
}
