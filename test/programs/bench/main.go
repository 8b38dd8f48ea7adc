// Command bench measures dualca against its performance targets, side by
// side with what a user would install instead (cert-manager trust-manager)
// and with the floor (a trivial copier), on one real kube-apiserver and etcd
// in one run, and writes docs/benchmarks.md with its plots. Run it with
// `make bench` (about 30 minutes), or `make bench QUICK=1` for a reduced run
// of a few minutes whose report says it is not the final one.
//
// It measures:
//   - propagation: from the root's update acknowledged to the watch event of
//     each system's target Secret carrying it, over hundreds of same-subject
//     rotations at random moments, overlapping ones included, in three runs
//     each judged on its own;
//   - how the cost grows with the roots piled up in dualca's bundle;
//   - one client on the old root handshaking through a TLS gateway that
//     reads each system's target, across a whole rotation;
//   - start-up: process start to the gateway in sync, and to ready;
//   - memory side by side (dualca, trust-manager, a namespace informer),
//     beside 10,000 unrelated Secrets in one namespace and over 100, and
//     their requests at rest over a long window;
//   - the poll alone (watches disabled): how long a missed change waits;
//   - how the cost grows with selected clients (1,000 to 50,000);
//   - the renewal fan-out with the real cert-manager doing the re-issues;
//   - the bundle package's micro-benchmarks.
//
// A final run (neither -quick nor -only) fails before measuring when the
// tree differs from HEAD, untracked files included, or the dualca binary
// was built from another revision; every report records the commit, the
// machine's load over each step, and writes the raw samples next to it.
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

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/controlplane"
)

// options are the benchmark's flags; the defaults are what `make bench`
// reports, -quick makes each measurement small.
type options struct {
	dualca, out, plot string
	quick             bool
	only              string
	// profiles, with only, is where dualca's profiles are written (see
	// bench.profile); "" writes none.
	profiles string

	rotations       int           // propagation, per system and run: at least 200, so that p99 is a percentile, not the max
	propagationRuns int           // propagation runs, each judged: at least 3
	starts          int           // start-up, per client count
	startupClients  int           // the second start-up client count
	unrelated       int           // unrelated Secrets, per memory condition
	rest            time.Duration // the at-rest window
	restPoll        time.Duration // dualca's --poll-interval in it
	runs            int           // poll-only runs
	polls           int           // missed changes per poll-only run
	poll            time.Duration // --poll-interval of the poll-only and scale runs
	scale           intList       // selected clients of the scale runs
	touches         int           // reconciles at rest per scale point
	fanout          int           // clients re-issued by cert-manager
	fanoutRuns      int
	floorRuns       int     // of the cert-manager fan-out's floor
	qps             float64 // --renewal-qps with cert-manager
}

type bench struct {
	root      string // the repository
	opts      options
	dualca    string
	cluster   *cluster.Cluster
	cs        kubernetes.Interface
	report    report
	log       func(format string, args ...any)
	trustCRDs bool
	// restDone is closed when the at-rest window is over.
	restDone chan struct{}
}

