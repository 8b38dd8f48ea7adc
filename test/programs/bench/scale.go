package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/sizing"
)

// scale measures how dualca's cost grows with the selected clients: for
// each count, a namespace of its own with that many Certificates issued as
// cert-manager issues them (each a leaf of its own from the old root, its
// CertificateRequest and Secret written directly: nothing issues them), a
// fresh dualca, the time to its first sync, its resident memory, its
// reconcile time at rest, and the fan-out of renewal triggers at
// --renewal-qps=150 (scaleQPS) when the root rotates. Last, 10,000 issued Certificates
// of no selected client join a client namespace, and the memory is
// measured again; and the largest point's fan-out has its floor measured
// (scaleFloor).
func (b *bench) scale(ctx context.Context) error {
	b.report.touches = b.opts.touches
	if claim, err := sizing.Claim(b.root); err != nil {
		b.report.claimErr = err.Error()
	} else {
		b.report.claim = claim
	}
	base, err := b.scalePoint(ctx, 0, false)
	if err != nil {
		return fmt.Errorf("no clients: %w", err)
	}
	b.report.scaleBase = base.rss
	b.log("scale: a dualca selecting no client holds %s", mib(base.rss))
	for i, n := range b.opts.scale {
		last := i == len(b.opts.scale)-1
		pt, err := b.scalePoint(ctx, n, last)
		if err != nil {
			if pt.clients > 0 {
				b.report.scale = append(b.report.scale, pt) // what was measured before it failed
			}
			return fmt.Errorf("%d clients: %w", n, err)
		}
		b.report.scale = append(b.report.scale, pt)
		if c := pt.check; c != nil && c.unavailable == "" {
			b.log("scale %d clients in a memory cgroup of %s (the chart's limit): highest charge %s, failcnt %d, OOM kills %d, alive %t, ready %t, gateway on the new root %t",
				n, mib(c.limit), mib(c.stats.maxUsage), c.stats.failcnt, c.stats.oomKills, c.alive, c.ready, c.inSync)
		}
		b.log("scale %d clients: first sync %s, RSS %s, reconcile at rest p50 ≤ %s p99 ≤ %s, fan-out %s for ideal %s (the triggers' watch opened again %d times)",
			n, pt.firstSync.Round(time.Millisecond), mib(pt.rss), pt.reconcile.p50, pt.reconcile.p99, pt.fanout.total.Round(time.Millisecond), pt.fanout.ideal, pt.fanout.reopens)
		if f := pt.floor; f.clients > 0 {
			b.log("scale %d clients: the fan-out's floor %s for ideal %s (%d conflicts read again), API peak %.0f req/s",
				n, f.total.Round(time.Millisecond), f.ideal, f.rereads, f.peakRate)
		}
	}
	return nil
}

// scaleQPS is dualca's --renewal-qps in the scale runs: a rate this
// machine's API server keeps beside a dualca reading its clients. At
// 500/s (the rate until c26e518) even the floor, a loop sending nothing
// but the triggers, took 3m40.9s for 50,000 clients, +120.9 % over the
// ideal: the fan-out timed the API server, not dualca. At 150/s the floor
// took +0.7 % for 10,000 clients.
const scaleQPS = 150

