package soak

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/dualca/dualca/test/lib/run"
	"github.com/dualca/dualca/test/plotgrid"
)

// write writes the report to path (Markdown) and, with plotPath, the
// timeline plot, linked from the report.
func (o *outcome) write(path, plotPath string) error {
	if plotPath != "" {
		if err := o.plot(plotPath); err != nil {
			return fmt.Errorf("plotting %s: %w", plotPath, err)
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
	w("| leaders | samples | window | live heap KiB/min | memory KiB/min: heap × (1+GOGC/100) (limit) | RSS KiB/min, not judged | goroutines/min (limit) | fds/min (limit) | verdict |")
	w("|---|---|---|---|---|---|---|---|---|")
	w("| %d | %d | %v | %+.2f | %+.2f (%.2f) | %+.2f | %+.4f (%.3f) | %+.4f (%.4f) | %s |", l.processes, l.samples, l.window.Round(time.Second),
		l.heap/(1<<10), l.memory/(1<<10), l.rssLimit/(1<<10), l.rss/(1<<10), l.goroutines, l.goroutineLimit, l.fds, l.fdLimit, verdict)
	w("")
	w("The limits come from a peak RSS of %.1f MiB against the chart's limit of %.0f MiB, and %.0f of %.0f open files. "+
		"Memory is judged by the live heap the GC marks (go_gc_heap_live_bytes), grown by GOGC %.0f: what a leak in Go code makes grow. "+
		"The resident set's slope is shown, not judged: it also moves with pages the runtime has not returned and the binary's pages as code first runs, "+
		"both bounded, which an hour cannot tell from a leak.",
		l.peakRSS/(1<<20), l.memLimit/(1<<20), l.peakFDs, l.maxFDs, l.gogc)
	w("")
	w("| leader (pid) | samples | judged from, to | RSS MiB first, last | RSS KiB/min | live heap KiB/min | goroutines/min |")
	w("|---|---|---|---|---|---|---|")
	begin := o.begin()
	for _, p := range l.leaders {
		w("| %d | %d | %s, %s | %.1f, %.1f | %+.2f | %+.2f | %+.4f |", p.pid, p.samples, minutes(p.from.Sub(begin)), minutes(p.to.Sub(begin)),
			p.rssFrom/(1<<20), p.rssTo/(1<<20), p.rss/(1<<10), p.heap/(1<<10), p.goroutines)
	}
	w("")
}

// plot draws three panels over the run's minutes: handshakes per second
// and failures with the rotations and faults marked; the gateway's phase
// and roots; each replica's resident memory.
func (o *outcome) plot(path string) error {
	begin := o.begin()
	at := func(t time.Time) float64 { return t.Sub(begin).Minutes() }
	traffic, err := o.trafficPlot(at)
	if err != nil {
		return err
	}
	phases, err := o.phasePlot(at)
	if err != nil {
		return err
	}
	memory, err := o.memoryPlot(at)
	if err != nil {
		return err
	}
	panels := []*plot.Plot{traffic, phases, memory}
	for _, p := range panels {
		p.X.Min, p.X.Max = 0, o.elapsed.Minutes()
	}
	return plotgrid.WritePNG(path, 1, 24*vg.Centimeter, 8*vg.Centimeter, panels...)
}

var (
	blue   = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	red    = color.RGBA{R: 200, A: 255}
	green  = color.RGBA{G: 140, A: 255}
	orange = color.RGBA{R: 220, G: 130, A: 255}
	grey   = color.RGBA{R: 150, G: 150, B: 150, A: 255}
)

// rateWindow is the shortest interval the plot computes a rate over.
const rateWindow = 10 * time.Second

func (o *outcome) trafficPlot(at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Healthy clients' handshakes per second; rotations (green) and faults (orange)"
	p.X.Label.Text = "minutes"
	var rate, failed plotter.XYs
	top := 1.0
	// Rates over rateWindow at least: samples that came close together
	// (a sampler held up, then catching up) make no spikes.
	a := 0
	for i := 1; i < len(o.samples); i++ {
		b := o.samples[i]
		if b.at.Sub(o.samples[a].at) < rateWindow && i < len(o.samples)-1 {
			continue
		}
		dt := b.at.Sub(o.samples[a].at).Seconds()
		from := o.samples[a]
		a = i
		if dt <= 0 {
			continue
		}
		r := float64(b.attempts-from.attempts) / dt
		top = max(top, r)
		rate = append(rate, plotter.XY{X: at(b.at), Y: r})
		if n := b.failures - from.failures; n > 0 {
			failed = append(failed, plotter.XY{X: at(b.at), Y: float64(n) / dt})
		}
	}
	if err := addLine(p, rate, blue, "handshakes/s"); err != nil {
		return nil, err
	}
	if len(failed) > 0 {
		sc, err := plotter.NewScatter(failed)
		if err != nil {
			return nil, err
		}
		sc.Color = red
		p.Add(sc)
		p.Legend.Add("failed/s", sc)
	}
	for _, e := range o.timeline {
		c := orange
		switch e.kind {
		case "phase", rotationSkipped, killSkipped:
			continue
		case rotationRequested:
			c = green
		}
		l, err := plotter.NewLine(plotter.XYs{{X: at(e.at), Y: 0}, {X: at(e.at), Y: top * 1.05}})
		if err != nil {
			return nil, err
		}
		l.Color = c
		l.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(l)
	}
	p.Y.Min = 0
	p.Legend.Top = true
	return p, nil
}

// phaseLevels places the phases on the y axis.
var phaseLevels = map[string]float64{"": 0, "Steady": 1, "Bundle": 2, "Renewing": 3, "Retiring": 4}

func (o *outcome) phasePlot(at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "The gateway's phase (0 deleted, 1 Steady, 2 Bundle, 3 Renewing, 4 Retiring), current root and server root (R number)"
	p.X.Label.Text = "minutes"
	var phase, root, server plotter.XYs
	for _, s := range o.samples {
		phase = append(phase, plotter.XY{X: at(s.at), Y: phaseLevels[s.phase]})
		root = append(root, plotter.XY{X: at(s.at), Y: float64(s.root)})
		server = append(server, plotter.XY{X: at(s.at), Y: float64(s.server)})
	}
	for _, l := range []struct {
		xys   plotter.XYs
		color color.Color
		name  string
	}{{phase, blue, "phase"}, {root, green, "current root"}, {server, grey, "server root"}} {
		if err := addLine(p, l.xys, l.color, l.name); err != nil {
			return nil, err
		}
	}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

func (o *outcome) memoryPlot(at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "dualca's resident memory per replica process (MiB)"
	p.X.Label.Text = "minutes"
	byPid := map[int]plotter.XYs{}
	for _, r := range o.resources {
		byPid[r.pid] = append(byPid[r.pid], plotter.XY{X: at(r.at), Y: r.rss / (1 << 20)})
	}
	colors := []color.Color{blue, green, orange, grey, red}
	for i, pid := range slices.Sorted(maps.Keys(byPid)) {
		l, err := plotter.NewLine(byPid[pid])
		if err != nil {
			return nil, err
		}
		l.Color = colors[i%len(colors)]
		p.Add(l)
	}
	p.Y.Min = 0
	return p, nil
}

func addLine(p *plot.Plot, xys plotter.XYs, c color.Color, name string) error {
	if len(xys) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color = c
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}
