// Command bench measures dualca against the performance targets of
// PRODUCT.md on a real kube-apiserver and etcd, and writes the figures to
// docs/benchmarks.md with a plot beside it. Run it with `make bench`.
//
// It measures, each over repeated runs:
//   - propagation: a root change until the gateway Secret holds it, over
//     hundreds of rotations, watched from outside dualca;
//   - the poll alone (watches disabled): how long a missed change waits;
//   - memory: dualca's resident set with 0, 1,000 and 10,000 unrelated
//     Secrets beside the root, next to a baseline that caches every Secret
//     of the namespace as a plain informer would;
//   - API cost at rest: requests per poll interval when nothing changes;
//   - renewal fan-out: thousands of client Certificates triggered at the
//     configured rate, against the ideal time, with the API server's own
//     count of the requests it served;
//   - the bundle operations, with go test -bench.
//
// It never prints key or certificate bytes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dualca/dualca/test/cluster"
	"github.com/dualca/dualca/test/controlplane"
)

// options are the benchmark's flags; the defaults are what `make bench`
// reports.
type options struct {
	dualca    string
	out       string
	plot      string
	runs      int
	rotations int
	polls     int
	poll      time.Duration
	secrets   []int
	fanout    int
	qps       float64
	burst     int
	only      string
}

type bench struct {
	opts    options
	dualca  string
	cluster *cluster.Cluster
	cs      kubernetes.Interface
	report  report
	log     func(format string, args ...any)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == baselineCommand {
		if err := runBaseline(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "baseline:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	secrets := intList{0, 1000, 10000}
	flag.StringVar(&o.dualca, "dualca", "bin/dualca", "the dualca binary to measure")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "where to write the report")
	flag.StringVar(&o.plot, "plot", "docs/benchmarks.png", "where to write the plot")
	flag.IntVar(&o.runs, "runs", 3, "repetitions of each measurement")
	flag.IntVar(&o.rotations, "rotations", 70, "root rotations per propagation run (each waits for the previous to complete, about 2 s)")
	flag.IntVar(&o.polls, "polls", 15, "missed changes per poll-only run")
	flag.DurationVar(&o.poll, "poll-interval", 2*time.Second, "dualca's --poll-interval in the poll-only and at-rest runs")
	flag.Var(&secrets, "secrets", "numbers of unrelated Secrets for the memory runs, comma-separated")
	flag.IntVar(&o.fanout, "fanout", 2000, "client Certificates in the fan-out run")
	flag.Float64Var(&o.qps, "qps", 100, "dualca's --renewal-qps in the fan-out run")
	flag.IntVar(&o.burst, "burst", 10, "dualca's --renewal-burst in the fan-out run")
	flag.StringVar(&o.only, "only", "", "run one measurement only (propagation, poll, memory, rest, fanout, bundle); the report is then printed, not written")
	flag.Parse()
	o.secrets = secrets

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	b := &bench{opts: o, dualca: o.dualca, log: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}}
	if !filepath.IsAbs(b.dualca) {
		b.dualca = filepath.Join(root, b.dualca)
	}
	if _, err := os.Stat(b.dualca); err != nil {
		return fmt.Errorf("the dualca binary: %w (make build)", err)
	}
	b.report.started = time.Now()
	b.report.pollInterval = o.poll
	if err := b.report.describeMachine(root); err != nil {
		return err
	}

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"bundle", b.bundleBenchmarks},
		{"propagation", b.propagation},
		{"poll", b.pollOnly},
		{"rest", b.atRest},
		{"memory", b.memory},
		{"fanout", b.fanOut},
	}
	needCluster := false
	for _, s := range steps {
		if s.name != "bundle" && (o.only == "" || o.only == s.name) {
			needCluster = true
		}
	}
	if needCluster {
		b.log("starting kube-apiserver and etcd")
		c, err := cluster.Start(ctx, cluster.Options{WithoutCertManager: true})
		if err != nil {
			return err
		}
		defer func() { _ = c.Stop() }()
		b.cluster = c
		cfg := rest.CopyConfig(c.RESTConfig)
		cfg.QPS = -1 // the set-up creates thousands of objects
		if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
			return err
		}
	}
	for _, s := range steps {
		if o.only != "" && o.only != s.name {
			continue
		}
		began := time.Now()
		b.log("measuring %s", s.name)
		if err := s.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		b.log("%s done in %s", s.name, time.Since(began).Round(time.Second))
	}
	b.report.took = time.Since(b.report.started)
	if o.only != "" {
		return b.report.write(os.Stdout, "")
	}
	if err := b.report.plot(filepath.Join(root, o.plot)); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(root, o.out))
	if err != nil {
		return err
	}
	if err := b.report.write(f, filepath.Base(o.plot)); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b.log("wrote %s and %s", o.out, o.plot)
	return nil
}

// intList is a comma-separated list of numbers, as a flag.
type intList []int

func (l *intList) String() string {
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

func (l *intList) Set(s string) error {
	*l = nil
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a count", part)
		}
		*l = append(*l, n)
	}
	return nil
}
