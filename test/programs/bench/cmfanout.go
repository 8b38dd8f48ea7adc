package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
// a trivial loop sets at the same rate with the same requests, cert-manager
// re-issuing the same way. Both are timed from the same event: the watch
// event of the root Secret's version carrying the new root, which is what
// dualca reacts to and what the floor starts from.
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
	rootWatch, err := w.watchSecret(ctx, rootCert)
	if err != nil {
		return err
	}
	current := root
	for run := 1; run <= b.opts.fanoutRuns; run++ {
		res, next, err := b.cmFanOutRun(ctx, ns, rootCert, rootWatch, current, names, nil)
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		b.report.cmFanout = append(b.report.cmFanout, res)
		b.log("cert-manager fan-out run %d: %d triggered in %s (ideal %s), all re-issued %s after the rotation, API peak %.0f req/s, the triggers' watch opened again %d times",
			run, n, res.total.Round(time.Millisecond), res.ideal, res.reissued.Round(time.Millisecond), res.peakRate, res.reopens)
		current = next
		fp := bundle.Fingerprint(next)
		if _, err := gw.waitFor(ctx, gw.mark()-1, 5*time.Minute, "steady on the new root", func(v version) bool {
			return v.state.Root == fp && v.state.Server == fp && v.state.Phase == bundle.PhaseSteady
		}); err != nil {
			scrape, _ := p.scrape(ctx)
			return fmt.Errorf("run %d: %w; dualca's clients: %s; its log's end:\n%s", run, err,
				strings.Join(metricLines(scrape, "dualca_clients"), ", "), tailOf(p.log.String(), 20))
		}
	}
	if err := p.alive(); err != nil {
		return err
	}
	p.stop()
	// The floor: the same clients, the same rotations and re-issues, the
	// triggers set by a trivial loop at the same rate instead of dualca.
	for run := 1; run <= b.opts.floorRuns; run++ {
		res, next, err := b.cmFanOutRun(ctx, ns, rootCert, rootWatch, current, names, b.floorTrigger)
		current = next
		if err != nil {
			return fmt.Errorf("floor run %d: %w", run, err)
		}
		b.report.cmFloor = append(b.report.cmFloor, res)
		b.log("cert-manager fan-out floor run %d: %d triggered in %s (ideal %s), all re-issued %s after the rotation, API peak %.0f req/s, the triggers' watch opened again %d times",
			run, n, res.total.Round(time.Millisecond), res.ideal, res.reissued.Round(time.Millisecond), res.peakRate, res.reopens)
	}
	return nil
}

