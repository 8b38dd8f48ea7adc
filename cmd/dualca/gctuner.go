package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"

	"github.com/go-logr/logr"
)

// Go's collector lets the heap grow to (1 + GOGC/100) times the live heap
// before it collects again. One percentage does not fit dualca: with a
// hundred clients its live heap is a few MiB, and each root rotation
// allocates close to a MiB (the record and the gateway Secret encoded,
// sent, and decoded back from the response and the watch), so GOGC 100
// collects every few rotations, a fifth of a rotation's CPU spent marking
// the same few MiB again; with fifty thousand clients the live heap is
// hundreds of MiB, nearly all the clients' cache, and GOGC 100 holds as
// much again unused. Half as much was still a lot: at 10,000 clients the
// resident set per client (6,441 B in the make bench of fadcb78, with
// the floor at 50 % then) was twice the live heap per client a heap
// profile found (3.3 KB), the runtime keeping freed pages a while before
// it returns them.
//
// So, unless GOGC is set in the environment (then the runtime applies it
// and dualca leaves it alone), dualca sets the percentage after each
// collection from the live heap the collection found: gcHeadroom of
// growth over it while that is at most gcMaxPercent of it, never less
// than gcMinPercent of it. The memory limit (memlimit.go) still bounds
// the heap from above, whatever the percentage.
const (
	gcHeadroom   = 16 << 20
	gcMinPercent = 25
	gcMaxPercent = 400
)

// gcPercent is the percentage for a live heap of live bytes.
func gcPercent(live uint64) int {
	if live == 0 {
		return gcMaxPercent
	}
	return max(gcMinPercent, min(gcMaxPercent, int(100*gcHeadroom/live)))
}

// gcTuner sets the collector's percentage after each collection.
type gcTuner struct {
	samples []metrics.Sample
}

// tuneGC starts the tuner unless the environment sets GOGC; it reports
// whether it did.
func tuneGC(log logr.Logger) bool {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Info("Go's GC percentage from GOGC", "GOGC", v)
		return false
	}
	t := &gcTuner{samples: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
	log.V(1).Info("Go's GC percentage follows the live heap", "headroomBytes", gcHeadroom, "minPercent", gcMinPercent, "maxPercent", gcMaxPercent)
	return true
}

// tune sets the percentage for the live heap the last collection marked.
func (t *gcTuner) tune() {
	metrics.Read(t.samples)
	var live uint64
	if s := t.samples[0]; s.Value.Kind() == metrics.KindUint64 {
		live = s.Value.Uint64()
	}
	debug.SetGCPercent(gcPercent(live))
}

// sentinel is an object that nothing references: the collection after
// it was made finds it unreachable and runs its cleanup. It holds a
// pointer so that it is not one of the tiny objects the allocator packs
// together, which are freed with their neighbours.
type sentinel struct {
	_ *int
	_ [16]byte
}

// arm makes the tuner run once the next collection has ended: the
// cleanup of a fresh sentinel tunes and arms again. Cleanups run on the
// runtime's own goroutine, one at a time.
func (t *gcTuner) arm() {
	runtime.AddCleanup(new(sentinel), func(t *gcTuner) {
		t.tune()
		t.arm()
	}, t)
}
