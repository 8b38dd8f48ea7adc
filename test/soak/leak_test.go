package soak

import (
	"math"
	"testing"
	"time"
)

func TestPooledSlopeIsTheGrowthWithinProcesses(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	// seg is a process sampled every minute from start, its value
	// first + perMinute × minutes.
	seg := func(start time.Duration, first, perMinute float64) []resource {
		var out []resource
		for i := range 5 {
			out = append(out, resource{at: t0.Add(start + time.Duration(i)*time.Minute), rss: first + perMinute*float64(i)})
		}
		return out
	}
	tests := map[string]struct {
		segments [][]resource
		want     float64
	}{
		"flat processes restarted at other levels do not grow": {[][]resource{seg(0, 100, 0), seg(10*time.Minute, 40, 0)}, 0},
		"each process growing by 2 per minute grows by 2":      {[][]resource{seg(0, 100, 2), seg(10*time.Minute, 40, 2)}, 2},
		"a restart to a higher level is no growth":             {[][]resource{seg(0, 10, 0), seg(10*time.Minute, 90, 0)}, 0},
		"no samples, no slope":                                 {nil, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := pooledSlope(tc.segments, func(r resource) float64 { return r.rss }); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSpanParsesARange(t *testing.T) {
	t.Parallel()
	var s span
	if err := s.Set("30s-2m"); err != nil || s.lo != 30*time.Second || s.hi != 2*time.Minute {
		t.Fatalf("30s-2m: got %v, %v", s, err)
	}
	for range 100 {
		if d := s.draw(); d < s.lo || d > s.hi {
			t.Fatalf("drew %v outside %v", d, s.String())
		}
	}
	for _, bad := range []string{"30s", "2m-30s", "x-1s", "-1s-1s"} {
		if err := (&span{}).Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
