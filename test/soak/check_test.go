package soak

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/monitor"
	"github.com/dualca/dualca/test/lib/mtls"
	"github.com/dualca/dualca/test/lib/sizing"
)

// horizon is how long the leader's growth must not take to reach the
// chart's memory limit (values.yaml), or its open-files limit: a rate that
// would reach either within it is a leak, however long the run. The
// bound is absolute, the headroom left over the horizon, and does not
// loosen or tighten with the length of the run.
const horizon = 30 * 24 * time.Hour

// goroutineCost is what a goroutine is counted at against the memory
// limit: a stack of 8 KiB (the smallest is 2 KiB; one that ran a client
// request has grown) and its record in the runtime.
const goroutineCost = 8 << 10

// judgeLeaksFrom is the shortest run that judges dualca for leaks (`make
// soak`), and must: a shorter one (`make test`'s 3 minutes) reports the
// slopes for information and asserts nothing on them. In a few minutes
// faults may leave no replica that lived long enough, and a replica on a
// busy machine may still be growing its heap to its steady size.
const judgeLeaksFrom = 10 * time.Minute

// judgesLeaks tells whether this run judges leaks: it is at least
// judgeLeaksFrom long.
func judgesLeaks() bool { return *duration >= judgeLeaksFrom }

// outcome is everything the run is judged and reported on.
type outcome struct {
	start              time.Time
	elapsed            time.Duration
	fleet              mtls.FleetStats
	gateway            mtls.GatewayStats
	brokenStats        mtls.ClientStats
	attempts, failures int // the healthy clients'
	healthyErrors      map[string]int
	// firstFailures tells the healthy clients' first failed attempts.
	firstFailures      []string
	checked            monitor.Result
	deletions          int
	rotations          []rotationOutcome
	requested, skipped int
	killsSkipped       int // kills drawn while their replica was younger than minLife
	faults             map[string]int
	leak               leak
	requestsPerMinute  float64
	peakPerMinute      float64
	timeline           []event
	samples            []sample
	resources          []resource
	scrapeFailures     []string
}

// rotationOutcome is one rotation as the monitor saw it.
type rotationOutcome struct {
	n              int // 2 for R1 -> R2
	arrived        time.Time
	landedIn       string        // the gateway's phase when the root Secret changed
	steady         time.Duration // from arrival to Steady; 0 if never
	superseded     bool          // the next root came before Steady
	oldExpiresIn   time.Duration // from the first Steady on this or a later root (or now) to the old root's NotAfter
	steadyInTime   bool
	oldRootExpires time.Time
}

// leak is the leader's growth over the last three quarters of the run:
// the slopes fitted within every process while it led (each its own
// intercept, as a leader killed and started again begins afresh), per
// minute, and their limits. Standbys hold no controller and are not
// judged.
//
// Memory is judged by the heap goal: the live heap the GC marks, grown by
// the GC's percentage at that moment (GOGC: the heap it lets grow before
// the next collection, which the resident set follows), sample by sample.
// A leak in Go code makes it grow. The percentage is taken as sampled,
// not as one figure: dualca sets it after each collection from the live
// heap (cmd/dualca/gctuner.go), 16 MiB over it while that is between 25
// and 400 % of it, so at a soak's few MiB the goal grows with the live
// heap, not 1+GOGC/100 times as fast (the live heap times the highest
// percentage sampled, the judge until this change, took a growth of 3.5
// KiB/min for 14.6 KiB/min at a percentage of 316). The slope is the
// goal's at the heap the run reached; a live heap grown past 64 MiB would
// have the floor of 25 % and its goal grow 1.25 times as fast, which a
// soak's hour cannot show and this bound does not add. The
// resident set's own slope is shown, not judged: it also moves with the
// runtime's unreturned pages and the binary's pages as code is first run,
// bounded by the heap goal and the binary's size, which within an hour it
// cannot tell from a leak. Its peak is judged: the headroom to the chart's
// limit is what the growth may use up.
type leak struct {
	processes, samples   int
	window               time.Duration
	rss, goroutines, fds float64
	// heap is the live heap's slope; memory the growth judged, the heap
	// goal's (each sample's heap times 1+GOGC/100); gogcLow and gogcHigh
	// are the lowest and highest percentage sampled.
	heap, memory                      float64
	gogcLow, gogcHigh                 float64
	peakRSS, peakFDs                  float64 // the highest of the judged samples
	memLimit, maxFDs                  float64 // the chart's memory limit, the lowest open-files limit
	rssLimit, goroutineLimit, fdLimit float64
	leaders                           []leaderSpan
}

