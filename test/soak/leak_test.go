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

// The leak judge fits the leader alone, after its warm-up, against a bound
// that is the chart limit's headroom spread over the horizon: a standby's
// growth is not judged, a leader's growth that would reach the limit
// within the horizon is a leak, and one that would not is none.
// tuned gives the samples a live heap of 6 MiB growing by perMinute and
// the percentage dualca's GC tuner sets for it: 16 MiB over it, so that
// the heap goal is the live heap plus 16 MiB (a percentage of 266 at
// first: the live heap times 1+GOGC/100 would grow 3.7 times as fast).
func tuned(r []resource, perMinute float64) []resource {
	const mib = 1 << 20
	for i := range r {
		r[i].heap = 6*mib + perMinute*float64(i)
		r[i].gogc = 100 * 16 * mib / r[i].heap
	}
	return r
}

func TestLeaksJudgeTheLeaderAgainstTheChartLimitOverTheHorizon(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	t0 := time.Now()
	// proc samples a process every minute for an hour, its RSS
	// first + perMinute × minutes, leading from leadsAt on (never if < 0).
	proc := func(pid int, first, perMinute float64, leadsAt int) []resource {
		var out []resource
		for i := range 60 {
			rss := first + perMinute*float64(i)
			// The live heap half the resident set, GOGC 100: the heap
			// goal is the resident set.
			out = append(out, resource{pid: pid, at: t0.Add(time.Duration(i) * time.Minute), rss: rss, heap: rss / 2, gogc: 100,
				goroutines: 100, fds: 20, maxFDs: 1024, leader: leadsAt >= 0 && i >= leadsAt})
		}
		return out
	}
	limit := 240.0 * mib
	// A leader at 40 MiB may grow by at most 200 MiB in 30 days: about
	// 4.7 KiB a minute.
	perMinuteBound := (limit - 40*mib) / horizon.Minutes()
	tests := map[string]struct {
		resources []resource
		leak      bool
	}{
		"a flat leader, a standby growing fast":    {append(proc(1, 40*mib, 0, 0), proc(2, 30*mib, mib, -1)...), false},
		"a leader growing under the bound":         {proc(1, 40*mib, perMinuteBound/2, 0), false},
		"a leader growing at twice the bound":      {proc(1, 40*mib, 2*perMinuteBound, 0), true},
		"a leader over the limit already, flat":    {proc(1, 250*mib, 0, 0), false},
		"a leader over the limit already, growing": {proc(1, 250*mib, 1024, 0), true},
		"growth before the lease and its warm-up is no leak": {func() []resource {
			// It grows 1 MiB a minute until minute 20, takes the lease at
			// 18 and is judged from 23 on, flat.
			r := proc(1, 10*mib, 0, 18)
			for i := range r {
				r[i].rss += float64(min(i, 20)) * mib
				r[i].heap += float64(min(i, 20)) * mib / 2
			}
			return r
		}(), false},
		"a resident set growing over a flat live heap (pages the runtime keeps) is no leak": {func() []resource {
			r := proc(1, 40*mib, 2*perMinuteBound, 0)
			for i := range r {
				r[i].heap = 20 * mib
			}
			return r
		}(), false},
		"under dualca's percentage (16 MiB over the live heap) the goal grows as the live heap: under the bound, no leak": {tuned(proc(1, 40*mib, 0, 0), perMinuteBound*0.8), false},
		"under dualca's percentage, a live heap growing past the bound is a leak":                                         {tuned(proc(1, 40*mib, 0, 0), perMinuteBound*1.2), true},
		"a live heap growing under a flat resident set is a leak": {func() []resource {
			r := proc(1, 40*mib, 0, 0)
			for i := range r {
				r[i].heap = 10*mib + perMinuteBound*float64(i)
			}
			return r
		}(), true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := judgeLeaks(tc.resources, t0.Add(15*time.Minute), 5*time.Minute, limit)
			if !l.judged() {
				t.Fatalf("no leader judged: %+v", l)
			}
			if l.ok() == tc.leak {
				t.Errorf("leak %v, want %v: memory %+.1f B/min (limit %.1f), RSS %+.1f B/min, peak %.1f MiB", !l.ok(), tc.leak, l.memory, l.rssLimit, l.rss, l.peakRSS/mib)
			}
			if l.processes != 1 {
				t.Errorf("%d processes judged, want the leader alone", l.processes)
			}
		})
	}
}
