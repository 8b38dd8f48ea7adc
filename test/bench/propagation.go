package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
)

// propagation rotates the root again and again under the dualca binary and
// times each change from the watch event of the new root to the watch event
// of a gateway Secret naming it, as dualca and a gateway receive them: the
// delivery to dualca, its reads, decision and write, and the delivery of
// the result. The time from sending the root's write is kept beside it.
func (b *bench) propagation(ctx context.Context) (err error) {
	b.report.propagation, err = b.repeated(ctx, "propagation", b.propagationRun)
	return err
}

// repeated runs a measurement b.opts.runs times, each in a namespace and
// with a dualca of its own, and returns the samples of each run.
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

func (b *bench) propagationRun(ctx context.Context, run int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Keys are made before the clock starts: cert-manager makes them, not dualca.
	roots := make([]*certs.CA, b.opts.rotations+1)
	for i := range roots {
		var err error
		if roots[i], err = newRoot(fmt.Sprintf("bench-root-%d", i)); err != nil {
			return nil, err
		}
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("propagation-%d", run), roots[0])
	if err != nil {
		return nil, err
	}
	// Client tracking on, with no client selected: each rotation completes
	// (switch and retirement) after the short delay, so the bundle holds
	// the one or two roots it holds in production, not hundreds.
	p, err := b.startDualca(w.rootFlag(), w.gatewayFlag(), "--client-selector=bench.dualca.io/client=none",
		"--trust-propagation-delay=20ms", "--server-switch-grace=1h")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if _, err := w.gw.steadyOn(ctx, 0, roots[0]); err != nil {
		return nil, err
	}
	samples := make([]time.Duration, 0, b.opts.rotations)
	var fromWrite []time.Duration
	for i := 1; i <= b.opts.rotations; i++ {
		// A random pause, so rotations do not fall in step with anything.
		time.Sleep(rand.N(20 * time.Millisecond)) //nolint:gosec // G404: a random pause, nothing secret
		mark, rootMark := w.gw.mark(), w.rootSeen.mark()
		sent, err := w.writeRoot(ctx, roots[i])
		if err != nil {
			return nil, err
		}
		v, err := w.gw.holds(ctx, mark, roots[i])
		if err != nil {
			return nil, fmt.Errorf("rotation %d: %w", i, err)
		}
		fp := bundle.Fingerprint(roots[i].Cert)
		seen, err := w.rootSeen.waitFor(ctx, rootMark, 30*time.Second, "the new root", func(v gatewayVersion) bool { return v.cert == fp })
		if err != nil {
			return nil, err
		}
		samples = append(samples, v.at.Sub(seen.at))
		fromWrite = append(fromWrite, v.at.Sub(sent))
		if _, err := w.gw.steadyOn(ctx, mark, roots[i]); err != nil {
			return nil, fmt.Errorf("rotation %d: %w", i, err)
		}
	}
	if err := p.alive(); err != nil {
		return nil, err
	}
	metrics, err := p.scrape(ctx)
	if err != nil {
		return nil, err
	}
	b.report.dualcaHistogram = histogramSummary(metrics, "dualca_propagation_seconds")
	b.report.fromWrite = append(b.report.fromWrite, fromWrite)
	return samples, nil
}