// leaderSpan is one judged process: its samples while it led.
type leaderSpan struct {
	pid                   int
	samples               int
	from, to              time.Time
	rssFrom, rssTo        float64
	rss, heap, goroutines float64 // its own slopes, for the report
	// rootsFrom and rootsTo are the roots in its bundle at the first and
	// last judged samples, rootsMax the most: memory that follows the
	// bundle's size is state, not a leak, which these tell apart.
	rootsFrom, rootsTo, rootsMax float64
}

func (l leak) judged() bool { return l.processes > 0 }

func (l leak) ok() bool {
	return l.memory <= l.rssLimit && l.goroutines <= l.goroutineLimit && l.fds <= l.fdLimit
}

// check gathers the outcome, writes the report if asked, and asserts.
func (s *soak) check() {
	o := s.outcome()
	s.t.Logf("healthy clients: %d handshakes attempted, %d failed; the broken client failed %d of %d; gateway accepted %d rejected %d",
		o.attempts, o.failures, o.brokenStats.Failures, o.brokenStats.Attempts, o.gateway.Accepted, o.gateway.Rejected)
	for _, f := range o.firstFailures {
		s.t.Logf("failed handshake of a healthy client: %s", f)
	}
	s.t.Logf("monitor: %d gateway versions, %d violations, %d races (a client issued from a root not bundled yet), %d checks failed by the broken client; deletions injected %d, seen %d by the monitor and %d by the gateway; %d lists after a watch could not be resumed",
		o.checked.Versions, o.checked.ViolationCount, o.checked.RaceCount, o.checked.Excused, o.deletions, o.checked.Deletions, o.gateway.Deletions, o.checked.Relists)
	s.t.Logf("rotations: %d requested, %d roots after R1; faults %v; API requests %.0f/min (peak %.0f/min)", o.requested, len(o.rotations), o.faults, o.requestsPerMinute, o.peakPerMinute)
	l := o.leak
	if judgesLeaks() {
		s.t.Logf("leaks: %d samples of %d leader processes over %v: live heap %+.4f MiB/min, heap goal %+.4f MiB/min with GOGC %.0f-%.0f (limit %.4f: %.1f MiB peak RSS, %.0f MiB chart limit, %v; RSS itself %+.4f MiB/min), goroutines %+.3f/min (limit %.3f), fds %+.4f/min (limit %.4f)",
			l.samples, l.processes, l.window.Round(time.Second), l.heap/(1<<20), l.memory/(1<<20), l.gogcLow, l.gogcHigh, l.rssLimit/(1<<20), l.peakRSS/(1<<20), l.memLimit/(1<<20), horizon, l.rss/(1<<20), l.goroutines, l.goroutineLimit, l.fds, l.fdLimit)
	} else {
		s.t.Logf("leaks not judged (a run shorter than %v), for information: %d samples of %d leader processes over %v: RSS %+.3f MiB/min, goroutines %+.3f/min, fds %+.3f/min",
			judgeLeaksFrom, l.samples, l.processes, l.window.Round(time.Second), l.rss/(1<<20), l.goroutines, l.fds)
	}
	if *report != "" {
		s.g.Expect(o.write(*report, *plotTo, *seriesTo)).To(Succeed())
	}
	g := s.g
	g.Expect(o.attempts).To(BeNumerically(">", 0), "the healthy clients handshook")
	g.Expect(o.failures).To(BeZero(), "no healthy client failed a handshake: %v; the first: %v", o.healthyErrors, o.firstFailures)
	g.Expect(o.gateway.Rejected).To(BeNumerically("<=", o.brokenStats.Failures), "the gateway rejected only the broken client's handshakes: %v", o.gateway.Errors)
	g.Expect(o.checked.Violations).To(BeEmpty(), "every gateway version parsed, matched its key and served every client")
	g.Expect(o.checked.RaceCount).To(BeZero(), "no client was issued from a root the gateway Secret did not bundle yet (the issuing Secret waits for the gateway): %v", o.checked.Races)
	g.Expect(o.checked.Deletions).To(Equal(o.deletions), "the monitor saw exactly the deletions injected")
	g.Expect(o.gateway.Deletions).To(Equal(o.deletions), "the gateway saw exactly the deletions injected")
	g.Expect(o.gateway.LoadErrors).To(BeZero(), "the gateway loaded every version: %s", o.gateway.LastLoadError)
	g.Expect(o.fleet.Total.LoadErrors).To(BeZero(), "every client loaded every version")
	g.Expect(o.fleet.Total.Deletions).To(BeZero(), "no client Secret was deleted")
	g.Expect(o.scrapeFailures).To(BeEmpty(), "every replica that lived on served its metrics")
	g.Expect(o.requested).To(BeNumerically(">", 0), "rotations were requested")
	g.Expect(o.rotations).NotTo(BeEmpty(), "the root rotated")
	for _, r := range o.rotations {
		g.Expect(r.steady > 0 || r.superseded).To(BeTrue(), "rotation to R%d converged or was overtaken by the next", r.n)
		g.Expect(r.steadyInTime).To(BeTrue(), "rotation to R%d was Steady before R%d expired", r.n, r.n-1)
	}
	if judgesLeaks() {
		g.Expect(o.leak.judged()).To(BeTrue(), "a leader lived long enough to be judged for leaks")
		g.Expect(o.leak.ok()).To(BeTrue(), "dualca leaks: %+v", o.leak)
	}
}

