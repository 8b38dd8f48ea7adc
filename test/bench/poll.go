package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// pollOnly runs dualca with its watches disabled, so only the poll can see
// a rotation: each root change lands at a random moment of the interval and
// waits for the next poll. The target: caught up within one interval (plus
// its 10 % jitter).
func (b *bench) pollOnly(ctx context.Context) (err error) {
	b.report.poll, err = b.repeated(ctx, "poll-only", b.pollRun)
	return err
}

func (b *bench) pollRun(ctx context.Context, run int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root, err := newRoot("poll-root-0")
	if err != nil {
		return nil, err
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("poll-%d", run), root)
	if err != nil {
		return nil, err
	}
	stop, err := b.startInProcess(ctx, true, nil, w.rootFlag(), w.gatewayFlag(), "--client-selector=bench.dualca.io/client=none",
		"--trust-propagation-delay=0s", "--server-switch-grace=1h", "--poll-interval="+b.opts.poll.String())
	if err != nil {
		return nil, err
	}
	defer stop()
	if _, err := w.gw.steadyOn(ctx, 0, root); err != nil {
		return nil, err
	}
	var samples []time.Duration
	for i := 1; i <= b.opts.polls; i++ {
		next, err := newRoot(fmt.Sprintf("poll-root-%d", i))
		if err != nil {
			return nil, err
		}
		// The change must land anywhere in the interval, not just after a poll.
		time.Sleep(rand.N(b.opts.poll)) //nolint:gosec // G404: a random moment, nothing secret
		mark := w.gw.mark()
		sent, err := w.writeRoot(ctx, next)
		if err != nil {
			return nil, err
		}
		v, err := w.gw.holds(ctx, mark, next)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		samples = append(samples, v.at.Sub(sent))
		if _, err := w.gw.steadyOn(ctx, mark, next); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// atRest counts every request dualca makes while nothing changes, over
// several poll intervals, with client tracking on.
func (b *bench) atRest(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root, err := newRoot("rest-root")
	if err != nil {
		return err
	}
	w, err := b.newWorld(ctx, "at-rest", root)
	if err != nil {
		return err
	}
	counter := &requestCounter{}
	stop, err := b.startInProcess(ctx, false, counter, w.rootFlag(), w.gatewayFlag(), "--client-selector=bench.dualca.io/client=agent",
		"--trust-propagation-delay=0s", "--server-switch-grace=1h", "--poll-interval="+b.opts.poll.String())
	if err != nil {
		return err
	}
	defer stop()
	if _, err := w.gw.steadyOn(ctx, 0, root); err != nil {
		return err
	}
	// Let the start-up settle for one interval, then count.
	time.Sleep(b.opts.poll)
	b.report.startupRequests = counter.snapshot()
	intervals := 10
	mark := w.gw.mark()
	time.Sleep(time.Duration(intervals) * b.opts.poll)
	b.report.restRequests = counter.snapshot()
	b.report.restIntervals = intervals
	b.report.restGatewayVersions = w.gw.mark() - mark
	b.log("at rest over %d intervals: %s", intervals, formatCounts(b.report.restRequests))
	return nil
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