// scalePoint measures n clients. At the chart's largest claimed size its
// dualca runs in a memory cgroup of the chart's limit for that size (see
// limitCheck).
func (b *bench) scalePoint(ctx context.Context, n int, withOrphans bool) (pt scalePoint, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cg *memoryCgroup
	var unavailable error
	if claim := b.report.claim; n > 0 && claim.Clients == n {
		// Without a group (no cgroup v1 memory controller, not root) the
		// point is measured as the others, and the check said not made.
		if cg, unavailable = newMemoryCgroup(fmt.Sprintf("dualca-bench-%d-%d", os.Getpid(), n), claim.Limit); unavailable != nil {
			b.log("the chart's limit cannot be checked at %d clients: %v", n, unavailable)
			defer func() { pt.check = &limitCheck{limit: claim.Limit, unavailable: unavailable.Error()} }()
		} else {
			defer func() { pt.check = finishCheck(pt.check, cg, err) }()
		}
	}
	roots, err := newRoots(2)
	if err != nil {
		return scalePoint{}, err
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("scale-%d", n), roots[0])
	if err != nil {
		return scalePoint{}, err
	}
	began := time.Now()
	if err := b.createClients(ctx, w.ns, roots[0], n); err != nil {
		return scalePoint{}, err
	}
	b.log("created and issued %d client Certificates in %s", n, time.Since(began).Round(time.Second))
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return scalePoint{}, err
	}
	args := []string{w.rootFlag(), w.gatewayFlag(), "--client-selector=" + clientLabel + "=agent", "--client-namespaces=" + w.ns,
		fmt.Sprintf("--renewal-qps=%d", scaleQPS), "--trust-propagation-delay=100ms", "--server-switch-grace=1h",
		"--poll-interval=" + b.opts.poll.String()}
	p, firstSync, err := b.startSynced(ctx, cg, args)
	if err != nil {
		return scalePoint{clients: n}, err
	}
	defer p.stop()
	pt = scalePoint{clients: n, firstSync: firstSync}
	if n > 0 {
		if pt.clientsRead, err = clientsRead(ctx, p); err != nil {
			return pt, err
		}
	}
	if pt.rss, err = settledRSS(ctx, p); err != nil {
		return pt, err
	}
	if n == 0 {
		return pt, nil // the baseline: what dualca holds for no client
	}
	if err := b.profile(ctx, p, "heap", 0, fmt.Sprintf("scale-%d-rest", n)); err != nil {
		return pt, err
	}
	if pt.reconcile, err = b.reconcileAtRest(ctx, w, p); err != nil {
		return pt, err
	}
	if withOrphans {
		if pt.orphans, pt.orphanRSS, err = b.orphans(ctx, w, args); err != nil {
			return pt, err
		}
	}
	before, err := p.scrape(ctx)
	if err != nil {
		return pt, err
	}
	churnBegan := time.Now()
	if pt.fanout, err = b.triggerFanOut(ctx, w, gw, p, roots[1], n, scaleQPS); err != nil {
		return pt, err
	}
	after, err := p.scrape(ctx)
	if err != nil {
		return pt, err
	}
	pt.churn, pt.churnWindow = quantilesBetween(before, after, "controller_runtime_reconcile_time_seconds"), time.Since(churnBegan)
	if pt.afterRSS, err = settledRSS(ctx, p); err != nil {
		return pt, err
	}
	if err := b.profile(ctx, p, "heap", 0, fmt.Sprintf("scale-%d-after", n)); err != nil {
		return pt, err
	}
	// The highest resident set, read last: the settled one after the
	// fan-out was seen above the peak read at the fan-out's end.
	if pt.peakRSS, err = p.peakRSS(); err != nil {
		return pt, err
	}
	if cg != nil {
		pt.check = b.limitHeld(ctx, p, gw, roots[1].Cert)
	}
	if withOrphans {
		// The largest point: the floor of its fan-out, dualca stopped.
		p.stop()
		if pt.floor, err = b.scaleFloor(ctx, w.ns, n); err != nil {
			return pt, fmt.Errorf("the fan-out's floor: %w", err)
		}
	}
	return pt, nil
}