func (s *soak) outcome() *outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &outcome{start: s.begin, elapsed: time.Since(s.begin), fleet: s.fleet.Stats(), gateway: s.gateway.Stats(), checked: s.mon.Result(),
		deletions: s.deletions, faults: map[string]int{},
		timeline: slices.Clone(s.timeline), samples: slices.Clone(s.samples), resources: slices.Clone(s.resources),
		scrapeFailures: slices.Clone(s.scrapeFailures)}
	o.brokenStats = o.fleet.Clients[s.broken]
	o.attempts = o.fleet.Total.Attempts - o.brokenStats.Attempts
	o.failures = o.fleet.Total.Failures - o.brokenStats.Failures
	o.healthyErrors = maps.Clone(o.fleet.Total.Errors)
	for e, n := range o.brokenStats.Errors {
		if o.healthyErrors[e] -= n; o.healthyErrors[e] <= 0 {
			delete(o.healthyErrors, e)
		}
	}
	for _, e := range o.timeline {
		switch e.kind {
		case rotationRequested:
			o.requested++
		case rotationSkipped:
			o.skipped++
		case killSkipped:
			o.killsSkipped++
		case "phase":
		default:
			o.faults[e.kind]++
		}
	}
	o.firstFailures = s.describeFailures()
	o.rotations = s.rotationOutcomes(o.samples)
	o.leak = s.leaks(o.resources)
	o.requestsPerMinute, o.peakPerMinute = requestRates(o.resources, o.elapsed)
	return o
}

// rotationOutcomes times each root after the first from the moment the
// root Secret held it.
func (s *soak) rotationOutcomes(samples []sample) []rotationOutcome {
	roots := s.mon.Roots()
	var out []rotationOutcome
	for i := 1; i < len(roots); i++ {
		fp := bundle.Fingerprint(roots[i])
		r := rotationOutcome{n: i + 1, arrived: s.mon.FirstSeen("root " + fp), oldRootExpires: roots[i-1].NotAfter}
		r.landedIn = "?"
		for _, smp := range samples {
			if smp.at.After(r.arrived) {
				break
			}
			r.landedIn = smp.phase
		}
		if st := s.mon.FirstSeen("phase " + string(bundle.PhaseSteady) + " " + fp); !st.IsZero() {
			r.steady = st.Sub(r.arrived)
		}
		// The old root must outlive the first Steady on this root or on a
		// later one (an overtaken rotation ends with the one that overtook
		// it), or now if none came.
		end := time.Now()
		for _, later := range roots[i:] {
			if st := s.mon.FirstSeen("phase " + string(bundle.PhaseSteady) + " " + bundle.Fingerprint(later)); !st.IsZero() {
				end = st
				break
			}
		}
		if i+1 < len(roots) {
			r.superseded = r.steady == 0 || s.mon.FirstSeen("root "+bundle.Fingerprint(roots[i+1])).Before(r.arrived.Add(r.steady))
		}
		r.oldExpiresIn = r.oldRootExpires.Sub(end)
		r.steadyInTime = r.oldExpiresIn > 0
		out = append(out, r)
	}
	return out
}

