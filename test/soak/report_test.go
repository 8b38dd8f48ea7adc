package soak

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/figure"
	"github.com/dualca/dualca/test/lib/run"
)

// write writes the report to path (Markdown), linking the timeline plot
// at plotPath when there is one, and with seriesPath what the plot is drawn
// from (make soak then draws it, with test/programs/figures).
func (o *outcome) write(path, plotPath, seriesPath string) error {
	if seriesPath != "" {
		if err := figure.Write(seriesPath, o.figure()); err != nil {
			return err
		}
	}
	if err := os.WriteFile(path, []byte(o.markdown(path, plotPath)), 0o644); err != nil { //nolint:gosec // G306: a document of the repository
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (o *outcome) markdown(path, plotPath string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	title, target, extra := "Soak run", "make soak", ""
	if !*kills {
		title, target, extra = "Soak run without kills (leaks)", "make soak-leaks", " -soak.kills=false"
	}
	w("# %s", title)
	w("")
	w("Rotations and faults at random moments, against a gateway and clients that load every Secret version %s late. "+
		"Written by `TestSoak` (test/soak) with `-soak.duration=%v -soak.clients=%d%s` (what `%s DURATION=%v CLIENTS=%d` runs), %s, on the development machine (2 cores, shared). "+
		"dualca measured: %s.",
		lag.String(), *duration, len(o.fleet.Clients), extra, target, *duration, len(o.fleet.Clients), time.Now().UTC().Format("2006-01-02 15:04 UTC"), binaryAtStart)
	w("Two dualca replicas elect a leader; `--trust-propagation-delay=%v`, `--server-switch-grace=%v`, `--issuing-secret=%s/%s`, the Secret the clients' CA Issuer signs with; a root rotation every %s, a fault every %s; each client handshakes every %v. "+
		"Every failed handshake of a healthy client fails the run: none is excused.",
		propagationDelay(), switchGrace, namespace, issuingName, rotate.String(), faults.String(), interval)
	w("")
	if plotPath != "" {
		rel, err := filepath.Rel(filepath.Dir(path), plotPath)
		if err != nil {
			rel = plotPath
		}
		w("![timeline](%s)", rel)
		w("")
	}
	w("## Verdict")
	w("")
	w("| what | figure |")
	w("|---|---|")
	w("| run | %v (rotations and faults for %v, then draining until converged) |", o.elapsed.Round(time.Second), *duration)
	w("| handshakes of the %d healthy clients | **%d attempted, %d failed** |", len(o.fleet.Clients)-1, o.attempts, o.failures)
	w("| the broken client's handshakes (counted apart) | %d attempted, %d failed |", o.brokenStats.Attempts, o.brokenStats.Failures)
	w("| gateway | accepted %d, rejected %d |", o.gateway.Accepted, o.gateway.Rejected)
	w("| gateway Secret versions checked by the monitor | %d, **%d violations** |", o.checked.Versions, o.checked.ViolationCount)
	w("| the monitor's watch not resumable (an API server restart): the namespace listed again, checked as one state | %d |", o.checked.Relists)
	w("| races (a client issued from a root not bundled yet) | **%d** |", o.checked.RaceCount)
	w("| Secret versions the gateway / clients could not load | %d / %d |", o.gateway.LoadErrors, o.fleet.Total.LoadErrors)
	w("| gateway Secret deletions injected / seen by the monitor / by the gateway | %d / %d / %d |", o.deletions, o.checked.Deletions, o.gateway.Deletions)
	w("| rotations requested / roots after R1 / requests refused (root already issuing) | %d / %d / %d |", o.requested, len(o.rotations), o.skipped)
	w("| dualca's API requests, both replicas | %.0f per minute on average, %.0f at the peak (10 s) |", o.requestsPerMinute, o.peakPerMinute)
	w("")
	o.rotationTable(w)
	o.faultTable(w)
	o.leakTable(w)
	w("## Timeline")
	w("")
	w("| at | what | detail |")
	w("|---|---|---|")
	begin := o.begin()
	for _, e := range o.timeline {
		w("| %s | %s | %s |", minutes(e.at.Sub(begin)), e.kind, e.detail)
	}
	return b.String()
}

// binaryAtStart is measured() as the run began: what the report names.
var binaryAtStart string

// measured is the commit of the dualca binary the run measured, from its
// own `dualca version`, and the test's, when it is another.
func measured() string {
	bin, err := run.Binary()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "unknown (`dualca version`: " + err.Error() + ")"
	}
	line := strings.TrimSpace(string(out))
	head, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	if h := strings.TrimSpace(string(head)); h != "" && !strings.Contains(line, "(commit "+h+",") {
		return fmt.Sprintf("`%s`; this report's test at commit %s", line, h)
	}
	return "`" + line + "`"
}

// roughly rounds d to the hour from an hour on, else to the second.
func roughly(d time.Duration) time.Duration {
	if d >= time.Hour {
		return d.Round(time.Hour)
	}
	return d.Round(time.Second)
}

func (o *outcome) begin() time.Time { return o.start }

func (o *outcome) rotationTable(w func(string, ...any)) {
	w("## Rotations")
	w("")
	landed := map[string]int{}
	for _, r := range o.rotations {
		landed[r.landedIn]++
	}
	var by []string
	for _, p := range slices.SortedFunc(maps.Keys(landed), func(a, b string) int { return cmp.Compare(landed[b], landed[a]) }) {
		by = append(by, fmt.Sprintf("%s %d", cmp.Or(p, "(gateway deleted)"), landed[p]))
	}
	w("The phase of the rotation before when each root came: %s.", strings.Join(by, ", "))
	w("")
	w("| root | came at | landed in | Steady after | old root expires after the first Steady on this root or a later one, in |")
	w("|---|---|---|---|---|")
	begin := o.begin()
	for _, r := range o.rotations {
		steady := "never: overtaken by the next"
		if r.steady > 0 {
			steady = r.steady.Round(100 * time.Millisecond).String()
			if r.superseded {
				steady += " (the next came first)"
			}
		}
		w("| R%d | %s | %s | %s | %v |", r.n, minutes(r.arrived.Sub(begin)), cmp.Or(r.landedIn, "(gateway deleted)"), steady, roughly(r.oldExpiresIn))
	}
	w("")
}

func (o *outcome) faultTable(w func(string, ...any)) {
	w("## Faults")
	w("")
	w("| fault | times |")
	w("|---|---|")
	for _, k := range slices.Sorted(maps.Keys(o.faults)) {
		w("| %s | %d |", k, o.faults[k])
	}
	w("")
	if !*kills {
		w("No replica was killed and kube-apiserver was not restarted: those faults are left out of this run, so that the leader lives the whole run.")
		w("")
	}
	if *kills && minLife() > 0 {
		w("A kill drawn while its replica had lived less than %v was not made (%d times): leak samples come from replicas past their warm-up, for long enough to fit their growth.", minLife(), o.killsSkipped)
		w("")
	}
}

func (o *outcome) leakTable(w func(string, ...any)) {
	l := o.leak
	w("## Leaks")
	w("")
	w("Each replica process sampled every %v from its metrics (resident memory, goroutines, open file descriptors); %d scrapes failed while their replica lived on. "+
		"Only the leader is judged: the standby holds no controller. The slope is fitted over the last three quarters of the run within every process while it led "+
		"(each its own intercept: a leader killed and started again begins afresh), leaving out its first %v after it took the lease. "+
		"Bounds, absolute: the growth per minute that would reach the chart's memory limit (values.yaml) from the highest judged sample within %d days, "+
		"goroutines counted at %d KiB of that memory each, open files the same against the process's open-files limit.",
		resourcesEvery, len(o.scrapeFailures), warmUp(), int(horizon.Hours()/24), goroutineCost>>10)
	w("")
	if judgesLeaks() {
		w("Before the clients existed, the root was rotated %d times, each until the gateway trusted it, and dualca's record was checked to hold %d roots: "+
			"dualca keeps every root it read from the root Secret, up to that many (bundle.MaxKnown, a year of weekly rotations), so a leader is judged with that set full. "+
			"From then on a rotation adds a root and drops the oldest.", bundle.MaxKnown, bundle.MaxKnown)
		w("")
	}
	for _, f := range o.scrapeFailures {
		w("- failed scrape: %s", f)
	}
	if len(o.scrapeFailures) > 0 {
		w("")
	}
	if !judgesLeaks() {
		w("Not judged: the run was shorter than %v. For information, over %v: RSS %+.3f MiB/min, goroutines %+.3f/min, fds %+.3f/min (%d leader processes, %d samples).",
			judgeLeaksFrom, l.window.Round(time.Second), l.rss/(1<<20), l.goroutines, l.fds, l.processes, l.samples)
		w("")
		return
	}
	if !l.judged() {
		w("No leader lived long enough in the window to be judged.")
		w("")
		return
	}
	verdict := "no leak"
	if !l.ok() {
		verdict = "**LEAK**"
	}
	w("| leaders | samples | window | live heap KiB/min | memory KiB/min: the heap goal, heap × (1+GOGC/100) (limit) | RSS KiB/min, not judged | goroutines/min (limit) | fds/min (limit) | verdict |")
	w("|---|---|---|---|---|---|---|---|---|")
	w("| %d | %d | %v | %+.2f | %+.2f (%.2f) | %+.2f | %+.4f (%.3f) | %+.4f (%.4f) | %s |", l.processes, l.samples, l.window.Round(time.Second),
		l.heap/(1<<10), l.memory/(1<<10), l.rssLimit/(1<<10), l.rss/(1<<10), l.goroutines, l.goroutineLimit, l.fds, l.fdLimit, verdict)
	w("")
	w("The limits come from a peak RSS of %.1f MiB against the chart's limit of %.0f MiB, and %.0f of %.0f open files. "+
		"Memory is judged by the heap goal: the live heap the GC marks (go_gc_heap_live_bytes), grown by the percentage in force at each sample (go_gc_gogc_percent, %.0f to %.0f here, which dualca sets from the live heap): what a leak in Go code makes grow. "+
		"The resident set's slope is shown, not judged: it also moves with pages the runtime has not returned and the binary's pages as code first runs, "+
		"both bounded, which an hour cannot tell from a leak.",
		l.peakRSS/(1<<20), l.memLimit/(1<<20), l.peakFDs, l.maxFDs, l.gogcLow, l.gogcHigh)
	w("")
	w("| leader (pid) | samples | judged from, to | RSS MiB first, last | RSS KiB/min | live heap KiB/min | goroutines/min | bundle roots first, last (most) |")
	w("|---|---|---|---|---|---|---|---|")
	begin := o.begin()
	for _, p := range l.leaders {
		w("| %d | %d | %s, %s | %.1f, %.1f | %+.2f | %+.2f | %+.4f | %.0f, %.0f (%.0f) |", p.pid, p.samples, minutes(p.from.Sub(begin)), minutes(p.to.Sub(begin)),
			p.rssFrom/(1<<20), p.rssTo/(1<<20), p.rss/(1<<10), p.heap/(1<<10), p.goroutines, p.rootsFrom, p.rootsTo, p.rootsMax)
	}
	w("")
}

// plot draws three panels over the run's minutes: handshakes per second
// and failures with the rotations and faults marked; the gateway's phase
// and roots; each replica's resident memory.
// figure is what the timeline plot shows: the healthy clients' traffic,
// the gateway's phase and roots, the rotations and faults, and each
// replica's resident memory.
func (o *outcome) figure() figure.Soak {
	f := figure.Soak{Start: o.begin(), Elapsed: o.elapsed}
	for _, s := range o.samples {
		f.Samples = append(f.Samples, figure.SoakSample{At: s.at, Attempts: s.attempts, Failures: s.failures,
			Phase: s.phase, Root: s.root, Server: s.server})
	}
	for _, e := range o.timeline {
		switch e.kind {
		case "phase", rotationSkipped, killSkipped:
			// Nothing happened to the gateway.
		default:
			f.Events = append(f.Events, figure.SoakEvent{At: e.at, Rotation: e.kind == rotationRequested})
		}
	}
	for _, r := range o.resources {
		f.Memory = append(f.Memory, figure.Memory{At: r.at, PID: r.pid, RSS: r.rss, Heap: r.heap, GOGC: r.gogc, Leader: r.leader, Roots: r.roots})
	}
	return f
}
