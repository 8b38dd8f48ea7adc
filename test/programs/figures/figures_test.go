package main

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"gonum.org/v1/plot/plotter"

	"github.com/dualca/dualca/test/lib/figure"
)

var start = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// at is a moment s seconds into the run.
func at(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }

// Both figures are drawn from the files the suites write, through main's
// path: a grid of one column for the soak, three for the dashboard.
func TestTheFiguresAreDrawnFromTheSuitesFiles(t *testing.T) {
	dir := t.TempDir()
	soak := figure.Soak{Start: start, Elapsed: time.Minute,
		Samples: []figure.SoakSample{
			{At: at(0), Phase: "Steady", Root: 1, Server: 1},
			{At: at(20), Attempts: 200, Phase: "Bundle", Root: 2, Server: 1},
			{At: at(40), Attempts: 400, Failures: 1, Phase: "Steady", Root: 2, Server: 2},
		},
		Events: []figure.SoakEvent{{At: at(10), Rotation: true}, {At: at(30)}},
		Memory: []figure.Memory{{At: at(0), PID: 7, RSS: 30 << 20}, {At: at(30), PID: 7, RSS: 32 << 20}}}
	scrapes := func(values ...float64) []model.SamplePair {
		var s []model.SamplePair
		for i, v := range values {
			s = append(s, model.SamplePair{Timestamp: model.TimeFromUnixNano(at(float64(i)).UnixNano()), Value: model.SampleValue(v)})
		}
		return s
	}
	series := map[string]model.Matrix{
		"Rotation phase":      {{Metric: model.Metric{"phase": "Steady"}, Values: scrapes(1, 0, 1)}, {Metric: model.Metric{"phase": "Renewing"}, Values: scrapes(0, 1, 0)}},
		"Roots in the bundle": {{Metric: model.Metric{"root": "R1", "role": "current"}, Values: scrapes(4e12, 4e12)}},
		"Propagation time":    {{Metric: model.Metric{"le": "0.1"}, Values: scrapes(0, 2)}, {Metric: model.Metric{"le": "+Inf"}, Values: scrapes(0, 3)}},
	}
	for _, title := range []string{"Bundle and server certificate", "Clients", "Renewals by result", "Rotation lag", "Sync errors by reason", "Forced server switches"} {
		series[title] = model.Matrix{{Metric: model.Metric{"state": "renewed"}, Values: scrapes(1, 2, 3)}}
	}
	dashboard := figure.Dashboard{Start: start, End: at(3), Scrape: time.Second, LagThreshold: 3, Series: series}

	for _, tc := range []struct {
		kind          string
		data          any
		width, height int
	}{{"soak", soak, 1, 3}, {"dashboard", dashboard, 3, 3}} {
		t.Run(tc.kind, func(t *testing.T) {
			g := NewWithT(t)
			in, out := filepath.Join(dir, tc.kind+".json"), filepath.Join(dir, tc.kind+".png")
			g.Expect(figure.Write(in, tc.data)).To(Succeed())
			g.Expect(drawFigure(tc.kind, in, out)).To(Succeed())
			f, err := os.Open(out)
			g.Expect(err).NotTo(HaveOccurred())
			defer func() { _ = f.Close() }()
			img, err := png.DecodeConfig(f)
			g.Expect(err).NotTo(HaveOccurred(), "a PNG")
			// Cells of one size, tc.width across and tc.height down.
			g.Expect(float64(img.Width) / float64(img.Height)).To(BeNumerically("~", cellRatio(tc.kind)*float64(tc.width)/float64(tc.height), 0.01))
		})
	}
}

// cellRatio is a figure's cell width over its height.
func cellRatio(kind string) float64 {
	if kind == "soak" {
		return 24.0 / 8
	}
	return 12.0 / 7
}

func TestADashboardWithoutAPanelsSeriesIsNotDrawn(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "dashboard.json")
	g.Expect(figure.Write(in, figure.Dashboard{Start: start, End: at(3), Scrape: time.Second})).To(Succeed())
	g.Expect(drawFigure("dashboard", in, filepath.Join(dir, "dashboard.png"))).To(MatchError(ContainSubstring(`no series for panel "Rotation phase"`)))
	g.Expect(drawFigure("bench", in, filepath.Join(dir, "bench.png"))).To(MatchError(ContainSubstring("soak or dashboard")))
}

// Samples that came close together (a sampler held up, then catching up)
// are taken over rateWindow at least: no spike in the rate.
func TestTheSoakRateIgnoresSamplesCloserThanItsWindow(t *testing.T) {
	g := NewWithT(t)
	minutes := func(t time.Time) float64 { return t.Sub(start).Minutes() }
	rate, failed := rates([]figure.SoakSample{
		{At: at(0)}, {At: at(10), Attempts: 100}, {At: at(10.1), Attempts: 150}, {At: at(20), Attempts: 200, Failures: 2}, {At: at(30), Attempts: 300, Failures: 2},
	}, minutes)
	g.Expect(rate).To(HaveLen(3))
	for _, r := range rate {
		g.Expect(r.Y).To(BeNumerically("~", 10, 0.01), "100 handshakes every 10 s")
	}
	g.Expect(failed).To(HaveLen(1))
	g.Expect(failed[0]).To(Equal(plotter.XY{X: minutes(at(20)), Y: 0.2}), "2 failed over the 10 s to 20 s")
}

// A phase is a band from its first scrape at 1 to the scrape after its last.
func TestAPhaseLastsToTheNextScrape(t *testing.T) {
	g := NewWithT(t)
	s := &model.SampleStream{}
	for i, v := range []float64{0, 1, 1, 0, 1} {
		s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(at(float64(i)).UnixNano()), Value: model.SampleValue(v)})
	}
	g.Expect(activeRuns(s, start, time.Second)).To(Equal([][2]float64{{1, 3}, {4, 5}}))
}
