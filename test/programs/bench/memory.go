package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// unrelatedSize is the data of each unrelated Secret.
const unrelatedSize = 8 << 10

// unrelatedLabel marks the unrelated Secrets, so that they go in one call.
const unrelatedLabel = "bench.dualca.io/unrelated"

// The memory side by side: dualca, trust-manager and a plain namespace
// informer (the third reference: what following the root through a
// controller-runtime manager's cached client costs), each its own process,
// each behind a proxy of its own that counts its requests. They start fresh
// in an empty world, then beside 10,000 unrelated Secrets in the root's
// namespace, then beside 10,000 over 100 namespaces; the last three stay,
// at rest, for the rest window, their requests counted.

// memoryCondition names the three conditions.
var memoryConditions = []string{"empty", "in the root's namespace", "over 100 namespaces"}

func (b *bench) memory(ctx context.Context) error {
	root, err := newRoot()
	if err != nil {
		return err
	}
	w, err := b.newWorld(ctx, "memory", root)
	if err != nil {
		return err
	}
	n := b.opts.unrelated
	for i, cond := range memoryConditions {
		switch i {
		case 1:
			if err := b.createUnrelated(ctx, []string{w.ns}, n); err != nil {
				return err
			}
		case 2:
			if err := b.cs.CoreV1().Secrets(w.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: unrelatedLabel}); err != nil {
				return err
			}
			var spread []string
			for k := range 100 {
				ns := fmt.Sprintf("spread-%02d", k)
				if err := b.cluster.CreateNamespace(ctx, ns); err != nil {
					return err
				}
				spread = append(spread, ns)
			}
			if err := b.createUnrelated(ctx, spread, n); err != nil {
				return err
			}
		}
		last := i == len(memoryConditions)-1
		if err := b.memoryPoint(ctx, w, cond, last); err != nil {
			return fmt.Errorf("%s: %w", cond, err)
		}
	}
	return nil
}

// sideBySide is one of the three processes with its proxy.
type sideBySide struct {
	name  string
	proc  *process
	proxy *countingProxy
}

// memoryPoint starts the three fresh, waits until each has synced, and
// samples their resident sets. When rest is set they keep running in the
// background for the rest window, and restDone is closed when it is over.
func (b *bench) memoryPoint(ctx context.Context, w *world, cond string, rest bool) error {
	var procs []*sideBySide
	stopAll := func() {
		for _, s := range procs {
			s.proc.stop()
			s.proxy.close()
		}
	}
	for _, name := range []string{systemDualca, systemTrustManager, informerName} {
		proxy, err := b.newProxy(name + "-" + strings.ReplaceAll(cond, " ", "-"))
		if err != nil {
			stopAll()
			return err
		}
		p, err := b.startReference(ctx, name, w, proxy.kubeconfig)
		if err != nil {
			proxy.close()
			stopAll()
			return err
		}
		procs = append(procs, &sideBySide{name: name, proc: p, proxy: proxy})
	}
	if err := b.waitSynced(ctx, w, procs); err != nil {
		stopAll()
		return err
	}
	rss := map[string]int64{}
	for _, s := range procs {
		r, err := settledRSS(ctx, s.proc)
		if err != nil {
			stopAll()
			return err
		}
		rss[s.name] = r
	}
	b.report.memory = append(b.report.memory, memoryPoint{condition: cond, secrets: b.opts.unrelated, rss: rss})
	b.log("memory %s: dualca %s, trust-manager %s, informer %s", cond, mib(rss[systemDualca]), mib(rss[systemTrustManager]), mib(rss[informerName]))
	if !rest {
		stopAll()
		return nil
	}
	b.restDone = make(chan struct{})
	go func() {
		defer close(b.restDone)
		defer stopAll()
		b.atRest(ctx, w, procs)
	}()
	return nil
}

// informerName is the third reference.
const informerName = "informer"

// startReference starts one of the three for world w through kubeconfig.
func (b *bench) startReference(ctx context.Context, name string, w *world, kubeconfig string) (*process, error) {
	switch name {
	case systemDualca:
		// Client tracking on (no client selected). The propagation delay
		// that follows the first root ends before the rest window opens:
		// its end is a step of the rotation (the status says what comes
		// next, and is written), not rest.
		return b.startDualca(kubeconfig, w.rootFlag(), w.gatewayFlag(), "--client-selector="+clientLabel+"=agent",
			"--client-namespaces="+w.ns, "--poll-interval="+b.opts.restPoll.String(), "--trust-propagation-delay=1s")
	case systemTrustManager:
		return b.startTrustManager(ctx, w, kubeconfig)
	}
	informer, err := b.informerBinary()
	if err != nil {
		return nil, err
	}
	return startProcess(informerName, informer, "--kubeconfig="+kubeconfig, "--namespace="+w.ns)
}