// scaleFloor is the floor of the fan-out over the n selected clients of
// ns: with dualca stopped, the Issuing condition dualca set is taken off
// every client (untimed, at full speed), then a trivial loop sets it again
// with the requests dualca's renewer sends per client (floorTriggerAt),
// at dualca's --renewal-qps and over as many workers, from copies as
// current as dualca's cache (those the clearing wrote). The floor does
// nothing else: no watch of the clients, no decision, no gateway write.
// It is timed from its first write to its last write's return: a watch of
// the clients, which times dualca's fan-out, lost its place in a first
// run under the load of 50,000 writes (14,100 of the 50,000 triggers
// seen), and the writes' own returns come no later than their watch
// events, so the floor is, if anything, lower than one timed by a watch.
func (b *bench) scaleFloor(ctx context.Context, ns string, n int) (fanoutResult, error) {
	list := &cmapi.CertificateList{}
	if err := b.cluster.Client.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{clientLabel: "agent"}); err != nil {
		return fanoutResult{}, err
	}
	if len(list.Items) != n {
		return fanoutResult{}, fmt.Errorf("listed %d selected clients, not %d", len(list.Items), n)
	}
	began := time.Now()
	if err := b.clearIssuing(ctx, list.Items); err != nil {
		return fanoutResult{}, err
	}
	b.log("the floor: Issuing taken off %d clients in %s", n, time.Since(began).Round(time.Second))
	rates := b.sampleRequestRate(ctx)
	first := time.Now()
	rereads, err := b.floorTriggerAt(ctx, list.Items, scaleQPS)
	if err != nil {
		return fanoutResult{}, err
	}
	last := time.Now()
	r := rates.stop()
	ideal := time.Duration(float64(n) / scaleQPS * float64(time.Second))
	return fanoutResult{clients: n, qps: scaleQPS, total: last.Sub(first), ideal: ideal,
		peakRate: r.peak, meanRate: r.mean(first, last), rereads: rereads}, nil
}

// clearIssuing takes the Issuing condition off every Certificate of crts,
// as fast as the API server takes it, and leaves in crts what it wrote.
func (b *bench) clearIssuing(ctx context.Context, crts []cmapi.Certificate) error {
	return eachCertificate(ctx, crts, clearWorkers, func(ctx context.Context, crt *cmapi.Certificate) error {
		crt.Status.Conditions = slices.DeleteFunc(crt.Status.Conditions, func(c cmapi.CertificateCondition) bool {
			return c.Type == cmapi.CertificateConditionIssuing
		})
		if err := b.cluster.Client.Status().Update(ctx, crt); err != nil {
			return fmt.Errorf("taking Issuing off %s: %w", crt.Name, err)
		}
		return nil
	})
}

// clearWorkers is how many status updates clearIssuing has in flight.
const clearWorkers = 16

// limitCheck is the chart's memory limit at the largest size it claims:
// that scale point's dualca runs in a memory cgroup whose limit is the
// chart's (its README's table, whose largest row values.yaml's default
// limit is), reads it for its GOMEMLIMIT as in a container, and goes
// through the point's renewal fan-out. It held if the kernel killed
// nothing in the group, the process is alive and ready, and the gateway
// names the new root.
type limitCheck struct {
	limit                int64
	alive, ready, inSync bool
	stats                cgroupStats
	// err is what failed, "" when nothing did; unavailable why no group
	// could be made (nothing was checked).
	err, unavailable string
}

func (c *limitCheck) held() bool {
	return c != nil && c.err == "" && c.unavailable == "" && c.alive && c.ready && c.inSync && c.stats.oomKills == 0 && c.stats.underOOM == 0
}

// limitHeld reads, after the fan-out, whether dualca p is alive and ready
// and its gateway names root.
func (b *bench) limitHeld(ctx context.Context, p *process, gw *secretWatch, root *x509.Certificate) *limitCheck {
	c := &limitCheck{alive: p.alive() == nil, ready: p.ready(ctx)}
	if vs := gw.since(0); len(vs) > 0 {
		c.inSync = vs[len(vs)-1].state.Root == bundle.Fingerprint(root)
	}
	return c
}

// finishCheck completes the check once the point's dualca has stopped:
// the group's figures, what failed, the group removed.
func finishCheck(c *limitCheck, cg *memoryCgroup, failed error) *limitCheck {
	if c == nil {
		c = &limitCheck{}
	}
	c.limit = cg.limit
	var err error
	c.stats, err = cg.stats()
	if failed != nil {
		c.err = failed.Error()
	} else if err != nil {
		c.err = err.Error()
	}
	_ = cg.remove()
	return c
}