func main() {
	if err := controlplane.ChdirRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && subcommand(os.Args[1], os.Args[2:]) {
		return
	}
	var o options
	flag.StringVar(&o.dualca, "dualca", "bin/dualca", "the dualca binary to measure")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "where to write the report")
	flag.StringVar(&o.plot, "plot", "docs/benchmarks.png", "where to write the plot")
	flag.BoolVar(&o.quick, "quick", false, "a reduced run of a few minutes; its report says it is not final")
	flag.StringVar(&o.only, "only", "", "run one measurement only ("+strings.Join(stepNames(), ", ")+"); the report is printed, not written")
	var scale intList
	flag.Var(&scale, "scale", "with -only scale: the client counts to measure instead of the run's (comma-separated)")
	fanout := flag.Int("fanout", 0, "with -only cert-manager: the clients cert-manager re-issues instead of the run's")
	flag.StringVar(&o.profiles, "profiles", "", "with -only scale or propagation: write the measured dualca's profiles into this directory: "+
		"a heap profile at rest and one after the fan-out of each scale point, a CPU profile of each propagation run")
	flag.Parse()
	if o.profiles != "" && o.only != "scale" && o.only != "propagation" {
		// A profiled process is not the one a report measures.
		fmt.Fprintln(os.Stderr, "bench: -profiles is for -only scale or -only propagation")
		os.Exit(2)
	}
	o.defaults()
	if *fanout > 0 {
		if o.only != "cert-manager" {
			fmt.Fprintln(os.Stderr, "bench: -fanout is for -only cert-manager")
			os.Exit(2)
		}
		o.fanout = *fanout
	}
	if len(scale) > 0 {
		if o.only != "scale" {
			fmt.Fprintln(os.Stderr, "bench: -scale is for -only scale: a report's scale curve has the run's own sizes")
			os.Exit(2)
		}
		o.scale = scale
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

// subcommand runs the benchmark binary as the copier when name says so,
// and reports whether it did.
func subcommand(name string, args []string) bool {
	var err error
	switch name {
	case copierCommand:
		err = runCopier(args)
	default:
		return false
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	return true
}

// chartClaim is the largest client count the chart's README claims
// (test/lib/sizing): the scale point of that size runs dualca in a memory
// cgroup of the chart's limit for it. 10,000 is not claimed: its renewal
// fan-out did not complete on this machine when the chart's table was
// measured (8,908 of 10,000 triggered in 3m20s).
const chartClaim = 5000

// defaults are the full run's sizes, or the quick run's.
func (o *options) defaults() {
	*o = options{dualca: o.dualca, out: o.out, plot: o.plot, quick: o.quick, only: o.only, profiles: o.profiles,
		rotations: 200, propagationRuns: 3, starts: 20, startupClients: 1000,
		unrelated: 10000, rest: 10 * time.Minute, restPoll: time.Minute, runs: 3, polls: 15, poll: 2 * time.Second,
		scale: intList{1000, chartClaim, 10000, 50000}, touches: 20, fanout: 2000, fanoutRuns: 3, floorRuns: 1, qps: 100}
	if o.quick {
		o.rotations, o.starts, o.startupClients = 40, 5, 200
		o.unrelated, o.rest, o.restPoll, o.runs, o.polls = 1000, time.Minute, 10*time.Second, 1, 5
		o.scale, o.touches, o.fanout, o.fanoutRuns, o.floorRuns = intList{200, 1000}, 10, 200, 1, 1
	}
}

// step is one measurement.
type step struct {
	name string
	run  func(*bench, context.Context) error
}

// steps run in this order. The at-rest window that memory opens runs on in
// the background while poll and scale run in namespaces of their own; the
// report waits for it.
var steps = []step{
	{"bundle", (*bench).bundleBenchmarks},
	// First on the API server: cert-manager, once started, works on every
	// Certificate it finds, and the later steps create tens of thousands
	// that no issuer exists for.
	{"cert-manager", (*bench).certManagerFanOut},
	{"propagation", (*bench).propagation},
	{"roots", (*bench).roots},
	{"handshakes", (*bench).handshakes},
	{"startup", (*bench).startup},
	{"memory", (*bench).memory},
	{"poll", (*bench).pollOnly},
	{"scale", (*bench).scale},
}

func stepNames() []string {
	var names []string
	for _, s := range steps {
		names = append(names, s.name)
	}
	return names
}

func run(ctx context.Context, o options) error {
	// Libraries that log through controller-runtime (envtest installing
	// CRDs) say nothing the report needs.
	logf.SetLogger(logr.Discard())
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	b := &bench{root: root, opts: o, dualca: o.dualca, log: func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench %s: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}}
	if !filepath.IsAbs(b.dualca) {
		b.dualca = filepath.Join(root, b.dualca)
	}
	for _, tool := range []string{b.dualca, b.tool("trust-manager")} {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("%w (make build trust-manager)", err)
		}
	}
	// What is measured is recorded before anything is: a final report
	// stands for a commit, so the tree must be that commit and the binary
	// built from it.
	prov, err := readProvenance(root, b.dualca)
	if err != nil {
		return err
	}
	if err := prov.check(!o.quick && o.only == ""); err != nil {
		return err
	}
	if prov.dirty() {
		b.log("the tree differs from HEAD %s in %d paths: this report is not final", prov.short, len(prov.changed))
	}
	b.report.started = time.Now()
	b.report.quick, b.report.only = o.quick, o.only
	b.report.describe(root, prov)
	if o.only != "bundle" {
		b.log("starting kube-apiserver and etcd")
		// cert-manager's waits are long: it issues thousands on two cores.
		c, err := cluster.Start(ctx, cluster.Options{WithoutCertManager: true, NoSignalHandler: true, Timeout: 5 * time.Minute})
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
	// Cancelled before the control plane stops (deferred calls run last
	// first): the watches the steps leave open end with the run instead of
	// retrying, and logging, against a stopped API server.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, s := range steps {
		if o.only != "" && o.only != s.name {
			continue
		}
		began := time.Now()
		load := readLoad()
		b.log("measuring %s", s.name)
		err := s.run(b, ctx)
		b.report.load = append(b.report.load, stepLoad{step: s.name, span: spanSince(load)})
		if err != nil {
			// The other measurements still run; the report says what failed.
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			b.log("%s FAILED after %s: %v", s.name, time.Since(began).Round(time.Second), err)
			b.report.failed = append(b.report.failed, stepFailure{step: s.name, err: err.Error()})
			continue
		}
		b.log("%s done in %s", s.name, time.Since(began).Round(time.Second))
	}
	if b.restDone != nil {
		b.log("waiting for the end of the at-rest window")
		select {
		case <-b.restDone:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b.report.took = time.Since(b.report.started)
	b.report.provenance.recheck(root)
	if o.only != "" {
		return b.report.write(os.Stdout, "", "")
	}
	plot, out := inRepo(root, o.plot), inRepo(root, o.out)
	if err := b.report.plot(plot); err != nil {
		return err
	}
	raw := rawDir(out)
	if err := b.report.writeRaw(raw); err != nil {
		return err
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := b.report.write(f, filepath.Base(plot), relativeTo(filepath.Dir(out), raw)); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b.log("wrote %s, %s and the raw samples in %s", o.out, o.plot, relativeTo(root, raw))
	return nil
}

// inRepo is path, relative to the repository unless absolute.
func inRepo(root, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(root, path)
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
