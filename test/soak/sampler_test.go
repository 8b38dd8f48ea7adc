package soak

import (
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/run"
)

const (
	// sampleEvery is how often the traffic and the phase are sampled;
	// resourcesEvery how often each replica's resources are.
	sampleEvery    = 2 * time.Second
	resourcesEvery = 10 * time.Second
)

// sample is the traffic and the gateway's state at a moment.
type sample struct {
	at time.Time
	// attempts and failures are the healthy clients' totals; broken the
	// broken client's failures.
	attempts, failures, broken int
	phase                      string // the gateway's phase, "" while it is deleted
	root, server               int    // indexes of the current and the server root (1 for R1), 0 unknown
}

// resource is one replica's figures at a moment.
type resource struct {
	at      time.Time
	replica int
	pid     int
	rss     float64 // bytes
	// heap is the live heap the last GC marked (bytes); gogc the GC's
	// target percentage, by which the heap grows past it before the next.
	heap, gogc float64
	goroutines float64
	fds        float64
	maxFDs     float64 // the process's soft limit of open files
	requests   float64 // API requests since the process started
	roots      float64 // roots in the gateway's bundle, as it last decided (0 for a standby)
	started    time.Time
	leader     bool // it had acquired the lease
}

// sample samples until done: the traffic and phase every sampleEvery, the
// replicas' resources every resourcesEvery.
func (s *soak) sample(done <-chan struct{}) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	lastResources, lastProfile := time.Time{}, time.Now()
	for {
		s.sampleTraffic()
		if time.Since(lastResources) >= resourcesEvery {
			lastResources = time.Now()
			s.sampleResources()
		}
		if *profilesTo != "" && time.Since(lastProfile) >= profileEvery {
			lastProfile = time.Now()
			s.profileLeaders()
		}
		select {
		case <-done:
			return
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *soak) sampleTraffic() {
	// The moment of the counters: what follows may wait on the monitor,
	// and a later moment would credit this sample's handshakes to the
	// wrong interval.
	at := time.Now()
	f := s.fleet.Stats()
	b := f.Clients[s.broken]
	a := s.mon.Current()
	roots := s.mon.Roots()
	index := func(fp string) int {
		for i, r := range roots {
			if bundle.Fingerprint(r) == fp {
				return i + 1
			}
		}
		return 0
	}
	smp := sample{at: at, attempts: f.Total.Attempts - b.Attempts, failures: f.Total.Failures - b.Failures, broken: b.Failures,
		phase: a[bundle.AnnotationPhase], root: index(a[bundle.AnnotationRoot]), server: index(a[bundle.AnnotationServer])}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, smp)
}

// scrapeGrace is how long a replica whose scrape failed has to be found
// gone (killed, or exited for a lost lease) for the failure not to count.
const scrapeGrace = 5 * time.Second

// sampleResources scrapes each replica's metrics: the Go runtime's and the
// process's collectors, and client-go's request counter. A scrape that
// fails while its replica lives on is counted: the report states the count
// and the run fails on any.
func (s *soak) sampleResources() {
	s.mu.Lock()
	replicas := s.replicas
	s.mu.Unlock()
	for i, r := range replicas {
		if r == nil || r.Exited() {
			continue
		}
		fams, err := run.Scrape(r.metrics)
		if err != nil {
			if !r.ExitsWithin(scrapeGrace) {
				s.mu.Lock()
				s.scrapeFailures = append(s.scrapeFailures, fmt.Sprintf("pid %d: %v", r.Pid, err))
				s.mu.Unlock()
			}
			continue
		}
		res := resource{at: time.Now(), replica: i, pid: r.Pid,
			rss: gauge(fams["process_resident_memory_bytes"]), goroutines: gauge(fams["go_goroutines"]),
			heap: gauge(fams["go_gc_heap_live_bytes"]), gogc: gauge(fams["go_gc_gogc_percent"]),
			fds: gauge(fams["process_open_fds"]), maxFDs: gauge(fams["process_max_fds"]), requests: counterSum(fams["rest_client_requests_total"]),
			roots: gauge(fams["dualca_bundle_roots"]), started: r.started, leader: r.leads()}
		s.mu.Lock()
		s.resources = append(s.resources, res)
		s.mu.Unlock()
	}
}

func gauge(f *dto.MetricFamily) float64 {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

func counterSum(f *dto.MetricFamily) float64 {
	sum := 0.0
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}
