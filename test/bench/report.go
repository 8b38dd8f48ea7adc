package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// report is everything measured, written as docs/benchmarks.md.
type report struct {
	started time.Time
	took    time.Duration
	machine []string // "key: value" lines

	// propagation: the new root's watch event → the gateway's naming it,
	// as any watcher receives them; fromWrite: from sending the root's
	// write, which adds that write itself.
	propagation     [][]time.Duration
	fromWrite       [][]time.Duration
	dualcaHistogram string

	poll         [][]time.Duration
	pollInterval time.Duration

	startupRequests     map[string]int
	restRequests        map[string]int
	restIntervals       int
	restGatewayVersions int

	memory []memoryPoint

	fanout fanoutResult

	bundleCommand string
	bundle        []benchResult
}

// describeMachine records what the figures were measured on.
func (r *report) describeMachine(root string) error {
	line := func(k, v string) { r.machine = append(r.machine, fmt.Sprintf("| %s | %s |", k, v)) }
	line("date", r.started.UTC().Format("2006-01-02 15:04 MST"))
	line("CPU", fmt.Sprintf("%s, %d cores visible to Go", cpuModel(), runtime.NumCPU()))
	line("memory", firstLineWith("/proc/meminfo", "MemTotal:"))
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		line("kernel", "Linux "+strings.TrimSpace(string(b)))
	}
	line("Go", runtime.Version())
	line("kube-apiserver", commandLine(filepath.Join(root, "bin", "kube-apiserver"), "--version"))
	line("etcd", commandLine(filepath.Join(root, "bin", "etcd"), "--version"))
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range info.Deps {
			switch m.Path {
			case "sigs.k8s.io/controller-runtime", "k8s.io/client-go", "github.com/cert-manager/cert-manager":
				line(m.Path, m.Version)
			}
		}
	}
	commit := commandLineIn(root, "git", "rev-parse", "--short", "HEAD")
	if commandLineIn(root, "git", "status", "--porcelain", "--untracked-files=no") != "" {
		commit += " (with uncommitted changes)"
	}
	line("dualca", commit)
	return nil
}

func cpuModel() string {
	if m := firstLineWith("/proc/cpuinfo", "model name"); m != "" {
		if _, v, ok := strings.Cut(m, ":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func firstLineWith(path, prefix string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), prefix) {
			return strings.Join(strings.Fields(s.Text()), " ")
		}
	}
	return ""
}

func commandLine(path string, args ...string) string { return commandLineIn("", path, args...) }

func commandLineIn(dir, path string, args ...string) string {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return first
}

// write renders the report as Markdown.
func (r *report) write(w io.Writer, plot string) error {
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format+"\n", args...)
		}
	}
	p("# Benchmarks")
	p("")
	p("Written by `make bench` (`go run ./test/bench`), which took %s. Every figure comes from a real", r.took.Round(time.Second))
	p("kube-apiserver and etcd started on this machine (envtest, built from Go modules by `make control-plane`)")
	p("and the `bin/dualca` binary, unless a section says otherwise. Nothing here runs in `make test`.")
	p("")
	p("| | |")
	p("|---|---|")
	for _, l := range r.machine {
		p("%s", l)
	}
	p("")
	r.writeTargets(p)
	if plot != "" {
		p("")
		p("![propagation latency and memory](%s)", plot)
	}
	r.writePropagation(p)
	r.writePoll(p)
	r.writeRest(p)
	r.writeMemory(p)
	r.writeFanout(p)
	r.writeBundle(p)
	return err
}

