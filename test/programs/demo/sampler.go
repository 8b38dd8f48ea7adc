package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// sampleEvery is how often the progress view reads the state.
const sampleEvery = 200 * time.Millisecond

// sampler reads the state every sampleEvery for the view, and keeps the
// handshake counts over time and the longest outage of a client.
type sampler struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// longest is the most handshakes one client failed in a row.
	longest int
	counts  []count
}

// count is the handshake totals at a moment.
type count struct {
	at         time.Time
	ok, failed int
}

func startSampler(ctx context.Context, d *demo) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{cancel: cancel, done: make(chan struct{})}
	// The first row is there before the story goes on.
	s.sample(ctx, d)
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.sample(ctx, d)
		}
	}()
	return s
}

// stop stops sampling.
func (s *sampler) stop() {
	s.cancel()
	<-s.done
}

func (s *sampler) sample(ctx context.Context, d *demo) {
	report, err := d.status(ctx)
	if err != nil {
		return // the cache is stopping; the next sample will do
	}
	stats := d.fleet.Stats()
	s.mu.Lock()
	s.longest = max(s.longest, stats.Total.ConsecutiveFailures)
	s.counts = append(s.counts, count{at: time.Now(), ok: stats.Total.Successes, failed: stats.Total.Failures})
	s.mu.Unlock()
	d.view.update(rowOf(report, d.rec, len(d.clients), stats.Total.Successes, stats.Total.Failures, time.Since(d.begin)), d.rec.legend())
}

// longestOutage is the most handshakes one client failed in a row.
func (s *sampler) longestOutage() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longest
}

// rowOf turns a status report into a row of the table.
func rowOf(rep *syncer.Report, rec *recorder, total, ok, failed int, at time.Duration) row {
	r := row{at: at, phase: dash(rep.Phase), total: total, ok: ok, failed: failed}
	for _, b := range rep.Roots {
		l := rec.label(b.Fingerprint)
		r.bundle = append(r.bundle, l)
		if b.Current {
			r.root = l
		}
		if b.Server {
			r.server = l
		}
	}
	if rep.Clients != nil {
		r.clients = *rep.Clients
	}
	if rep.Strategy == bundle.StrategyLegacy {
		// The legacy strategy has no phases: the gateway is a copy of the
		// root, and clients are re-issued after it.
		r.phase = "Steady"
		if r.clients.Pending+r.clients.Failed > 0 {
			r.phase = "Re-issuing"
		}
	}
	return r
}

// between is the handshakes counted from about from to about to: from the
// last sample at or before each (the first sample for a moment before it).
func (s *sampler) between(from, to time.Time) (ok, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return countsBetween(s.counts, from, to)
}

func countsBetween(counts []count, from, to time.Time) (ok, failed int) {
	at := func(t time.Time) count {
		i, _ := slices.BinarySearchFunc(counts, t, func(c count, t time.Time) int {
			if c.at.After(t) {
				return 1
			}
			return -1
		})
		return counts[max(0, i-1)]
	}
	if len(counts) == 0 {
		return 0, 0
	}
	a, b := at(from), at(to)
	return b.ok - a.ok, b.failed - a.failed
}
