package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// pollOnly runs dualca with its watches disabled, so only the poll can see
// a rotation: each root change lands at a random moment of the interval and
// waits for the next poll. The target: caught up within one interval (plus
// its 10 % jitter).
func (b *bench) pollOnly(ctx context.Context) (err error) {
	b.report.pollEvery = b.opts.poll
	b.report.poll, err = b.repeated(ctx, "poll-only", b.pollRun)
	return err
}

func (b *bench) pollRun(ctx context.Context, run int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	root, err := newRoot()
	if err != nil {
		return nil, err
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("poll-%d", run), root)
	if err != nil {
		return nil, err
	}
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return nil, err
	}
	stop, err := b.startInProcess(ctx, w.rootFlag(), w.gatewayFlag(), "--client-selector=bench.dualca.io/client=none",
		"--trust-propagation-delay=0s", "--server-switch-grace=1h", "--poll-interval="+b.opts.poll.String())
	if err != nil {
		return nil, err
	}
	defer stop()
	if _, err := gw.steadyOn(ctx, 0, root); err != nil {
		return nil, err
	}
	var samples []time.Duration
	for i := 1; i <= b.opts.polls; i++ {
		next, err := newRoot()
		if err != nil {
			return nil, err
		}
		// The change must land anywhere in the interval, not just after a poll.
		time.Sleep(rand.N(b.opts.poll)) //nolint:gosec // G404: a random moment, nothing secret
		mark := gw.mark()
		acked, err := w.writeRoot(ctx, next)
		if err != nil {
			return nil, err
		}
		v, err := gw.trusting(ctx, mark, next.Cert)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		samples = append(samples, v.at.Sub(acked))
		if _, err := gw.steadyOn(ctx, mark, next); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// repeated runs a measurement b.opts.runs times and returns the samples of
// each run.
func (b *bench) repeated(ctx context.Context, what string, run func(context.Context, int) ([]time.Duration, error)) ([][]time.Duration, error) {
	var runs [][]time.Duration
	for i := range b.opts.runs {
		samples, err := run(ctx, i)
		if err != nil {
			return runs, err
		}
		runs = append(runs, samples)
		b.log("%s run %d: %s", what, i+1, summarize(samples))
	}
	return runs, nil
}