func (r *report) writeTargets(p func(string, ...any)) {
	p("## Against the targets of PRODUCT.md")
	p("")
	p("| target | measured | |")
	p("|---|---|---|")
	if len(r.propagation) > 0 {
		d := distributionOf(pooled(r.propagation))
		p("| propagation p99 under 20 ms | p99 %s over %d rotations (p50 %s, max %s) | %s |", ms(d.p99), d.n, ms(d.p50), ms(d.max), verdict(d.p99 < 20*time.Millisecond))
	}
	if len(r.poll) > 0 {
		d := distributionOf(pooled(r.poll))
		limit := r.pollInterval + r.pollInterval/10
		p("| a missed change caught up within one poll interval | max %s for a %s interval (jitter up to +10 %%) | %s |", ms(d.max), r.pollInterval, verdict(d.max <= limit+100*time.Millisecond))
	}
	if r.restIntervals > 0 {
		reads, writes, watches := r.restTotals()
		p("| at rest: one watch and one read per poll interval, zero writes | %.1f reads and %d writes per interval, %d watch requests in %d intervals; %d gateway versions | %s |",
			float64(reads)/float64(r.restIntervals), writes, watches, r.restIntervals, r.restGatewayVersions,
			verdictNote(writes == 0 && r.restGatewayVersions == 0, "zero writes: met; reads: 2, see below"))
	}
	if len(r.memory) > 0 {
		growth, ratio := r.memoryFigures()
		p("| memory with 10,000 unrelated Secrets within 5 %% of none | %+.1f %% (baseline informer: %.1f× dualca's) | %s |", growth, ratio, verdict(growth < 5))
	}
	if f := r.fanout; f.clients > 0 {
		over := (f.total.Seconds()/f.ideal.Seconds() - 1) * 100
		p("| fan-out within 10 %% of the ideal time | %d Certificates in %s at %g/s, ideal %s (%+.1f %%) | %s |", f.clients, f.total.Round(time.Millisecond), f.qps, f.ideal, over, verdict(over <= 10 && over >= -10))
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func verdictNote(ok bool, note string) string {
	if ok {
		return note
	}
	return "**missed**"
}

func (r *report) writePropagation(p func(string, ...any)) {
	if len(r.propagation) == 0 {
		return
	}
	p("")
	p("## Propagation: root change → gateway Secret written")
	p("")
	p("dualca runs as its binary with `--trust-propagation-delay=20ms` and a client selector that matches")
	p("nothing, so every rotation also completes (server switch, old root retired) before the next one and the")
	p("bundle holds one or two roots, as in production. The benchmark watches the root and the gateway Secret")
	p("as dualca and a gateway do. Each sample runs from the watch event of the new root to the watch event of")
	p("a gateway Secret naming it: the delivery to dualca, its reads, decision (a new server leaf and key")
	p("included) and write, and the delivery of the result, the floor PRODUCT.md describes. Rotations are %d", len(r.propagation[0]))
	p("per run, at random pauses of 0–20 ms after the previous rotation completed.")
	p("")
	p("| | p50 | p90 | p99 | max |")
	p("|---|---|---|---|---|")
	for i, run := range r.propagation {
		d := distributionOf(run)
		p("| run %d (%d rotations) | %s | %s | %s | %s |", i+1, d.n, ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max))
	}
	d := distributionOf(pooled(r.propagation))
	p("| **all %d** | **%s** | **%s** | **%s** | **%s** |", d.n, ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max))
	p("| median of the runs (min – max) | %s | %s | %s | %s |",
		spread(perRun(r.propagation, func(d distribution) time.Duration { return d.p50 }), msf),
		spread(perRun(r.propagation, func(d distribution) time.Duration { return d.p90 }), msf),
		spread(perRun(r.propagation, func(d distribution) time.Duration { return d.p99 }), msf),
		spread(perRun(r.propagation, func(d distribution) time.Duration { return d.max }), msf))
	if len(r.fromWrite) > 0 {
		d := distributionOf(pooled(r.fromWrite))
		p("")
		p("From the moment the root's update is sent instead (its own PUT added): p50 %s, p90 %s, p99 %s, max %s over %d rotations.",
			ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max), d.n)
	}
	p("")
	p("dualca's own `dualca_propagation_seconds` histogram (from seeing the root to writing the gateway) in the last run: %s.", r.dualcaHistogram)
}

