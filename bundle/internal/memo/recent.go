package memo

// Recent is a map whose entries leave once no one has asked for them for
// a whole generation: it holds what the work of now and of just before
// uses, and forgets what it stopped using (a leaf replaced by a renewal, a
// root retired from the bundle), instead of keeping it until a fixed bound
// is reached.
//
// A sweep runs when the map has doubled since the last one left it, so it
// costs a constant per entry added, and the map never holds more than
// twice what the last two generations used, plus MinSweep (Digests, whose
// entries keep certificates alive, sweeps above a lower floor).
type Recent[K comparable, V any] struct {
	m    map[K]*aged[V]
	kept int // entries the last sweep left
}

type aged[V any] struct {
	v   V
	gen uint64 // the last generation that asked for it
}

// MinSweep is the size under which a Recent is not swept: a few hundred
// entries cost less than looking at them.
const MinSweep = 256

// Get returns k's value, marking it used in generation gen; nil when k is
// not there. The value may be updated in place until the next Put.
func (r *Recent[K, V]) Get(k K, gen uint64) *V {
	e, ok := r.m[k]
	if !ok {
		return nil
	}
	e.gen = gen
	return &e.v
}

// Put stores v as k's value, used in generation gen, and returns where it
// is kept. A map at limit starts again empty.
func (r *Recent[K, V]) Put(k K, v V, gen uint64, limit int) *V {
	if r.m == nil || len(r.m) >= limit {
		r.m, r.kept = map[K]*aged[V]{}, 0
	}
	e := &aged[V]{v: v, gen: gen}
	r.m[k] = e
	return &e.v
}

// Sweep drops the entries not used in generation gen or the one before,
// when the map has doubled since the last sweep and holds more than
// MinSweep.
func (r *Recent[K, V]) Sweep(gen uint64) { r.sweepAbove(gen, MinSweep) }

// sweepAbove is Sweep with floor in place of MinSweep.
func (r *Recent[K, V]) sweepAbove(gen uint64, floor int) {
	if len(r.m) <= max(2*r.kept, floor) {
		return
	}
	for k, e := range r.m {
		if e.gen+1 < gen {
			delete(r.m, k)
		}
	}
	r.kept = len(r.m)
}

// Len is how many entries r holds.
func (r *Recent[K, V]) Len() int { return len(r.m) }
