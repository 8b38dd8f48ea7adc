package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/sizing"
)

// report is everything measured, written as docs/benchmarks.md. Every
// sentence it writes is built from a value measured in the run, and every
// verdict compares with exactly the target's bound; a measurement that did
// not run is said not to have run.
type report struct {
	started time.Time
	took    time.Duration
	machine []string // "| key | value |" lines
	commit  string
	quick   bool
	only    string
	// provenance is the commit and tree measured, the binary's revision;
	// load the machine's load over each step.
	provenance provenance
	load       []stepLoad

	propagation []propagationResult
	roots       []rootsPoint
	handshakes  []handshakeResult
	startup     []startupResult
	memory      []memoryPoint
	rest        *restResult
	poll        [][]time.Duration
	pollEvery   time.Duration
	scale       []scalePoint
	scaleBase   int64 // the resident set of a dualca selecting no client
	// claim is the largest size the chart's README claims and its limit;
	// claimErr why it could not be read.
	claim    sizing.Row
	claimErr string
	touches  int
	cmFanout []fanoutResult
	cmFloor  []fanoutResult // the same fan-outs triggered by a trivial loop

	bundleCommand string
	bundle        []benchResult

	// failed are the measurements that failed; what they measured before
	// failing is reported.
	failed []stepFailure
}

// stepFailure is a measurement that failed, and why.
type stepFailure struct{ step, err string }

// describe records the machine and the commit measured.
func (r *report) describe(root string, prov provenance) {
	line := func(k, v string) { r.machine = append(r.machine, fmt.Sprintf("| %s | %s |", k, v)) }
	line("date", r.started.UTC().Format("2006-01-02 15:04 MST"))
	line("CPU", fmt.Sprintf("%s, %d cores visible to Go", cpuModel(), runtime.NumCPU()))
	line("memory", firstLineWith("/proc/meminfo", "MemTotal:"))
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		line("kernel", "Linux "+strings.TrimSpace(string(b)))
	}
	line("Go", runtime.Version())
	if assets, err := controlplane.Assets(); err == nil {
		line("kube-apiserver", commandLine(filepath.Join(assets, "kube-apiserver"), "--version"))
		line("etcd", commandLine(filepath.Join(assets, "etcd"), "--version"))
	}
	line("trust-manager", "v"+strings.TrimPrefix(moduleVersion(root, "test/tools/trustmanager/go.mod", "github.com/cert-manager/trust-manager"), "v"))
	line("cert-manager", moduleVersion(root, "test/tools/certmanager/go.mod", "github.com/cert-manager/cert-manager"))
	r.provenance, r.commit = prov, prov.short
	commit := prov.commit + " (the binary's revision: " + prov.binary + ")"
	if prov.dirty() {
		commit += fmt.Sprintf(", **dirty**: %d paths differ from it, untracked files included", len(prov.changed))
	} else {
		commit += ", a clean tree"
	}
	line("dualca", commit)
	if l := readLoad(); l.readable {
		line("load average at start", fmt.Sprintf("%.2f %.2f %.2f", l.load[0], l.load[1], l.load[2]))
	}
}

// final reports whether this report may stand as the measurement of its
// commit, and if not, why.
func (r *report) final() (bool, []string) {
	var why []string
	if r.provenance.dirty() {
		why = append(why, fmt.Sprintf("the tree was dirty (%d paths differed from HEAD, untracked files included), so no commit holds what was measured", len(r.provenance.changed)))
	}
	if r.provenance.atEnd != "" {
		why = append(why, "the tree changed during the run (at the end: "+r.provenance.atEnd+")")
	}
	if r.quick {
		why = append(why, "it is a QUICK run, with reduced sizes")
	}
	if r.only != "" {
		why = append(why, "only the "+r.only+" measurement ran")
	}
	for _, f := range r.failed {
		why = append(why, "the "+f.step+" measurement failed")
	}
	return len(why) == 0, why
}