// startSynced starts dualca and waits for its readiness probe, which
// answers once the first reconcile has written the gateway.
func (b *bench) startSynced(ctx context.Context, cg *memoryCgroup, args []string) (*process, time.Duration, error) {
	p, err := b.startDualcaIn(cg, b.cluster.Kubeconfig, args...)
	if err != nil {
		return nil, 0, err
	}
	var took time.Duration
	err = wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := p.alive(); err != nil {
			return false, err
		}
		if p.ready(ctx) {
			took = time.Since(p.started)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		p.stop()
		return nil, 0, err
	}
	return p, took, nil
}

// clientsRead waits for p's dualca_clients_read gauge to be 1, scraped
// every 20 ms, and returns how long after the process's start it was
// first seen so. A scrape that fails fails the measurement.
func clientsRead(ctx context.Context, p *process) (time.Duration, error) {
	var took time.Duration
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := p.alive(); err != nil {
			return false, err
		}
		text, err := p.scrape(ctx)
		if err != nil {
			return false, err
		}
		if !strings.Contains(text, "\ndualca_clients_read 1\n") {
			return false, nil
		}
		took = time.Since(p.started)
		return true, nil
	})
	return took, err
}

// reconcileAtRest makes dualca reconcile with nothing to change (the root
// Secret's annotations touched, its content the same) and reads the
// reconcile times from controller-runtime's histogram.
func (b *bench) reconcileAtRest(ctx context.Context, w *world, p *process) (histogramQuantiles, error) {
	before, err := p.scrape(ctx)
	if err != nil {
		return histogramQuantiles{}, err
	}
	for i := range b.opts.touches {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.dualca.io/touch":"%d"}}}`, i)
		root, err := b.cs.CoreV1().Secrets(w.ns).Patch(ctx, rootName, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return histogramQuantiles{}, err
		}
		w.root = root
		time.Sleep(200 * time.Millisecond)
	}
	after, err := p.scrape(ctx)
	if err != nil {
		return histogramQuantiles{}, err
	}
	return quantilesBetween(before, after, "controller_runtime_reconcile_time_seconds"), nil
}

// orphanCertificates is how many issued Certificates of no selected client
// join a client namespace.
const orphanCertificates = 10000

// orphans adds issued Certificates of no selected client (each with its
// CertificateRequest and Secret) in a second client namespace and measures
// a fresh dualca's memory: it must cache none of them.
func (b *bench) orphans(ctx context.Context, w *world, args []string) (int, int64, error) {
	n := min(orphanCertificates, b.opts.scale[len(b.opts.scale)-1])
	ns := w.ns + "-orphans"
	if err := b.cluster.CreateNamespace(ctx, ns); err != nil {
		return 0, 0, err
	}
	roots, err := newRoots(1)
	if err != nil {
		return 0, 0, err
	}
	if err := b.createUnselected(ctx, ns, roots[0], n); err != nil {
		return 0, 0, err
	}
	var withOrphans []string
	for _, a := range args {
		if strings.HasPrefix(a, "--client-namespaces=") {
			a += "," + ns
		}
		withOrphans = append(withOrphans, a)
	}
	p, _, err := b.startSynced(ctx, nil, withOrphans)
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	rss, err := settledRSS(ctx, p)
	return n, rss, err
}

// scalePoint is the cost with one number of clients.
type scalePoint struct {
	clients   int
	firstSync time.Duration
	// clientsRead is from the process's start to its client cache loaded
	// (dualca_clients_read 1): the first reconcile reads no client, the
	// one after this reads them all.
	clientsRead time.Duration
	rss         int64
	reconcile   histogramQuantiles
	fanout      fanoutResult
	// floor is the fan-out's floor (scaleFloor), at the largest point only.
	floor fanoutResult
	// churn are the reconciles from the rotation to the last trigger of
	// the fan-out, a window of churnWindow: every trigger is a client's
	// change.
	churn       histogramQuantiles
	churnWindow time.Duration
	// peakRSS is the highest resident set of the process, read after the
	// fan-out; afterRSS its settled resident set then.
	peakRSS, afterRSS int64
	// orphans and orphanRSS: the issued Certificates of no selected
	// client added, and a fresh dualca's memory then.
	orphans   int
	orphanRSS int64
	// check is the chart's limit checked at this size, nil elsewhere.
	check *limitCheck
}
