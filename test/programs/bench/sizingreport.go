package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dualca/dualca/test/lib/sizing"
)

// sizingSizes are the client counts the report sizes dualca for.
var sizingSizes = []int{1000, 5000, 10000, 25000, 50000}

// sizingModel is the sizing model of the scale points: a line over the
// resident sets at rest (of each point the larger, before or after its
// fan-out: the request must hold both) and one over the peaks, each
// fitted over the points and the dualca selecting no client
// (sizing.FitOver). ok is false without a point.
func (r *report) sizingModel() (sizing.Model, bool) {
	base := sizing.Point{Bytes: float64(r.scaleBase)}
	rest, peak := []sizing.Point{base}, []sizing.Point{base}
	for _, s := range r.scale {
		if s.clients == 0 || s.peakRSS == 0 {
			continue
		}
		rest = append(rest, sizing.Point{Clients: s.clients, Bytes: float64(max(s.rss, s.afterRSS))})
		peak = append(peak, sizing.Point{Clients: s.clients, Bytes: float64(s.peakRSS)})
	}
	if len(peak) == 1 {
		return sizing.Model{}, false
	}
	return sizing.Fit(rest, peak), true
}

// scaleCommand is the command that measured the scale points.
func (r *report) scaleCommand() string {
	if ok, _ := r.final(); ok {
		return "make bench"
	}
	var counts []string
	for _, s := range r.scale {
		counts = append(counts, strconv.Itoa(s.clients))
	}
	cmd := "go -C test/programs run ./bench -dualca bin/dualca -only scale -scale " + strings.Join(counts, ",")
	if r.quick {
		cmd += " -quick"
	}
	return cmd
}

// writeSizing is the sizing the scale points give, and the check of the
// chart's limit at its largest claimed size.
func (r *report) writeSizing(p func(string, ...any)) {
	m, ok := r.sizingModel()
	if !ok {
		return
	}
	largest := 0
	for _, s := range r.scale {
		if s.peakRSS > 0 {
			largest = max(largest, s.clients)
		}
	}
	p("")
	p("### Sizing: the memory request and limit for a number of clients")
	p("")
	p("Two lines over the points above and the dualca selecting no client: one over the resident sets at rest (of each")
	p("point the larger, before or after its fan-out: the request), one over the peaks (the limit, with %.0f %% headroom: dualca keeps Go's heap under", sizing.Headroom*100)
	p("90 %% of the limit, and the figures vary from run to run). Each line's slope is the least-squares slope of its points,")
	p("its base the least that leaves no point above the line; request and limit are rounded up to %s. Sizes past", sizing.Quantity(sizing.Step))
	p("%s clients, the largest measured here, are the lines' extrapolation. The chart's README and the project's README", sizing.Count(largest))
	p("hold such a block, with rows up to the largest size checked (test/chart checks that their rows are their model's).")
	p("")
	for _, l := range strings.Split(strings.TrimRight(m.Block(sizingSizes, fmt.Sprintf("by `%s` at commit `%s`", r.scaleCommand(), r.commit)), "\n"), "\n") {
		p("%s", l)
	}
	p("")
	switch {
	case r.claimErr != "":
		p("The chart's claim could not be read: %s.", r.claimErr)
		return
	case r.claim.Clients == 0:
		return
	}
	own := m.Row(r.claim.Clients)
	p("The chart claims %s clients within %s (its README's table; values.yaml's default limit); this run's model gives %s for them%s.",
		sizing.Count(r.claim.Clients), sizing.Quantity(r.claim.Limit), sizing.Quantity(own.Limit), belowNote(r.claim.Limit < own.Limit))
	r.writeLimitCheck(p)
}

func belowNote(below bool) string {
	if below {
		return ": **the chart's limit is under this run's model**"
	}
	return ""
}

// checkedPoint is the scale point the chart's limit was checked at.
func (r *report) checkedPoint() (scalePoint, bool) {
	for _, s := range r.scale {
		if s.check != nil {
			return s, true
		}
	}
	return scalePoint{}, false
}

func (r *report) writeLimitCheck(p func(string, ...any)) {
	s, ok := r.checkedPoint()
	if !ok {
		p("It was not checked in this run: no scale point of %s clients.", sizing.Count(r.claim.Clients))
		return
	}
	c := s.check
	if c.unavailable != "" {
		p("It could not be checked in this run: %s.", c.unavailable)
		return
	}
	p("")
	p("The %s-client point's dualca ran in a cgroup v1 memory group of its own whose `memory.limit_in_bytes` is the chart's", sizing.Count(s.clients))
	p("%s, as a container runtime sets it, and set its GOMEMLIMIT from it (90 %%, %s); it went through the point's renewal", sizing.Quantity(c.limit), mib(softLimit(c.limit)))
	p("fan-out. The table's row of %s clients was measured so, and the model above includes it: a peak that reached the", sizing.Count(s.clients))
	p("soft limit would be one the collector held down, and the model's per-client peak then too low.")
	p("")
	p("| limit | the group's highest charge | of the limit | process peak (VmHWM) | of the soft limit | limit hits (failcnt) | OOM kills | alive | ready | gateway on the new root | the limit |")
	p("|---|---|---|---|---|---|---|---|---|---|---|")
	p("| %s | %s | %.0f %% | %s | %.0f %% | %d | %d | %s | %s | %s | %s |", sizing.Quantity(c.limit), mib(c.stats.maxUsage), 100*float64(c.stats.maxUsage)/float64(c.limit),
		mib(s.peakRSS), 100*float64(s.peakRSS)/float64(softLimit(c.limit)), c.stats.failcnt, c.stats.oomKills, yesNo(c.alive), yesNo(c.ready), yesNo(c.inSync), heldOrNot(c.held()))
	if c.err != "" {
		first, _, _ := strings.Cut(c.err, "\n")
		p("")
		p("What failed: %s", first)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func heldOrNot(b bool) string {
	if b {
		return "held"
	}
	return "**did not hold**"
}

// writeSizingTarget is the chart's limit against its largest claim.
func (r *report) writeSizingTarget(p func(string, ...any)) {
	s, ok := r.checkedPoint()
	if !ok {
		notMeasured(p, "the chart's memory limit holds the largest size its README claims")
		return
	}
	c := s.check
	if c.unavailable != "" {
		p("| the chart's memory limit holds the largest size its README claims | not checked in this run: %s | – |", c.unavailable)
		return
	}
	p("| the chart's memory limit holds the largest size its README claims (%s clients, %s: no OOM kill, alive, ready, in sync after a renewal fan-out) | the group's highest charge %s (%.0f %%), %d OOM kills | %s |",
		sizing.Count(s.clients), sizing.Quantity(c.limit), mib(c.stats.maxUsage), 100*float64(c.stats.maxUsage)/float64(c.limit), c.stats.oomKills, verdict(c.held()))
}

// softLimit is the GOMEMLIMIT dualca sets in a container of limit bytes
// (cmd/dualca/memlimit.go: 90 %).
func softLimit(limit int64) int64 { return limit * 9 / 10 }