// warmUp is how long after it starts, or takes the lease, a replica is
// still filling its caches, starting workers and growing its heap to the
// garbage collector's steady size: growth that settles, not a leak. The
// 12-minute run with 100 clients showed a new leader's memory growing for
// about four minutes, then flat. A twelfth of the run, one to five
// minutes (five for an hour, beyond those four): short runs keep samples
// to judge.
func warmUp() time.Duration { return min(max(*duration/12, time.Minute), 5*time.Minute) }

// leaks fits the leader's resources over the last three quarters of the
// run. Each process counts while it leads, from the end of its warm-up
// after it took the lease (becoming the leader starts the controllers: a
// step); a process with fewer than three such samples is left out. The
// bounds are the headroom between the highest judged sample and the
// limit, spread over the horizon.
func (s *soak) leaks(resources []resource) leak {
	from := s.begin.Add(time.Since(s.begin) / 4)
	var memLimit int64
	root, err := controlplane.RepoRoot()
	if err == nil {
		_, memLimit, err = sizing.Defaults(root)
	}
	if err != nil {
		s.t.Errorf("the chart's memory limit, the leak bound's base: %v", err)
	}
	l := judgeLeaks(resources, from, warmUp(), float64(memLimit))
	l.window = time.Since(from)
	return l
}

// judgeLeaks is leaks' fit of resources sampled from on, each leader's
// first warm after it took the lease left out, against memLimit.
func judgeLeaks(resources []resource, from time.Time, warm time.Duration, memLimit float64) leak {
	l := leak{memLimit: memLimit}
	byPid := map[int][]resource{}
	for _, r := range resources {
		byPid[r.pid] = append(byPid[r.pid], r)
	}
	var segments [][]resource
	for _, pid := range slices.Sorted(maps.Keys(byPid)) {
		all := byPid[pid]
		i := slices.IndexFunc(all, func(r resource) bool { return r.leader })
		if i < 0 {
			continue
		}
		became := all[i].at
		var seg []resource
		for _, r := range all[i:] {
			if !r.at.Before(from) && !r.at.Before(became.Add(warm)) {
				seg = append(seg, r)
			}
		}
		if len(seg) < 3 {
			continue
		}
		segments = append(segments, seg)
		l.samples += len(seg)
		for _, r := range seg {
			l.peakRSS, l.peakFDs, l.gogcHigh = max(l.peakRSS, r.rss), max(l.peakFDs, r.fds), max(l.gogcHigh, r.gogc)
			if l.gogcLow == 0 || r.gogc < l.gogcLow {
				l.gogcLow = r.gogc
			}
			if l.maxFDs == 0 || r.maxFDs < l.maxFDs {
				l.maxFDs = r.maxFDs
			}
		}
		one := [][]resource{seg}
		l.leaders = append(l.leaders, leaderSpan{pid: pid, samples: len(seg), from: seg[0].at, to: seg[len(seg)-1].at,
			rssFrom: seg[0].rss, rssTo: seg[len(seg)-1].rss, rss: pooledSlope(one, func(r resource) float64 { return r.rss }), heap: pooledSlope(one, func(r resource) float64 { return r.heap }),
			goroutines: pooledSlope(one, func(r resource) float64 { return r.goroutines }),
			rootsFrom:  seg[0].roots, rootsTo: seg[len(seg)-1].roots,
			rootsMax: slices.MaxFunc(seg, func(a, b resource) int { return cmp.Compare(a.roots, b.roots) }).roots})
	}
	l.processes = len(segments)
	l.rss = pooledSlope(segments, func(r resource) float64 { return r.rss })
	l.heap = pooledSlope(segments, func(r resource) float64 { return r.heap })
	l.memory = max(pooledSlope(segments, heapGoal), 0)
	l.goroutines = pooledSlope(segments, func(r resource) float64 { return r.goroutines })
	l.fds = pooledSlope(segments, func(r resource) float64 { return r.fds })
	l.rssLimit, l.goroutineLimit, l.fdLimit = boundsOver(horizon, l.memLimit-l.peakRSS, l.maxFDs-l.peakFDs)
	return l
}

