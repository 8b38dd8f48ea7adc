package syncer

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// statusPublisher publishes the reconciles' reports to the status
// ConfigMap off their path: a reconcile hands its report over and is done,
// so a root arriving meanwhile waits for no status request, nor for the
// report's per-root client counts (a signature check per client and root).
// Reports handed over faster than they are published replace one another:
// only the latest is published, and never one older than a report out
// already. A report waiting for its turn (a change of the client progress
// alone, see statusMap.publish) is published when its time comes unless a
// newer one came first. The one report a reconcile publishes itself is one
// that may consume a promote: the promote's removal is one with the
// decision that consumed it.
type statusPublisher struct {
	m   *statusMap
	log logr.Logger
	// after is how a wait for a deferred report is timed; time.After
	// outside tests.
	after func(time.Duration) <-chan time.Time

	mu sync.Mutex
	// next builds the latest report handed over and not yet published,
	// numbered nextSeq; nil when there is none. seq numbers the reports
	// in the order their reconciles made them.
	next    func() *Report
	nextSeq uint64
	seq     uint64
	wake    chan struct{}

	// order is held by each publish; out is the number of the latest
	// report published.
	order sync.Mutex
	out   uint64
}

func newStatusPublisher(m *statusMap, log logr.Logger) *statusPublisher {
	return &statusPublisher{m: m, log: log, after: time.After, wake: make(chan struct{}, 1)}
}

// offer hands a report over, built by build when its turn comes, in place
// of any handed over and not yet published.
func (p *statusPublisher) offer(build func() *Report) {
	p.mu.Lock()
	p.seq++
	p.next, p.nextSeq = build, p.seq
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns the latest report handed over, and forgets it.
func (p *statusPublisher) take() (func() *Report, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next, seq := p.next, p.nextSeq
	p.next = nil
	return next, seq
}

// now publishes rep at once, in the reconcile that made it, in place of
// any report handed over and not yet published (promoteKept: see
// statusMap.publish).
func (p *statusPublisher) now(ctx context.Context, rep *Report, promoteKept bool) (published, error) {
	p.mu.Lock()
	p.seq++
	p.next = nil
	seq := p.seq
	p.mu.Unlock()
	return p.publish(ctx, rep, seq, promoteKept)
}

// publish publishes rep, numbered seq, unless a newer report is out.
func (p *statusPublisher) publish(ctx context.Context, rep *Report, seq uint64, promoteKept bool) (published, error) {
	p.order.Lock()
	defer p.order.Unlock()
	if seq < p.out {
		return published{}, nil
	}
	p.out = seq
	return p.m.publish(ctx, rep, promoteKept)
}

// statusSpacing is the least time between two writes of the status by
// the publisher. A rotation changes the report at each of its phases, and
// when rotations come fast (the benchmark's: a root every 150 ms on
// average, a 20 ms propagation delay, a 100 ms grace) that is several
// writes a second, each a request and a watch event of the ConfigMap: a
// third of dualca's requests per rotation, beside the targets', the
// record's and the events'. Reports handed over meanwhile replace one
// another, and the latest goes out when the spacing ends; nothing is
// lost, and what `dualca status` reads is at most this much older than
// the last reconcile. A report a reconcile publishes itself (a promote to
// consume) does not wait.
const statusSpacing = 250 * time.Millisecond

// Start publishes the reports handed over until ctx ends. It runs while
// this replica leads, as the reconciles do (a manager Runnable).
func (p *statusPublisher) Start(ctx context.Context) error {
	var waiting *Report // deferred, published at its turn unless replaced
	var waitingSeq uint64
	var turn <-chan time.Time
	var spaced <-chan time.Time // after a write, until statusSpacing ends
	for {
		if spaced != nil {
			select {
			case <-ctx.Done():
				return nil
			case <-spaced:
			}
			spaced = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-turn:
		}
		rep, seq := waiting, waitingSeq
		if build, n := p.take(); build != nil {
			rep, seq = build(), n
		}
		waiting, turn = nil, nil
		if rep == nil {
			continue
		}
		done, err := p.publish(ctx, rep, seq, true)
		switch {
		case err != nil:
			// Tried again with the next report: every reconcile hands one
			// over, the poll's included.
			p.log.Error(err, "publishing status")
		case done.deferred > 0:
			waiting, waitingSeq, turn = rep, seq, p.after(done.deferred)
		case done.wrote:
			spaced = p.after(statusSpacing)
		}
	}
}
