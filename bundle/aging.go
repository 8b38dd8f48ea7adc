package bundle

// aging is a map whose entries leave once no one has asked for them for a
// whole generation: a cache that holds what the work of now and of just
// before uses, and forgets what it stopped using. Signatures keeps its
// digests and checks in it, the syncer starting a generation at each
// reconcile (Signatures.Advance): a leaf replaced by a renewal, or a root
// retired from the bundle, is asked about no more and leaves after the
// next sweep, instead of staying until a fixed bound is reached.
//
// A sweep runs when the map has doubled since the last one left it, so
// it costs a constant per entry added, and the map never holds more than
// twice what the last two generations used, plus minSweep. It is not safe
// for concurrent use: Signatures guards it.
type aging[K comparable, V any] struct {
	m    map[K]*aged[V]
	kept int // entries the last sweep left
}

type aged[V any] struct {
	v   V
	gen uint64 // the last generation that asked for it
}

// minSweep is the size under which an aging map is not swept: a few
// hundred entries cost less than looking at them.
const minSweep = 256

// get returns k's value, marking it used in generation gen; nil when k is
// not there.
func (a *aging[K, V]) get(k K, gen uint64) *V {
	e, ok := a.m[k]
	if !ok {
		return nil
	}
	e.gen = gen
	return &e.v
}

// put stores v as k's value, used in generation gen, and returns where it
// is kept. A map at limit starts again empty, a bound for whoever never
// starts a generation.
func (a *aging[K, V]) put(k K, v V, gen uint64, limit int) *V {
	if a.m == nil || len(a.m) >= limit {
		a.m, a.kept = map[K]*aged[V]{}, 0
	}
	e := &aged[V]{v: v, gen: gen}
	a.m[k] = e
	return &e.v
}

// sweep drops the entries not used in generation gen or the one before,
// when the map has doubled since the last sweep.
func (a *aging[K, V]) sweep(gen uint64) {
	if len(a.m) <= max(2*a.kept, minSweep) {
		return
	}
	for k, e := range a.m {
		if e.gen+1 < gen {
			delete(a.m, k)
		}
	}
	a.kept = len(a.m)
}

func (a *aging[K, V]) len() int { return len(a.m) }