// write renders the report as Markdown; plot and raw are the plot's file
// and the raw samples' directory, relative to the report ("" when none).
func (r *report) write(w io.Writer, plot, raw string) error {
	var err error
	p := func(format string, args ...any) {
		if err == nil {
			_, err = fmt.Fprintf(w, format+"\n", args...)
		}
	}
	p("# Benchmarks")
	p("")
	if ok, why := r.final(); ok {
		p("The measurement of commit `%s` (a clean tree): `make bench`, which took %s.", r.commit, r.took.Round(time.Second))
	} else {
		p("**Not a final report** of commit `%s`: %s. It took %s.", r.commit, strings.Join(why, "; "), r.took.Round(time.Second))
	}
	p("Every figure comes from one kube-apiserver and etcd started on this machine (envtest, built from Go modules")
	p("by `make control-plane`), with dualca, cert-manager trust-manager and the floor, a trivial copier, each its own")
	p("process against it. Nothing here runs in `make test`.")
	p("")
	p("| | |")
	p("|---|---|")
	for _, l := range r.machine {
		p("%s", l)
	}
	if raw != "" {
		p("")
		p("Every sample behind the figures below is in [`%s`](%s), one CSV file per measurement (see its README).", raw, raw)
	}
	if plot != "" {
		p("")
		p("![propagation of the three systems, memory side by side, cost against roots and clients](%s)", plot)
	}
	writeFloors(p)
	if len(r.failed) > 0 {
		p("")
		p("## Measurements that failed")
		p("")
		for _, f := range r.failed {
			first, _, _ := strings.Cut(f.err, "\n")
			p("- **%s**: %s", f.step, first)
		}
	}
	r.writePropagation(p)
	r.writeHandshakes(p)
	r.writeRoots(p)
	r.writeStartup(p)
	r.writeMemory(p)
	r.writeRest(p)
	r.writePoll(p)
	r.writeScale(p)
	r.writeFanout(p)
	r.writeBundle(p)
	r.writeLoad(p)
	r.writeTargets(p)
	return err
}