// heapGoal is the heap r's GC lets grow to before the next collection:
// its live heap grown by its percentage.
func heapGoal(r resource) float64 { return r.heap * (1 + r.gogc/100) }

// boundsOver is the growth per minute of resident memory, goroutines and
// open files that would use up memHeadroom bytes and fdHeadroom files
// within horizon h: none at all once a headroom is gone.
func boundsOver(h time.Duration, memHeadroom, fdHeadroom float64) (rss, goroutines, fds float64) {
	mins := h.Minutes()
	memHeadroom, fdHeadroom = max(memHeadroom, 0), max(fdHeadroom, 0)
	return memHeadroom / mins, memHeadroom / goroutineCost / mins, fdHeadroom / mins
}

// pooledSlope is the least-squares slope of v over time (per minute) shared
// by every segment, each with an intercept of its own: the within-segment
// estimator, which a restart's fresh start does not bias.
func pooledSlope(segments [][]resource, v func(resource) float64) float64 {
	var sxy, sxx float64
	for _, seg := range segments {
		var mx, my float64
		for _, r := range seg {
			mx += r.at.Sub(seg[0].at).Minutes()
			my += v(r)
		}
		mx, my = mx/float64(len(seg)), my/float64(len(seg))
		for _, r := range seg {
			dx := r.at.Sub(seg[0].at).Minutes() - mx
			sxy += dx * (v(r) - my)
			sxx += dx * dx
		}
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}

// requestRates is the replicas' API requests per minute over the run, and
// the highest rate between two samples of a replica.
func requestRates(resources []resource, elapsed time.Duration) (mean, peak float64) {
	last := map[int]resource{}
	total := 0.0
	for _, r := range resources {
		prev, ok := last[r.pid]
		if ok {
			if dt := r.at.Sub(prev.at).Minutes(); dt > 0 {
				peak = max(peak, (r.requests-prev.requests)/dt)
			}
			total += r.requests - prev.requests
		} else {
			total += r.requests
		}
		last[r.pid] = r
	}
	return total / elapsed.Minutes(), peak
}

// maxFailuresKept bounds the healthy clients' failed attempts kept to tell
// why a run failed; the fleet counts them all.
const maxFailuresKept = 20

// failed is the fleet's OnFailure: it keeps a healthy client's first
// failed attempts.
func (s *soak) failed(f mtls.Failure) {
	if f.Client == s.broken {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.firstFailures) < maxFailuresKept {
		s.firstFailures = append(s.firstFailures, f)
	}
}

// describeFailures tells the kept failed attempts: when, the root the
// client's leaf chains to and when the gateway loaded that root, and the
// error. Call it with s.mu held.
func (s *soak) describeFailures() []string {
	roots := s.mon.Roots()
	var out []string
	for _, f := range s.firstFailures {
		root := "a root the monitor never saw"
		if n := slices.IndexFunc(roots, func(r *x509.Certificate) bool { return bundle.ChainsTo(f.Leaf, r) }); n >= 0 {
			loaded := "never loaded by the gateway"
			if at := s.gateway.RootLoaded(bundle.Fingerprint(roots[n])); !at.IsZero() {
				loaded = "loaded by the gateway at " + minutes(at.Sub(s.begin))
			}
			root = fmt.Sprintf("R%d (%s)", n+1, loaded)
		}
		out = append(out, fmt.Sprintf("%s at %s, its leaf of %s: %v", f.Client, minutes(f.Start.Sub(s.begin)), root, f.Err))
	}
	return out
}