func (r *report) writePoll(p func(string, ...any)) {
	if len(r.poll) == 0 {
		return
	}
	p("")
	p("## The poll alone")
	p("")
	p("dualca runs in the benchmark's process with its watches disabled (`syncer.Options.DisableWatches`, a test")
	p("knob) and `--poll-interval=%s`, so only the poll sees a change. Each root change lands at a random", r.pollInterval)
	p("moment of the interval; the sample is the time until the gateway Secret names the new root.")
	p("")
	p("| | n | p50 | p90 | max | max / interval |")
	p("|---|---|---|---|---|---|")
	for i, run := range r.poll {
		d := distributionOf(run)
		p("| run %d | %d | %s | %s | %s | %.2f |", i+1, d.n, ms(d.p50), ms(d.p90), ms(d.max), d.max.Seconds()/r.pollInterval.Seconds())
	}
	d := distributionOf(pooled(r.poll))
	p("| **all** | %d | %s | %s | %s | %.2f |", d.n, ms(d.p50), ms(d.p90), ms(d.max), d.max.Seconds()/r.pollInterval.Seconds())
	p("")
	p("The poll is jittered by up to +10 %%, so the bound is 1.1 intervals; the median sits near half an interval, as it should for changes at random moments.")
}

// restTotals sums the at-rest requests: reads (GET, LIST), writes (the
// rest but WATCH), watch requests.
func (r *report) restTotals() (reads, writes, watches int) {
	for k, n := range r.restRequests {
		verb, _, _ := strings.Cut(k, " ")
		switch verb {
		case "GET", "LIST":
			reads += n
		case "WATCH":
			watches += n
		default:
			writes += n
		}
	}
	return reads, writes, watches
}

func (r *report) writeRest(p func(string, ...any)) {
	if r.restIntervals == 0 {
		return
	}
	p("")
	p("## API cost at rest")
	p("")
	p("dualca in the benchmark's process, every request counted by a wrapping transport, with client tracking on")
	p("and `--poll-interval=%s`. After start-up and one quiet interval, %d intervals are counted:", r.pollInterval, r.restIntervals)
	p("")
	p("| request | count | per interval |")
	p("|---|---|---|")
	keys := slices.Sorted(mapsKeys(r.restRequests))
	for _, k := range keys {
		p("| `%s` | %d | %.1f |", k, r.restRequests[k], float64(r.restRequests[k])/float64(r.restIntervals))
	}
	if len(keys) == 0 {
		p("| (none) | 0 | 0 |")
	}
	p("")
	p("Start-up, for comparison (one time): %s.", formatCounts(r.startupRequests))
	p("")
	p("Zero writes, and the gateway Secret had %d new versions. The poll reads the root and the gateway Secret,", r.restGatewayVersions)
	p("both uncached as PRODUCT.md's *Watching and writing* asks (a stalled watch of either must not leave the")
	p("gateway behind), which is two reads per interval where the target counts one: there is no request that")
	p("reads two Secrets by name at once. The watches (root, gateway, client Certificates, client Secrets) are")
	p("long-lived: none was reopened in the window; client-go's reflectors re-open each one after a random 5–10")
	p("minutes, which is at most one watch request per informer per default poll interval.")
}

func mapsKeys(m map[string]int) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// memoryFigures are dualca's growth from the fewest to the most Secrets,
// in percent, and the baseline's size over dualca's with the most, from
// the medians over the runs.
func (r *report) memoryFigures() (growth, ratio float64) {
	lo, hi := slices.Min(r.opts()), slices.Max(r.opts())
	dLo, _ := r.memoryMedian(lo)
	dHi, bHi := r.memoryMedian(hi)
	return (dHi/dLo - 1) * 100, bHi / dHi
}

func (r *report) opts() []int {
	var levels []int
	for _, m := range r.memory {
		if !slices.Contains(levels, m.secrets) {
			levels = append(levels, m.secrets)
		}
	}
	return levels
}

func (r *report) memoryMedian(secrets int) (dualca, baseline float64) {
	var ds, bs []float64
	for _, m := range r.memory {
		if m.secrets == secrets {
			ds, bs = append(ds, float64(m.dualca)), append(bs, float64(m.baseline))
		}
	}
	slices.Sort(ds)
	slices.Sort(bs)
	return ds[len(ds)/2], bs[len(bs)/2]
}

func (r *report) memoryValues(secrets int) (ds, bs []float64) {
	for _, m := range r.memory {
		if m.secrets == secrets {
			ds, bs = append(ds, float64(m.dualca)), append(bs, float64(m.baseline))
		}
	}
	return ds, bs
}

func (r *report) heapValues(secrets int) (ds, bs []float64) {
	for _, m := range r.memory {
		if m.secrets == secrets {
			ds, bs = append(ds, float64(m.dualcaHeap)), append(bs, float64(m.baselineHeap))
		}
	}
	return ds, bs
}