// cmFanOutRun rotates the root (current, watched through rootWatch) and
// times the triggers of names, first to last, and their re-issue by
// cert-manager, from the watch event of the root Secret's version carrying
// the new root. trigger, when not nil, sets the triggers (the floor) from
// that moment on, from the Certificates as listed before the rotation (what
// dualca's cache holds); otherwise dualca, running, does.
func (b *bench) cmFanOutRun(ctx context.Context, ns, rootCert string, rootWatch *secretWatch, current *x509.Certificate, names []string,
	trigger func(context.Context, []cmapi.Certificate) (int64, error)) (fanoutResult, *x509.Certificate, error) {
	n := len(names)
	triggered, err := b.watchIssuing(ctx, ns)
	if err != nil {
		return fanoutResult{}, nil, err
	}
	var cached cmapi.CertificateList
	if trigger != nil {
		if err := b.cluster.Client.List(ctx, &cached, client.InNamespace(ns), client.MatchingLabels(selected)); err != nil {
			return fanoutResult{}, nil, err
		}
		if len(cached.Items) != n {
			return fanoutResult{}, nil, fmt.Errorf("the floor listed %d clients, not %d", len(cached.Items), n)
		}
	}
	retriggersBefore := b.cluster.Retriggers()
	rates := b.sampleRequestRate(ctx)
	mark := rootWatch.mark()
	old := bundle.Fingerprint(current)
	g, gctx := errgroup.WithContext(ctx)
	var next *x509.Certificate
	g.Go(func() error {
		var err error
		next, err = b.cluster.RotateRoot(gctx, ns, rootCert)
		return err
	})
	seen, err := rootWatch.waitFor(gctx, mark, 2*time.Minute, "the root Secret with a new root", func(v version) bool {
		return len(v.trusts) > 0 && !v.trusts[old]
	})
	if err != nil {
		return fanoutResult{}, nil, errors.Join(err, g.Wait())
	}
	rotated := seen.at
	var rereads int64
	if trigger != nil {
		g.Go(func() (err error) {
			rereads, err = trigger(gctx, cached.Items)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fanoutResult{}, nil, err
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
		peakRate: r.peak, meanRate: r.mean(first, last), reissued: reissued, retriggers: b.cluster.Retriggers() - retriggersBefore, rereads: rereads,
		reopens: triggered.reopened.Load()}, next, nil
}

// floorBurst is the floor's token bucket size: dualca's --renewal-burst
// default.
const floorBurst = 10

// floorTrigger sets Issuing on every Certificate of crts with the requests
// dualca's renewer sends per client: one status update from the copy it
// holds (here, as listed before the rotation; dualca's, its cache), and on
// a conflict a read and another update. It is paced by a token bucket at
// the benchmark's rate (dualca's --renewal-qps) and burst over as many
// workers as dualca's renewer, and returns once every trigger is written,
// with the count of conflicts that made it read a Certificate again.
func (b *bench) floorTrigger(ctx context.Context, crts []cmapi.Certificate) (int64, error) {
	return b.floorTriggerAt(ctx, crts, b.opts.qps)
}

// floorTriggerAt is floorTrigger at qps triggers a second.
func (b *bench) floorTriggerAt(ctx context.Context, crts []cmapi.Certificate, qps float64) (int64, error) {
	began := time.Now()
	var rereads, skipped atomic.Int64
	defer func() {
		b.log("the floor's triggers: %d written in %s, %d conflicts read again, %d already Issuing", len(crts), time.Since(began).Round(time.Millisecond), rereads.Load(), skipped.Load())
	}()
	limiter := rate.NewLimiter(rate.Limit(qps), floorBurst)
	err := eachCertificate(ctx, crts, syncer.RenewalWorkers(qps), func(ctx context.Context, crt *cmapi.Certificate) error {
		if err := limiter.Wait(ctx); err != nil {
			return err
		}
		if err := b.setIssuing(ctx, crt, &rereads, &skipped); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		return nil
	})
	return rereads.Load(), err
}

// eachCertificate calls do with each Certificate of crts, workers at a
// time, until one fails.
func eachCertificate(ctx context.Context, crts []cmapi.Certificate, workers int, do func(context.Context, *cmapi.Certificate) error) error {
	work := make(chan *cmapi.Certificate)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(work)
		for i := range crts {
			select {
			case work <- &crts[i]:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			for crt := range work {
				if err := do(ctx, crt); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// setIssuing sets Issuing=True on crt, as `cmctl renew` and dualca do:
// first on the copy given, then, after a conflict, on the Certificate read
// again; one already Issuing is left alone.
func (b *bench) setIssuing(ctx context.Context, from *cmapi.Certificate, rereads, skipped *atomic.Int64) error {
	crt := from.DeepCopy()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if crt == nil {
			rereads.Add(1)
			crt = &cmapi.Certificate{}
			if err := b.cluster.Client.Get(ctx, client.ObjectKeyFromObject(from), crt); err != nil {
				return err
			}
		}
		if isIssuing(crt) {
			skipped.Add(1)
			return nil
		}
		now := metav1.Now()
		issuing := cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
			Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered", LastTransitionTime: &now, ObservedGeneration: crt.Generation}
		conditions := slices.DeleteFunc(crt.Status.Conditions, func(c cmapi.CertificateCondition) bool { return c.Type == cmapi.CertificateConditionIssuing })
		crt.Status.Conditions = append(conditions, issuing)
		err := b.cluster.Client.Status().Update(ctx, crt)
		if err != nil {
			crt = nil // read it again
		}
		return err
	})
}
