package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// certManagerFanOut has the real cert-manager controller re-issue the
// selected clients: a root Certificate and a CA Issuer of cert-manager's,
// clients issued by it, dualca selecting them; the root is renewed by
// cert-manager (a new key), dualca triggers the clients at its
// --renewal-qps and cert-manager re-issues each. Three rotations, each
// after the previous one has settled (server switched, old root retired).
// Then the floor: dualca stopped, floorRuns more rotations whose triggers
// a trivial loop sets at the same rate, cert-manager re-issuing the same
// way.
func (b *bench) certManagerFanOut(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := b.cluster.StartCertManager(ctx); err != nil {
		return err
	}
	defer func() { _ = b.cluster.StopCertManager() }()
	const ns, rootCert, issuer = "cm-fanout", "agents-root", "agents"
	if err := b.cluster.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	root, err := b.cluster.CreateRootCA(ctx, ns, rootCert)
	if err != nil {
		return err
	}
	if err := b.cluster.CreateCAIssuer(ctx, ns, issuer, rootCert); err != nil {
		return err
	}
	began := time.Now()
	n := b.opts.fanout
	names, err := b.cluster.CreateClients(ctx, ns, issuer, "agent", n, selected)
	if err != nil {
		return err
	}
	b.log("cert-manager issued %d clients in %s", n, time.Since(began).Round(time.Second))
	w := &world{b: b, ns: ns}
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return err
	}
	p, err := b.startDualca(b.cluster.Kubeconfig, "--root-secret="+ns+"/"+rootCert, "--gateway-secret="+ns+"/"+gatewayName,
		"--client-selector="+clientLabel+"=agent", "--client-namespaces="+ns, fmt.Sprintf("--renewal-qps=%g", b.opts.qps),
		"--trust-propagation-delay=1s", "--server-switch-grace=1h")
	if err != nil {
		return err
	}
	defer p.stop()
	if _, err := gw.trusting(ctx, 0, root); err != nil {
		return err
	}
	for run := 1; run <= b.opts.fanoutRuns; run++ {
		res, next, err := b.cmFanOutRun(ctx, ns, rootCert, names, nil)
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		b.report.cmFanout = append(b.report.cmFanout, res)
		b.log("cert-manager fan-out run %d: %d triggered in %s (ideal %s), all re-issued %s after the rotation, API peak %.0f req/s",
			run, n, res.total.Round(time.Millisecond), res.ideal, res.reissued.Round(time.Millisecond), res.peakRate)
		fp := bundle.Fingerprint(next)
		if _, err := gw.waitFor(ctx, gw.mark()-1, 5*time.Minute, "steady on the new root", func(v version) bool {
			return v.state.Root == fp && v.state.Server == fp && v.state.Phase == bundle.PhaseSteady
		}); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
	}
	if err := p.alive(); err != nil {
		return err
	}
	p.stop()
	// The floor: the same clients, the same rotations and re-issues, the
	// triggers set by a trivial loop at the same rate instead of dualca.
	for run := 1; run <= b.opts.floorRuns; run++ {
		res, _, err := b.cmFanOutRun(ctx, ns, rootCert, names, b.floorTrigger)
		if err != nil {
			return fmt.Errorf("floor run %d: %w", run, err)
		}
		b.report.cmFloor = append(b.report.cmFloor, res)
		b.log("cert-manager fan-out floor run %d: %d triggered in %s (ideal %s), all re-issued %s after the rotation, API peak %.0f req/s",
			run, n, res.total.Round(time.Millisecond), res.ideal, res.reissued.Round(time.Millisecond), res.peakRate)
	}
	return nil
}

// cmFanOutRun rotates the root and times the triggers of names, first to
// last, and their re-issue by cert-manager. trigger, when not nil, sets
// the triggers (the floor); otherwise dualca, running, does.
func (b *bench) cmFanOutRun(ctx context.Context, ns, rootCert string, names []string,
	trigger func(context.Context, string, []string) error) (fanoutResult, *x509.Certificate, error) {
	n := len(names)
	triggered, err := b.watchIssuing(ctx, ns)
	if err != nil {
		return fanoutResult{}, nil, err
	}
	retriggersBefore := b.cluster.Retriggers()
	rates := b.sampleRequestRate(ctx)
	rotated := time.Now()
	next, err := b.cluster.RotateRoot(ctx, ns, rootCert)
	if err != nil {
		return fanoutResult{}, nil, err
	}
	if trigger != nil {
		if err := trigger(ctx, ns, names); err != nil {
			return fanoutResult{}, nil, err
		}
	}
	ideal := time.Duration(float64(n) / b.opts.qps * float64(time.Second))
	if err := triggered.waitAll(ctx, n, 2*ideal+2*time.Minute); err != nil {
		return fanoutResult{}, nil, err
	}
	if err := b.cluster.WaitReady(ctx, ns, names...); err != nil {
		return fanoutResult{}, nil, err
	}
	reissued := time.Since(rotated)
	r := rates.stop()
	first, last := triggered.span()
	return fanoutResult{clients: n, qps: b.opts.qps, toFirst: first.Sub(rotated), total: last.Sub(first), ideal: ideal,
		peakRate: r.peak, meanRate: r.mean(first, last), reissued: reissued, retriggers: b.cluster.Retriggers() - retriggersBefore}, next, nil
}

// floorBurst is the floor's token bucket size: dualca's --renewal-burst
// default.
const floorBurst = 10

// floorTrigger sets Issuing on every Certificate of names the way an
// operator's loop around `cmctl renew` would: read it, write the condition
// (a conflict reads it again), paced by a token bucket at the benchmark's
// rate (dualca's --renewal-qps) and burst over as many workers as dualca's
// renewer. It returns once every trigger is written.
func (b *bench) floorTrigger(ctx context.Context, ns string, names []string) error {
	limiter := rate.NewLimiter(rate.Limit(b.opts.qps), floorBurst)
	work := make(chan string)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(work)
		for _, name := range names {
			select {
			case work <- name:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	for range syncer.RenewalWorkers(b.opts.qps) {
		g.Go(func() error {
			for name := range work {
				if err := limiter.Wait(ctx); err != nil {
					return err
				}
				if err := b.cluster.Trigger(ctx, ns, name); err != nil {
					return fmt.Errorf("floor: %w", err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}
