package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dualca/dualca/bundle"
)

// certManagerFanOut has the real cert-manager controller re-issue the
// selected clients: a root Certificate and a CA Issuer of cert-manager's,
// clients issued by it, dualca selecting them; the root is renewed by
// cert-manager (a new key), dualca triggers the clients at its
// --renewal-qps and cert-manager re-issues each. Three rotations, each
// after the previous one has settled (server switched, old root retired).
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
	names, err := b.cluster.CreateClients(ctx, ns, issuer, "agent", n, map[string]string{clientLabel: "agent"})
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
		triggered, err := b.watchIssuing(ctx, ns)
		if err != nil {
			return err
		}
		retriggersBefore := b.cluster.Retriggers()
		rates := b.sampleRequestRate(ctx)
		rotated := time.Now()
		next, err := b.cluster.RotateRoot(ctx, ns, rootCert)
		if err != nil {
			return err
		}
		ideal := time.Duration(float64(n) / b.opts.qps * float64(time.Second))
		if err := triggered.waitAll(ctx, n, 2*ideal+2*time.Minute); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		if err := b.cluster.WaitReady(ctx, ns, names...); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		reissued := time.Since(rotated)
		r := rates.stop()
		first, last := triggered.span()
		res := fanoutResult{clients: n, qps: b.opts.qps, toFirst: first.Sub(rotated), total: last.Sub(first), ideal: ideal,
			peakRate: r.peak, meanRate: r.mean(first, last), reissued: reissued, retriggers: b.cluster.Retriggers() - retriggersBefore}
		b.report.cmFanout = append(b.report.cmFanout, res)
		b.log("cert-manager fan-out run %d: %d triggered in %s (ideal %s), all re-issued %s after the rotation, API peak %.0f req/s",
			run, n, res.total.Round(time.Millisecond), ideal, reissued.Round(time.Millisecond), r.peak)
		fp := bundle.Fingerprint(next)
		if _, err := gw.waitFor(ctx, gw.mark()-1, 5*time.Minute, "steady on the new root", func(v version) bool {
			return v.state.Root == fp && v.state.Server == fp && v.state.Phase == bundle.PhaseSteady
		}); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
	}
	return p.alive()
}