// writeFloors says how each floor is timed: from the same event as
// dualca's samples it stands beside.
func writeFloors(p func(string, ...any)) {
	p("")
	p("Each floor (the least any system doing the same job pays, beside dualca's figure) is timed from the same event")
	p("as dualca's samples: propagation's copier from the root's PUT's return to its target's watch event, as dualca;")
	p("the roots' floor, a copier writing a Secret of the gateway's size, from the PUT's return of the same root written")
	p("into its own source to its target's watch event, as dualca's new root; the cert-manager fan-out's floor, a loop")
	p("setting the same triggers at the same rate, from the watch event of the root Secret carrying the new root, as")
	p("dualca. The poll alone has no floor: its bound is the interval.")
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func notMeasured(p func(string, ...any), what string) {
	p("| %s | not measured in this run | – |", what)
}

// writeTargets is the closing note: every target, its exact bound, the
// figure measured and the verdict.
func (r *report) writeTargets(p func(string, ...any)) {
	p("")
	p("## Against the targets")
	p("")
	p("| target (its bound) | measured | verdict |")
	p("|---|---|---|")
	r.writePropagationTargets(p)
	if lo, hi, ok := r.rootsPoints(2, 30); ok {
		a, b := distributionOf(lo.samples).p99, distributionOf(hi.samples).p99
		ratio := float64(b) / float64(a)
		fa, fb := distributionOf(lo.floor.samples).p99, distributionOf(hi.floor.samples).p99
		p("| propagation p99 with 30 roots within 2× that with 2 (ratio ≤ 2.00) | %s / %s = %.2f× (the floor, a trivial copier writing a Secret of the gateway's size, timed from the same PUT's return: %s / %s = %.2f×) | %s |",
			ms(b), ms(a), ratio, ms(fb), ms(fa), float64(fb)/float64(fa), verdict(ratio <= 2))
	} else {
		notMeasured(p, "propagation p99 with 30 roots within 2× that with 2")
	}
	if len(r.roots) > 0 {
		most := slices.MaxFunc(r.roots, func(a, b rootsPoint) int { return a.links - b.links })
		p("| the server chain carries no link no client can need (bounded: one per rotation the server did not follow, at most 32) | at most %d cross-certificates, %d bytes, with up to %d roots in the bundle | %s |",
			most.links, most.chainBytes, r.roots[len(r.roots)-1].roots, verdict(most.links <= 32))
	}
	r.writeStartupTarget(p)
	if len(r.poll) > 0 {
		d := distributionOf(pooled(r.poll))
		limit := r.pollEvery + r.pollEvery/10
		p("| a lost watch event recovered within one poll interval, jitter included (max ≤ %s) | max %s over %d changes | %s |", limit, ms(d.max), d.n, verdict(d.max <= limit))
	} else {
		notMeasured(p, "a lost watch event recovered within one poll interval")
	}
	r.writeMemoryTarget(p)
	r.writeScaleTarget(p)
	r.writeSizingTarget(p)
	r.writeRestTarget(p)
	r.writeFanoutTarget(p)
	if h, ok := r.handshakeOf(systemDualca); ok {
		whole := h.timeline.switched >= 0 && h.timeline.retired >= 0
		p("| zero failed mTLS handshakes from healthy clients across rotations (0 failures, through a whole rotation) | %d of %d failed across one rotation, one client on the old root renewed, the server switched at %s and the old root retired at %s | %s |",
			h.failed, h.attempts, h.timeline.switched, h.timeline.retired, verdict(h.failed == 0 && h.attempts > 0 && whole))
		p("| … for an hour, with faults, with late-reloading gateways and clients | not measured here: that is the soak test's, not a benchmark | – |")
	} else {
		notMeasured(p, "zero failed mTLS handshakes across rotations")
	}
}

func (r *report) handshakeOf(system string) (handshakeResult, bool) {
	for _, h := range r.handshakes {
		if h.system == system {
			return h, true
		}
	}
	return handshakeResult{}, false
}

func (r *report) writeHandshakes(p func(string, ...any)) {
	if len(r.handshakes) == 0 {
		return
	}
	p("")
	p("## One client on the old root, through a TLS gateway, across a whole rotation")
	p("")
	p("For each system, a TLS gateway (`test/lib/mtls`) reads the system's target Secret and reloads it at each change; one")
	p("client whose leaf and `ca.crt` come from the old root handshakes every 100 ms for %s, then the root rotates", handshakeBefore)
	p("once. A stand-in for cert-manager's issuing controller watches the client's Certificate (every 50 ms): when it")
	p("turns `Issuing`, it issues the client a leaf from the root the root Secret holds then, with that root as `ca.crt`,")
	p("as cert-manager's CA issuer does; only dualca turns it `Issuing`. dualca runs with")
	p("`--trust-propagation-delay=%s --server-switch-grace=%s` and tracks the client, so the window covers its whole", handshakeDelay, handshakeGrace)
	p("rotation: it lasts until dualca's gateway Secret rests on the new root alone (`Steady`, the server switched, the")
	p("old root gone from `ca.crt`), and %s more; the other systems get a window as long. trust-manager's `Bundle` has", handshakeSettled)
	p("two sources, as its documentation advises a user who rotates a root (\"cert-manager Integration: Intentionally")
	p("Copying CA Certificates\": both roots must be trusted for a while): the root Secret's `ca.crt` and a Secret holding")
	p("a copy of the root made before the rotation; it writes only `ca.crt`, so the gateway's own certificate there is one")
	p("from the old root, as cert-manager issued it, and removing the old root afterwards is the user's. The copier's")
	p("target is a plain copy of the root Secret.")
	p("")
	p("Moments are from the root's PUT returned to the watch event of the target's first version showing the step")
	p("(trigger and re-issue: when the stand-in saw the client `Issuing` and when it had issued it); – did not happen in")
	p("the window.")
	p("")
	p("| system | window after the rotation | handshakes | failed | failed before the rotation | new root trusted | client triggered | client re-issued | server switched | old root retired | last error |")
	p("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, h := range r.handshakes {
		last := h.lastError
		if last == "" {
			last = "–"
		}
		t := h.timeline
		p("| %s | %.2f s | %d | %d | %d | %s | %s | %s | %s | %s | %s |", h.system, h.after.Seconds(), h.attempts, h.failed, h.failedBefore,
			t.trusted, t.triggered, t.reissued, t.switched, t.retired, strings.ReplaceAll(last, "|", "/"))
	}
	if h, ok := r.handshakeOf(systemDualca); ok {
		t := h.timeline
		p("")
		p("dualca's rotation: the new root reached the gateway's `ca.crt` %s after the root's PUT returned; the client was", t.trusted)
		p("turned `Issuing` at %s (the propagation delay, %s, after the root was trusted) and re-issued at %s; the server", t.triggered, handshakeDelay, t.reissued)
		p("switched to the new root at %s and the old root left `ca.crt` at %s; the window ended at %.2f s.", t.switched, t.retired, h.after.Seconds())
	}
}

func (r *report) writeStartupTarget(p func(string, ...any)) {
	for _, s := range r.startup {
		d := distributionOf(s.inSync)
		if s.clients == 0 {
			p("| start-up: process start → gateway in sync, p99 under 1 s (p99 < 1.000 s) | p99 %s over %d starts, no client | %s |", ms(d.p99), d.n, verdict(d.n > 0 && d.p99 < time.Second))
		} else {
			ready := distributionOf(s.ready)
			p("| start-up to ready with %d selected clients, p99 under 1 s (p99 < 1.000 s) | ready p99 %s over %d starts (in sync p99 %s; the clients read p99 %s) | %s |",
				s.clients, ms(ready.p99), ready.n, ms(d.p99), ms(distributionOf(s.clientsRead).p99), verdict(ready.n > 0 && ready.p99 < time.Second))
		}
	}
	if len(r.startup) == 0 {
		notMeasured(p, "start-up under 1 s")
	}
}

func (r *report) writeStartup(p func(string, ...any)) {
	if len(r.startup) == 0 {
		return
	}
	p("")
	p("## Start-up")
	p("")
	p("Before each start the root rotates while dualca is down, so the gateway is in sync only once the new process")
	p("has read the root and written the gateway; the first start of each row finds no gateway Secret (a first install)")
	p("and creates it, the others restart dualca on the one it wrote. Timed from the process's start to the watch event of the gateway")
	p("Secret carrying the new root, and to its readiness probe answering 200 (polled every 2 ms); with clients, also")
	p("to `dualca_clients_read` turning 1 (scraped every 20 ms): the end of the client cache's load, which the gateway")
	p("does not wait for (docs/rotation.md, *Clients not read yet*).")
	p("")
	p("| selected clients | starts | in sync p50 | p99 | max | ready p50 | p99 | max | clients read p50 | p99 | max |")
	p("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.startup {
		a, b := distributionOf(s.inSync), distributionOf(s.ready)
		read := "– | – | –"
		if c := distributionOf(s.clientsRead); c.n > 0 {
			read = fmt.Sprintf("%s | %s | %s", ms(c.p50), ms(c.p99), ms(c.max))
		}
		p("| %d | %d | %s | %s | %s | %s | %s | %s | %s |", s.clients, a.n, ms(a.p50), ms(a.p99), ms(a.max), ms(b.p50), ms(b.p99), ms(b.max), read)
	}
}

func (r *report) memoryOf(cond string) (memoryPoint, bool) {
	for _, m := range r.memory {
		if m.condition == cond {
			return m, true
		}
	}
	return memoryPoint{}, false
}

func (r *report) writeMemoryTarget(p func(string, ...any)) {
	empty, ok := r.memoryOf(memoryConditions[0])
	if !ok {
		notMeasured(p, "memory with 10,000 unrelated Secrets within 5 % of an empty cluster")
		return
	}
	for _, cond := range memoryConditions[1:] {
		m, ok := r.memoryOf(cond)
		if !ok {
			continue
		}
		growth := (float64(m.rss[systemDualca])/float64(empty.rss[systemDualca]) - 1) * 100
		p("| memory with %d unrelated Secrets %s within 5 %% of an empty cluster (growth ≤ +5.0 %%) | dualca %s → %s, %+.1f %% (trust-manager %+.1f %%, informer %+.1f %%) | %s |",
			m.secrets, cond, mib(empty.rss[systemDualca]), mib(m.rss[systemDualca]), growth,
			(float64(m.rss[systemTrustManager])/float64(empty.rss[systemTrustManager])-1)*100,
			(float64(m.rss[informerName])/float64(empty.rss[informerName])-1)*100, verdict(growth <= 5))
	}
}

func (r *report) writeMemory(p func(string, ...any)) {
	if len(r.memory) == 0 {
		return
	}
	p("")
	p("## Memory side by side")
	p("")
	p("dualca (client tracking on, no client selected), trust-manager (its Bundle as above) and a plain namespace")
	p("informer (a controller-runtime manager whose cached client reads the root: it caches every Secret of the")
	p("namespace), each its own process, start fresh in each condition and are measured once all three are in sync:")
	p("resident set (VmRSS), %d samples 250 ms apart after 5 s, the median. Unrelated Secrets hold %d KiB each.", memorySamples, unrelatedSize>>10)
	p("")
	p("| condition | dualca | trust-manager | namespace informer |")
	p("|---|---|---|---|")
	for _, m := range r.memory {
		label := m.condition
		if m.condition != memoryConditions[0] {
			label = fmt.Sprintf("%d unrelated Secrets %s", m.secrets, m.condition)
		}
		p("| %s | %s | %s | %s |", label, mib(m.rss[systemDualca]), mib(m.rss[systemTrustManager]), mib(m.rss[informerName]))
	}
}

// restCounts sums one process's requests at rest by verb.
func restCounts(reqs []timedRequest) map[string]int {
	out := map[string]int{}
	for _, q := range reqs {
		out[q.Verb+" "+q.Resource]++
	}
	return out
}

func writes(reqs []timedRequest) int {
	n := 0
	for _, q := range reqs {
		if q.Writes() {
			n++
		}
	}
	return n
}

func (r *report) writeRestTarget(p func(string, ...any)) {
	if r.rest == nil {
		notMeasured(p, "at rest: two reads per poll interval, no other request but watches, zero writes")
		return
	}
	reqs := r.rest.requests[systemDualca]
	intervals := r.rest.window.Seconds() / r.rest.poll.Seconds()
	gets, watches, other := 0, 0, 0
	for _, q := range reqs {
		switch q.Verb {
		case "get":
			gets++
		case "watch":
			watches++
		default:
			other++
		}
	}
	perInterval := float64(gets) / intervals
	p("| at rest: the poll's two reads per interval, no other request but watches (≤ 2 reads per interval, 0 others) | %.2f reads per %s interval over %s; %d watch requests; %d others | %s |",
		perInterval, r.rest.poll, r.rest.window.Round(time.Second), watches, other, verdict(perInterval <= 2.0 && other == 0))
	p("| at rest: zero writes (0) | %d writes, %d new gateway versions | %s |", writes(reqs), r.rest.versions[systemDualca], verdict(writes(reqs) == 0 && r.rest.versions[systemDualca] == 0))
}

func (r *report) writeRest(p func(string, ...any)) {
	if r.rest == nil {
		return
	}
	p("")
	p("## Requests at rest")
	p("")
	p("The three processes of the last memory condition stay up for %s (dualca with `--poll-interval=%s --trust-propagation-delay=1s`, so that the delay after its first root is over), each", r.rest.window.Round(time.Second), r.rest.poll)
	p("behind a proxy of its own on 127.0.0.1 that records every request it sends, watches included: a watch")
	p("that ends and is opened again shows as one more watch request.")
	if len(r.poll) > 0 || len(r.scale) > 0 {
		p("Meanwhile the poll and scale measurements ran, in namespaces of their own.")
	}
	p("")
	p("| process | request | count | per minute |")
	p("|---|---|---|---|")
	for _, name := range []string{systemDualca, systemTrustManager, informerName} {
		counts := restCounts(r.rest.requests[name])
		if len(counts) == 0 {
			p("| %s | (none) | 0 | 0 |", name)
		}
		for _, k := range slices.Sorted(maps.Keys(counts)) {
			p("| %s | `%s` | %d | %.2f |", name, k, counts[k], float64(counts[k])/r.rest.window.Minutes())
		}
	}
	for _, name := range []string{systemDualca, systemTrustManager, informerName} {
		if err := r.rest.alive[name]; err != nil {
			p("")
			p("%s did not last the window: %v", name, err)
		}
	}
	p("")
	p("New versions of dualca's gateway Secret in the window: %d; of trust-manager's target: %d.", r.rest.versions[systemDualca], r.rest.versions[systemTrustManager])
}

func (r *report) writePoll(p func(string, ...any)) {
	if len(r.poll) == 0 {
		return
	}
	p("")
	p("## The poll alone")
	p("")
	p("dualca runs in the benchmark's process with its watches disabled (`syncer.Options.DisableWatches`, a test")
	p("knob) and `--poll-interval=%s`, so only the poll sees a change: each root change lands at a random moment", r.pollEvery)
	p("of the interval, timed from its PUT's return to the gateway Secret's watch event carrying it.")
	p("")
	p("| | n | p50 | p90 | max | max / interval |")
	p("|---|---|---|---|---|---|")
	for i, run := range r.poll {
		d := distributionOf(run)
		p("| run %d | %d | %s | %s | %s | %.2f |", i+1, d.n, ms(d.p50), ms(d.p90), ms(d.max), d.max.Seconds()/r.pollEvery.Seconds())
	}
}

// scaleMemoryBound is the memory a selected client may cost dualca.
const scaleMemoryBound = 4 << 10

// scaleChurnShare bounds the share of the fan-out's time that dualca spends
// reconciling: a third, and the rest is the renewals'. A client's change
// waits two and a half times the last reconcile's time, from its end,
// before it starts one (syncer's clientPace): 2/7 of the time, a margin
// for the reconciles that do not wait.
const scaleChurnShare = 1.0 / 3

// bytesPerClient is what a resident set costs per client over the
// resident set of a dualca selecting none.
func (r *report) bytesPerClient(rss int64, clients int) float64 {
	if clients == 0 {
		return 0
	}
	return float64(rss-r.scaleBase) / float64(clients)
}

// churnShare is the share of the fan-out's window its reconciles took.
func churnShare(s scalePoint) float64 {
	if s.churnWindow <= 0 {
		return 0
	}
	return float64(s.churn.n) * float64(s.churn.mean) / float64(s.churnWindow)
}

func (r *report) writeScaleTarget(p func(string, ...any)) {
	if len(r.scale) == 0 {
		notMeasured(p, "at most 4 KiB per selected client at 50,000, at rest, at the peak and after a fan-out")
		return
	}
	last := r.scale[len(r.scale)-1]
	rest, peak, after := r.bytesPerClient(last.rss, last.clients), r.bytesPerClient(last.peakRSS, last.clients), r.bytesPerClient(last.afterRSS, last.clients)
	p("| at most 4 KiB (4096 B) per selected client at %d clients: at rest, at the peak, after the fan-out (resident set less a dualca's selecting none, %s) | %.0f B, %.0f B, %.0f B | %s |",
		last.clients, mib(r.scaleBase), rest, peak, after, verdict(max(rest, peak, after) <= scaleMemoryBound))
	if f := last.fanout; f.clients > 0 {
		over := (f.total.Seconds()/f.ideal.Seconds() - 1) * 100
		floor := "the floor not measured"
		if fl := last.floor; fl.clients > 0 {
			floor = fmt.Sprintf("the floor, a trivial loop at the same rate with the same requests, from its first write to its last write's return: %s for %s: %+.1f %%",
				fl.total.Round(time.Millisecond), fl.ideal, (fl.total.Seconds()/fl.ideal.Seconds()-1)*100)
		}
		p("| the %d-client fan-out within 10 %% of ideal (over ideal ≤ +10.0 %%) | %s for %s: %+.1f %% (%s) | %s |", last.clients, f.total.Round(time.Millisecond), f.ideal, over, floor, verdict(over <= 10))
		share := churnShare(last)
		p("| reconciles during the fan-out take at most a third of its time (≤ 33.3 %%) | %d reconciles, mean %s, p99 ≤ %s: %.1f %% of %s | %s |",
			last.churn.n, ms(last.churn.mean), last.churn.p99, share*100, last.churnWindow.Round(time.Millisecond), verdict(share <= scaleChurnShare))
	}
	if last.clients >= 50000 {
		p("| start-up to ready with %d clients under 10 s (< 10 s) | ready (the gateway in sync, the clients unread) %s; the clients read %s | %s |", last.clients, ms(last.firstSync), ms(last.clientsRead), verdict(last.firstSync < 10*time.Second))
	}
	p("| %d clients are served (synced, and every one triggered) | first sync %s; %d triggered in %s | %s |", last.clients, ms(last.firstSync), last.fanout.clients, last.fanout.total.Round(time.Millisecond), verdict(last.fanout.clients == last.clients))
}

func (r *report) writeScale(p func(string, ...any)) {
	if len(r.scale) == 0 {
		return
	}
	p("")
	p("## Cost against selected clients")
	p("")
	p("For each count, a namespace of its own with that many Certificates as a platform team writes them for its agents")
	p("(labels and annotations of a Helm release, three DNS names, usages, key settings, lifetime, a Secret template),")
	p("each issued with a leaf of its own from the old root (its CertificateRequest, Secret and revision written directly")
	p("as cert-manager writes them; the API server keeps their managed fields), and a fresh dualca with `--renewal-qps=%d`,", scaleQPS)
	p("a rate this machine's API server keeps (at 500/s, until `c26e518`, even the fan-out's floor took over twice the ideal")
	p("time with 50,000 clients: the fan-out timed the API server); the floor, measured at the largest count, says how close.")
	p("First sync is process start to the readiness probe's 200 (the first reconcile wrote the gateway, its clients not read")
	p("yet: docs/rotation.md); clients read is process start to `dualca_clients_read` turning 1 (scraped every 20 ms), when")
	p("the client cache has loaded and the next reconcile reads them. Memory is the")
	p("resident set (VmRSS, the median of %d samples 250 ms apart after 5 s) at rest, its peak (VmHWM, read after the", memorySamples)
	p("fan-out) and again after the fan-out; per client, less the %s of a dualca selecting no client in the same run.", mib(r.scaleBase))
	p("Reconcile time at rest is controller-runtime's histogram over %d touches of the root's annotations", r.touches)
	p("and the polls meanwhile, its quantiles the upper bounds of the buckets holding them. The fan-out rotates the")
	p("root and times the `Issuing` triggers, first to last, against clients / rate; the reconciles during it are the")
	p("histogram's from the rotation to the last trigger, each trigger a change of a client.")
	p("")
	p("| clients | first sync | clients read | RSS | per client | peak | per client | after | per client | reconciles at rest | mean | p99 | fan-out | ideal | over ideal | reconciles in it | mean | p99 | share of its time | API peak |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.scale {
		f := s.fanout
		fan := fmt.Sprintf("failed | %s | – | – | – | – | – | –", time.Duration(float64(s.clients)/scaleQPS*float64(time.Second)))
		if f.clients > 0 {
			fan = fmt.Sprintf("%s | %s | %+.1f %% | %d | %s | ≤ %s | %.1f %% | %.0f req/s", f.total.Round(time.Millisecond), f.ideal, (f.total.Seconds()/f.ideal.Seconds()-1)*100,
				s.churn.n, ms(s.churn.mean), s.churn.p99, churnShare(s)*100, f.peakRate)
		}
		read := "–"
		if s.clientsRead > 0 {
			read = ms(s.clientsRead)
		}
		p("| %d | %s | %s | %s | %.0f B | %s | %.0f B | %s | %.0f B | %d | %s | ≤ %s | %s |", s.clients, ms(s.firstSync), read,
			mib(s.rss), r.bytesPerClient(s.rss, s.clients), mib(s.peakRSS), r.bytesPerClient(s.peakRSS, s.clients), mib(s.afterRSS), r.bytesPerClient(s.afterRSS, s.clients),
			s.reconcile.n, ms(s.reconcile.mean), s.reconcile.p99, fan)
	}
	if len(r.scale) > 1 {
		var steps []string
		for i := 1; i < len(r.scale); i++ {
			a, b := r.scale[i-1], r.scale[i]
			if a.reconcile.n > 0 && b.reconcile.n > 0 {
				steps = append(steps, fmt.Sprintf("%d → %d clients (%.0f×): %.1f×", a.clients, b.clients,
					float64(b.clients)/float64(a.clients), float64(b.reconcile.mean)/float64(a.reconcile.mean)))
			}
		}
		if len(steps) > 0 {
			p("")
			p("The mean reconcile at rest, step by step: %s.", strings.Join(steps, "; "))
		}
	}
	r.writeSizing(p)
	for _, s := range r.scale {
		if s.orphans > 0 {
			p("")
			p("With %d issued Certificates of no selected client (each with its CertificateRequest and Secret) in a second client namespace, a fresh dualca with %d clients holds %s, against %s without them (%+.1f %%).",
				s.orphans, s.clients, mib(s.orphanRSS), mib(s.rss), (float64(s.orphanRSS)/float64(s.rss)-1)*100)
		}
	}
}

func (r *report) writeFanoutTarget(p func(string, ...any)) {
	if len(r.cmFanout) == 0 {
		notMeasured(p, "renewal fan-out within 10 % of the ideal time, cert-manager re-issuing")
		return
	}
	worst := 0.0
	for _, f := range r.cmFanout {
		worst = max(worst, abs(f.total.Seconds()/f.ideal.Seconds()-1)*100)
	}
	f := r.cmFanout[0]
	floor := ""
	if len(r.cmFloor) > 0 {
		floorWorst := 0.0
		for _, f := range r.cmFloor {
			floorWorst = max(floorWorst, abs(f.total.Seconds()/f.ideal.Seconds()-1)*100)
		}
		floor = fmt.Sprintf(" (the floor, a trivial loop at the same rate with the same requests: worst %.1f %% off)", floorWorst)
	}
	p("| renewal fan-out within 10 %% of the ideal time, cert-manager re-issuing (|over| ≤ 10.0 %%) | %d runs of %d clients at %g/s, ideal %s; worst %.1f %% off%s | %s |",
		len(r.cmFanout), f.clients, f.qps, f.ideal, worst, floor, verdict(worst <= 10))
}

// times is "once" or "n times".
func times(n int) string {
	if n == 1 {
		return "once"
	}
	return fmt.Sprintf("%d times", n)
}

// rotations is "1 rotation" or "n rotations".
func rotations(n int) string {
	if n == 1 {
		return "1 rotation"
	}
	return fmt.Sprintf("%d rotations", n)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func (r *report) writeFanout(p func(string, ...any)) {
	if len(r.cmFanout) == 0 {
		return
	}
	f0 := r.cmFanout[0]
	p("")
	p("## Renewal fan-out, cert-manager re-issuing")
	p("")
	p("cert-manager's controller (`make cert-manager`) owns a self-signed root Certificate and a CA Issuer, and issued")
	p("%d client Certificates from it; dualca selects them, with `--renewal-qps=%g`. cert-manager renews the root", f0.clients, f0.qps)
	p("(a new key); dualca triggers each client and cert-manager re-issues it. Each run starts once the previous one")
	p("has settled (server switched, old root retired). Then the floor: dualca stopped, %s of the same", rotations(len(r.cmFloor)))
	p("clients whose triggers a trivial loop sets with the requests dualca sends per trigger (one status update setting")
	p("`Issuing`, as `cmctl renew` does, from the Certificate as listed before the rotation where dualca uses its cache; a")
	p("conflict reads it again), a token bucket at the same rate and burst over as many workers as dualca's renewer,")
	p("cert-manager re-issuing the same way. Both are timed from the same event: the watch event, in the benchmark, of the")
	p("root Secret's version carrying the new root, which dualca reacts to and the floor starts from.")
	p("The floor runs %s: each run waits for cert-manager to re-issue every client, minutes each, and `make bench` (about 70 minutes) does not repeat it.", times(len(r.cmFloor)))
	p("")
	p("| triggered by | run | new root seen → first trigger | first → last trigger | ideal | over ideal | new root seen → all re-issued | API peak | API mean | failed issuances re-triggered |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for _, system := range []struct {
		name string
		runs []fanoutResult
	}{{"dualca", r.cmFanout}, {"floor", r.cmFloor}} {
		for i, f := range system.runs {
			p("| %s | %d | %s | %s | %s | %+.1f %% | %s | %.0f req/s | %.0f req/s | %d |", system.name, i+1, f.toFirst.Round(time.Millisecond), f.total.Round(time.Millisecond), f.ideal,
				(f.total.Seconds()/f.ideal.Seconds()-1)*100, f.reissued.Round(time.Millisecond), f.peakRate, f.meanRate, f.retriggers)
		}
	}
	p("")
	p("The API server's rates count every request it served (`apiserver_request_total`), cert-manager's and the benchmark's included.")
	for i, f := range r.cmFloor {
		p("In the floor's run %d, %d of its %d first updates conflicted (the Certificate had changed since the list) and read it again.", i+1, f.rereads, f.clients)
	}
}

func (r *report) writeBundle(p func(string, ...any)) {
	if len(r.bundle) == 0 {
		return
	}
	p("")
	p("## Bundle operations")
	p("")
	p("`%s`: the pure work of a reconcile, roots of one subject as cert-manager's; median of the runs (min – max of ns/op).", r.bundleCommand)
	p("")
	p("| benchmark | time/op | min – max | B/op | allocs/op |")
	p("|---|---|---|---|---|")
	for _, b := range r.bundle {
		p("| %s | %s | %s – %s | %.0f | %.0f |", b.name, nsf(b.nsPerOp), nsf(b.minNs), nsf(b.maxNs), b.bytesPerOp, b.allocsPerOp)
	}
	if per := r.planPerClient(); len(per) > 1 {
		p("")
		p("The decision at rest per client (its time less that with no client, divided by the clients): %s.", strings.Join(per, "; "))
	}
}

// planPerClient is Plan's time at rest per client at each client count
// BenchmarkPlan measured.
func (r *report) planPerClient() []string {
	nsAt := map[int]float64{} // by client count
	var counts []int
	for _, b := range r.bundle {
		if rest, ok := strings.CutPrefix(b.name, "Plan/at-rest/clients="); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				nsAt[n] = b.nsPerOp
				counts = append(counts, n)
			}
		}
	}
	none, ok := nsAt[0]
	if !ok {
		return nil
	}
	var out []string
	for _, n := range counts {
		if n > 0 {
			out = append(out, fmt.Sprintf("%d clients, %s", n, nsf((nsAt[n]-none)/float64(n))))
		}
	}
	return out
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

// moduleVersion is the version go.mod (relative to root) requires of path.
func moduleVersion(root, gomod, path string) string {
	b, err := os.ReadFile(filepath.Join(root, gomod))
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) >= 2 && f[0] == path {
			return f[1]
		}
	}
	return "unknown"
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
