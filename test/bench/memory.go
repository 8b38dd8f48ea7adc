package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dualca/dualca/test/controlplane"
)

// unrelatedSize is the data of each unrelated Secret.
const unrelatedSize = 8 << 10

// memory starts dualca and the baseline side by side, fresh, beside 0,
// 1,000 and 10,000 unrelated Secrets in the root's namespace, and compares
// their resident sets once both are in sync. dualca runs with client
// tracking on in that namespace too: the unrelated Secrets carry no
// cert-manager label, so its client cache must not hold them either.
func (b *bench) memory(ctx context.Context) error {
	for run := range b.opts.runs {
		root, err := newRoot("memory-root")
		if err != nil {
			return err
		}
		// Watched too, like the others; the benchmark's own two watches
		// are in neither process measured.
		w, err := b.newWorld(ctx, fmt.Sprintf("memory-%d", run), root)
		if err != nil {
			return err
		}
		created := 0
		for _, n := range b.opts.secrets {
			if err := b.createUnrelated(ctx, w.ns, created, n); err != nil {
				return err
			}
			created = max(created, n)
			m, err := b.memoryPoint(ctx, w)
			if err != nil {
				return err
			}
			m.secrets, m.run = n, run
			b.report.memory = append(b.report.memory, m)
			b.log("memory run %d with %d secrets: dualca %s, baseline %s", run+1, n, mib(m.dualca), mib(m.baseline))
		}
	}
	return nil
}

// memoryPoint measures both processes, started fresh against the namespace
// as it is.
func (b *bench) memoryPoint(ctx context.Context, w *world) (memoryPoint, error) {
	self, err := os.Executable()
	if err != nil {
		return memoryPoint{}, err
	}
	metrics, err := controlplane.FreeAddress()
	if err != nil {
		return memoryPoint{}, err
	}
	base, err := startProcess("baseline", self, baselineCommand, "--kubeconfig="+b.cluster.Kubeconfig, "--namespace="+w.ns,
		"--metrics-bind-address="+metrics)
	if err != nil {
		return memoryPoint{}, err
	}
	base.metrics = metrics
	defer base.stop()
	d, err := b.startDualca(w.rootFlag(), w.gatewayFlag(), "--client-selector=bench.dualca.io/client=agent")
	if err != nil {
		return memoryPoint{}, err
	}
	defer d.stop()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := errors.Join(base.alive(), d.alive()); err != nil {
			return false, err
		}
		m, err := d.scrape(ctx)
		synced := err == nil && strings.Contains(m, "\ndualca_root_valid 1\n") && strings.Contains(m, `dualca_phase{phase="Steady"} 1`)
		return synced && strings.Contains(base.log.String(), "ready"), nil
	})
	if err != nil {
		return memoryPoint{}, fmt.Errorf("waiting for dualca and the baseline to sync: %w", err)
	}
	rss, heap, err := settledMemory(ctx, d, base)
	if err != nil {
		return memoryPoint{}, err
	}
	return memoryPoint{dualca: rss[0], baseline: rss[1], dualcaHeap: heap[0], baselineHeap: heap[1]}, nil
}

// createUnrelated creates Secrets from..to-1 in ns, eight at a time.
func (b *bench) createUnrelated(ctx context.Context, ns string, from, to int) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := from; i < to; i++ {
		g.Go(func() error {
			data := make([]byte, unrelatedSize)
			_, _ = rand.Read(data)
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i)}, Data: map[string][]byte{"blob": data}}
			_, err := b.cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
			return err
		})
	}
	return g.Wait()
}

// memoryPoint is one side-by-side measurement.
type memoryPoint struct {
	run, secrets     int
	dualca, baseline int64 // median resident set, bytes
	// dualcaHeap and baselineHeap are the median heap in use (the Go
	// runtime's go_memstats_heap_inuse_bytes), which the runtime's lazy
	// return of memory to the kernel does not blur.
	dualcaHeap, baselineHeap int64
}

// settledMemory samples the processes' resident set and heap in use for a
// while and returns the medians.
func settledMemory(ctx context.Context, ps ...*process) (rss, heap []int64, err error) {
	// Start-up garbage is collected within a few seconds.
	select {
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	rssSamples, heapSamples := make([][]int64, len(ps)), make([][]int64, len(ps))
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for i, p := range ps {
			if err := p.alive(); err != nil {
				return false, err
			}
			r, err := p.rss()
			if err != nil {
				return false, err
			}
			m, err := p.scrape(ctx)
			if err != nil {
				return false, err
			}
			h, err := gauge(m, "go_memstats_heap_inuse_bytes")
			if err != nil {
				return false, err
			}
			rssSamples[i], heapSamples[i] = append(rssSamples[i], r), append(heapSamples[i], int64(h))
		}
		return len(rssSamples[0]) >= memorySamples, nil
	})
	if err != nil {
		return nil, nil, err
	}
	return medians(rssSamples), medians(heapSamples), nil
}

// memorySamples are taken 250 ms apart.
const memorySamples = 20

func medians(samples [][]int64) []int64 {
	out := make([]int64, len(samples))
	for i, s := range samples {
		slices.Sort(s)
		out[i] = s[len(s)/2]
	}
	return out
}

// gauge reads an unlabelled sample from a scrape.
func gauge(scrape, name string) (float64, error) {
	for line := range strings.SplitSeq(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s in the scrape", name)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