// informerBinary builds test/programs/bench/informer once, into the cluster's
// temporary directory.
func (b *bench) informerBinary() (string, error) {
	path := filepath.Join(b.cluster.Dir, "informer")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	cmd := exec.Command("go", "build", "-o", path, "./bench/informer")
	cmd.Dir = filepath.Join(b.root, "test", "programs")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the informer: %w\n%s", err, out)
	}
	return path, nil
}

// waitSynced waits until dualca is ready, trust-manager's target carries the
// root and the informer says ready.
func (b *bench) waitSynced(ctx context.Context, w *world, procs []*sideBySide) error {
	target, err := w.watchSecret(ctx, bundleName(w))
	if err != nil {
		return err
	}
	certs, err := bundle.ParseCertificates("ca.crt", w.root.Data["ca.crt"])
	if err != nil {
		return err
	}
	rootFP := bundle.Fingerprint(certs[0])
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		all := true
		for _, s := range procs {
			if err := s.proc.alive(); err != nil {
				return false, err
			}
			switch s.name {
			case systemDualca:
				all = all && s.proc.ready(ctx)
			case systemTrustManager:
				vs := target.since(0)
				all = all && len(vs) > 0 && vs[len(vs)-1].trusts[rootFP]
			default:
				all = all && strings.Contains(s.proc.log.String(), "ready")
			}
		}
		return all, nil
	})
}

// atRest counts each process's requests over the rest window.
func (b *bench) atRest(ctx context.Context, w *world, procs []*sideBySide) {
	began := time.Now()
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		b.log("at rest: %v", err)
		return
	}
	target, err := w.watchSecret(ctx, bundleName(w))
	if err != nil {
		b.log("at rest: %v", err)
		return
	}
	gwMark, targetMark := gw.mark(), target.mark()
	select {
	case <-time.After(b.opts.rest):
	case <-ctx.Done():
		return
	}
	res := restResult{window: time.Since(began), poll: b.opts.restPoll, requests: map[string][]timedRequest{}, alive: map[string]error{},
		versions: map[string]int{systemDualca: gw.mark() - gwMark, systemTrustManager: target.mark() - targetMark}}
	for _, s := range procs {
		res.requests[s.name] = s.proxy.since(began)
		res.alive[s.name] = s.proc.alive()
	}
	b.report.rest = &res
	b.log("at rest over %s: dualca %d requests, trust-manager %d, informer %d", res.window.Round(time.Second),
		len(res.requests[systemDualca]), len(res.requests[systemTrustManager]), len(res.requests[informerName]))
}

// restResult is the rest window.
type restResult struct {
	window, poll time.Duration
	requests     map[string][]timedRequest
	// versions counts the new versions of dualca's gateway Secret and of
	// trust-manager's target in the window.
	versions map[string]int
	alive    map[string]error
}

// createUnrelated creates n Secrets of unrelatedSize spread evenly over
// namespaces, sixteen at a time.
func (b *bench) createUnrelated(ctx context.Context, namespaces []string, n int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			data := make([]byte, unrelatedSize)
			_, _ = rand.Read(data)
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: map[string]string{unrelatedLabel: "true"}},
				Data: map[string][]byte{"blob": data}}
			_, err := b.cs.CoreV1().Secrets(namespaces[i%len(namespaces)]).Create(ctx, s, metav1.CreateOptions{})
			return err
		})
	}
	return g.Wait()
}

// unselectedName is the name of the i-th Certificate of no selected client,
// and of its Secret.
func unselectedName(i int) string { return fmt.Sprintf("other-%05d", i) }

// createUnselected creates n Certificates another team could have beside
// the clients, in a client namespace, issued by cert-manager (their
// requests and Secrets), whose label value the client selector does not
// match: objects of exactly the kinds dualca caches there, none of which it
// may cache.
func (b *bench) createUnselected(ctx context.Context, ns string, root *certs.CA, n int) error {
	return b.createIssued(ctx, ns, root, 0, n, unselectedName, map[string]string{clientLabel: "other"})
}

// memoryPoint is the three resident sets in one condition.
type memoryPoint struct {
	condition string
	secrets   int
	rss       map[string]int64 // median, bytes
}

// settledRSS waits 5 s for start-up garbage to go, then samples the
// process's resident set every 250 ms and returns the median.
func settledRSS(ctx context.Context, p *process) (int64, error) {
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	var samples []int64
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if err := p.alive(); err != nil {
			return false, err
		}
		r, err := p.rss()
		if err != nil {
			return false, err
		}
		samples = append(samples, r)
		return len(samples) >= memorySamples, nil
	})
	if err != nil {
		return 0, err
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

// memorySamples are taken 250 ms apart.
const memorySamples = 20

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