func (r *report) writeMemory(p func(string, ...any)) {
	if len(r.memory) == 0 {
		return
	}
	p("")
	p("## Memory beside unrelated Secrets")
	p("")
	p("For each count, unrelated Secrets of %d KiB are created in the root's namespace, then the `bin/dualca`", unrelatedSize>>10)
	p("binary (client tracking on, in that namespace too) and the baseline start fresh, side by side. The")
	p("baseline is what following the root through a controller-runtime manager's cached client does: an")
	p("informer on every Secret of the namespace. Once both are in sync, their resident set (VmRSS) is sampled")
	p("%d times over 5 s after a 5 s settling time, with the Go heap in use from each one's metrics endpoint;", memorySamples)
	p("the medians are kept. Each cell: median of the runs (min – max).")
	p("")
	p("| unrelated Secrets | dualca RSS | baseline RSS (all Secrets cached) | baseline / dualca | dualca heap in use | baseline heap in use |")
	p("|---|---|---|---|---|---|")
	for _, n := range r.opts() {
		ds, bs := r.memoryValues(n)
		dh, bh := r.heapValues(n)
		dm, bm := r.memoryMedian(n)
		p("| %d | %s | %s | %.1f× | %s | %s |", n, spread(ds, mibf), spread(bs, mibf), bm/dm, spread(dh, mibf), spread(bh, mibf))
	}
	growth, ratio := r.memoryFigures()
	p("")
	p("dualca's resident set changes by %+.1f %% from the fewest to the most Secrets; the baseline needs %.1f× as much as dualca with the most.", growth, ratio)
}

func (r *report) writeFanout(p func(string, ...any)) {
	f := r.fanout
	if f.clients == 0 {
		return
	}
	p("")
	p("## Renewal fan-out")
	p("")
	p("%d client Certificates and their Secrets (leaf and `ca.crt` from the old root, as cert-manager writes", f.clients)
	p("them) are selected; no cert-manager runs, so what is measured is dualca's trigger path: each")
	p("Certificate's `Issuing` condition set to True. The root rotates; the benchmark watches the Certificates.")
	p("dualca runs as its binary with `--renewal-qps=%g --renewal-burst=%d --trust-propagation-delay=100ms`.", f.qps, f.burst)
	p("")
	p("| | |")
	p("|---|---|")
	p("| root write → first trigger | %s (the propagation delay, then the first reconcile) |", f.toFirst.Round(time.Millisecond))
	p("| first → last trigger | **%s** |", f.total.Round(time.Millisecond))
	p("| ideal, clients / rate | %s (%s once the burst of %d is spent) |", f.ideal, time.Duration(float64(f.clients-f.burst)/f.qps*float64(time.Second)), f.burst)
	p("| over the ideal | %+.1f %% |", (f.total.Seconds()/f.ideal.Seconds()-1)*100)
	p("| API server, all requests, peak 1 s window | %.0f requests/s |", f.peakRate)
	p("| API server, all requests, mean over the fan-out | %.0f requests/s |", f.meanRate)
	p("")
	p("The API server's figures count every request it served (`apiserver_request_total`), the benchmark's")
	p("watch included. dualca's own counters after the run:")
	p("")
	p("```")
	for _, l := range f.renewals {
		p("%s", l)
	}
	p("```")
}

func (r *report) writeBundle(p func(string, ...any)) {
	if len(r.bundle) == 0 {
		return
	}
	p("")
	p("## Bundle operations")
	p("")
	p("`%s`: the pure work of a reconcile, median of 5 runs (min – max of ns/op).", r.bundleCommand)
	p("")
	p("| benchmark | time/op | min – max | B/op | allocs/op |")
	p("|---|---|---|---|---|")
	for _, b := range r.bundle {
		p("| %s | %s | %s – %s | %.0f | %.0f |", b.name, nsf(b.nsPerOp), nsf(b.minNs), nsf(b.maxNs), b.bytesPerOp, b.allocsPerOp)
	}
	p("")
	p("`Plan/new-root` is the decision on the propagation path (it issues a server leaf with a fresh key);")
	p("`Plan/at-rest` is what every poll and every client event costs.")
}

func nsf(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}
