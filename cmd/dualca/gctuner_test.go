package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
)

// TestTheGCPercentageFollowsTheLiveHeap: a small live heap may grow by
// gcHeadroom (up to gcMaxPercent of it), a large one by gcMinPercent.
func TestTheGCPercentageFollowsTheLiveHeap(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	const mi = 1 << 20
	for live, want := range map[uint64]int{
		0:         gcMaxPercent, // nothing read yet
		1 * mi:    gcMaxPercent,
		4 * mi:    400,
		8 * mi:    200,
		16 * mi:   100,
		32 * mi:   50,
		40 * mi:   40,
		64 * mi:   25,
		80 * mi:   gcMinPercent,
		1024 * mi: gcMinPercent,
		4096 * mi: gcMinPercent,
	} {
		g.Expect(gcPercent(live)).To(Equal(want), "live heap %d bytes", live)
	}
}

// TestTheTunerSetsThePercentageAfterEachCollection: once started, every
// collection ends with the percentage gcPercent gives for the live heap
// it found, whatever it was set to before; GOGC in the environment
// leaves the runtime's own. Not parallel: it changes the process's
// collector.
func TestTheTunerSetsThePercentageAfterEachCollection(t *testing.T) {
	g := NewWithT(t)
	defer debug.SetGCPercent(debug.SetGCPercent(100))

	t.Setenv("GOGC", "100")
	g.Expect(tuneGC(logr.Discard())).To(BeFalse(), "GOGC set: the runtime's")
	debug.SetGCPercent(123)
	runtime.GC()
	g.Consistently(readGCPercent).WithTimeout(200*time.Millisecond).Should(Equal(uint64(123)), "nothing tuned")

	t.Setenv("GOGC", "") // set, even empty: still the runtime's
	g.Expect(tuneGC(logr.Discard())).To(BeFalse())
	os.Unsetenv("GOGC")
	g.Expect(tuneGC(logr.Discard())).To(BeTrue())
	for range 3 {
		debug.SetGCPercent(7)
		runtime.GC()
		g.Eventually(func() uint64 {
			return readGCPercent() - uint64(gcPercent(readLiveHeap()))
		}).Should(BeZero(), "the percentage for the live heap after the collection")
	}
}

func readGCPercent() uint64 { return readMetric("/gc/gogc:percent") }
func readLiveHeap() uint64  { return readMetric("/gc/heap/live:bytes") }

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
