package main

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/dualca/dualca/test/lib/figure"
	"github.com/dualca/dualca/test/programs/plotgrid"
)

// drawDashboard draws the dashboard's time series panels, from the series
// Prometheus returned for their queries over the dashboard test, into a PNG
// at path: what Grafana would show for the test's time range.
func drawDashboard(path string, f figure.Dashboard) error {
	type panelPlot struct {
		title string
		draw  func(title string, m model.Matrix) (*plot.Plot, error)
	}
	start := f.Start
	var plots []*plot.Plot
	for _, pp := range []panelPlot{
		{"Rotation phase", func(title string, m model.Matrix) (*plot.Plot, error) { return phasePlot(title, m, start, f.Scrape) }},
		{"Bundle and server certificate", lines(start, "", "roots in ca.crt", 0)},
		{"Roots in the bundle", func(title string, m model.Matrix) (*plot.Plot, error) { return rootsPlot(title, m, start, f.Scrape) }},
		{"Clients", lines(start, "state", "clients", 0)},
		{"Renewals by result", lines(start, "result", "renewals per second", 0)},
		{"Rotation lag", lines(start, "", "seconds", f.LagThreshold)},
		{"Propagation time", func(title string, m model.Matrix) (*plot.Plot, error) { return heatmapPlot(title, m, start) }},
		{"Sync errors by reason", lines(start, "reason", "errors in 5 s", 0)},
		{"Forced server switches", lines(start, "", "in the range", 0)},
	} {
		m, ok := f.Series[pp.title]
		if !ok {
			return fmt.Errorf("no series for panel %q", pp.title)
		}
		p, err := pp.draw(pp.title, m)
		if err != nil {
			return fmt.Errorf("panel %q: %w", pp.title, err)
		}
		p.X.Min, p.X.Max = 0, f.End.Sub(start).Seconds()
		p.X.Label.Text = "seconds into the test"
		plots = append(plots, p)
	}
	return plotgrid.WritePNG(path, 3, 12*vg.Centimeter, 7*vg.Centimeter, plots...)
}

// lines draws a series per value of label, and a dashed threshold line
// when threshold is not 0.
func lines(start time.Time, label model.LabelName, unit string, threshold float64) func(string, model.Matrix) (*plot.Plot, error) {
	return func(title string, m model.Matrix) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = unit
		p.Y.Min = 0
		slices.SortFunc(m, func(a, b *model.SampleStream) int { return cmp.Compare(a.Metric[label], b.Metric[label]) })
		for i, s := range m {
			l, err := plotter.NewLine(points(s, start))
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
			p.Add(l)
			if label != "" {
				p.Legend.Add(string(s.Metric[label]), l)
			}
		}
		if threshold != 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: threshold}, {X: math.MaxInt32, Y: threshold}})
			if err != nil {
				return nil, err
			}
			l.Color, l.Dashes = color.RGBA{R: 200, A: 255}, []vg.Length{vg.Points(4), vg.Points(2)}
			p.Add(l)
			p.Legend.Add("alert threshold", l)
		}
		// Room above the highest line for the legend.
		top := threshold
		for _, s := range m {
			for _, v := range s.Values {
				top = math.Max(top, float64(v.Value))
			}
		}
		p.Y.Max = math.Max(1, top) * 1.4
		p.Legend.Top, p.Legend.Left = true, true
		return p, nil
	}
}

// points are a series' samples, x in seconds since start, NaN left out.
func points(s *model.SampleStream, start time.Time) plotter.XYs {
	xys := make(plotter.XYs, 0, len(s.Values))
	for _, v := range s.Values {
		if !math.IsNaN(float64(v.Value)) {
			xys = append(xys, plotter.XY{X: v.Timestamp.Time().Sub(start).Seconds(), Y: float64(v.Value)})
		}
	}
	return xys
}

// phasePlot draws a band per phase over the time it was the gateway's, as
// Grafana's state timeline does.
func phasePlot(title string, m model.Matrix, start time.Time, scrape time.Duration) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	order := []string{"Steady", "Bundle", "Renewing", "Retiring", "Legacy"}
	for _, s := range m {
		row := slices.Index(order, string(s.Metric["phase"]))
		if row < 0 {
			return nil, fmt.Errorf("unknown phase %q", s.Metric["phase"])
		}
		for _, run := range activeRuns(s, start, scrape) {
			l, err := plotter.NewLine(plotter.XYs{{X: run[0], Y: float64(row)}, {X: run[1], Y: float64(row)}})
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = plotutil.Color(row), vg.Points(9)
			p.Add(l)
		}
	}
	p.NominalY(order...)
	p.Y.Min, p.Y.Max = -0.5, float64(len(order))-0.5
	return p, nil
}

// rootsPlot draws a band per root over the time it was in the bundle,
// coloured by its role, each root labelled with its expiry: the table
// panel of the roots (their expiry timestamps, in milliseconds) over time.
func rootsPlot(title string, m model.Matrix, start time.Time, scrape time.Duration) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title + " by role"
	slices.SortFunc(m, func(a, b *model.SampleStream) int {
		return a.Values[0].Timestamp.Time().Compare(b.Values[0].Timestamp.Time())
	})
	var rows []string
	var names []string
	roles := map[string]color.Color{
		"current": color.RGBA{G: 150, A: 255}, "server": color.RGBA{R: 40, G: 100, B: 220, A: 255}, "previous": color.RGBA{R: 150, G: 150, B: 150, A: 255},
	}
	legend := map[string]bool{}
	for _, s := range m {
		root, role := string(s.Metric["root"]), string(s.Metric["role"])
		row := slices.Index(rows, root)
		if row < 0 {
			row, rows = len(rows), append(rows, root)
			expiry := time.UnixMilli(int64(s.Values[0].Value)).UTC().Format(time.DateOnly)
			names = append(names, fmt.Sprintf("%s, to %s", root, expiry))
		}
		c, ok := roles[role]
		if !ok {
			return nil, fmt.Errorf("unknown role %q", role)
		}
		for _, run := range presentRuns(s, start, scrape) {
			l, err := plotter.NewLine(plotter.XYs{{X: run[0], Y: float64(row)}, {X: run[1], Y: float64(row)}})
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(9)
			p.Add(l)
			if !legend[role] {
				legend[role] = true
				p.Legend.Add(role, l)
			}
		}
	}
	p.NominalY(names...)
	p.Y.Min, p.Y.Max = -0.5, float64(len(rows))+0.5
	p.Legend.Top = true
	return p, nil
}

// presentRuns are the stretches, in seconds since start, over which the
// series had samples at every scrape, each to the next scrape.
func presentRuns(s *model.SampleStream, start time.Time, scrape time.Duration) [][2]float64 {
	var runs [][2]float64
	for i, v := range s.Values {
		x := v.Timestamp.Time().Sub(start).Seconds()
		if i > 0 && v.Timestamp.Sub(s.Values[i-1].Timestamp) <= scrape+time.Millisecond {
			runs[len(runs)-1][1] = x + scrape.Seconds()
			continue
		}
		runs = append(runs, [2]float64{x, x + scrape.Seconds()})
	}
	return runs
}

// activeRuns are the stretches, in seconds since start, over which the
// series was 1, each to the next scrape.
func activeRuns(s *model.SampleStream, start time.Time, scrape time.Duration) [][2]float64 {
	var runs [][2]float64
	on := false
	for _, v := range s.Values {
		x := v.Timestamp.Time().Sub(start).Seconds()
		switch {
		case v.Value == 1 && !on:
			runs, on = append(runs, [2]float64{x, x + scrape.Seconds()}), true
		case v.Value == 1:
			runs[len(runs)-1][1] = x + scrape.Seconds()
		default:
			on = false
		}
	}
	return runs
}

// heatmapPlot draws, for every scrape, the propagations that ended in each
// bucket (the cumulative buckets taken apart) as a mark at the bucket's
// upper bound, on a log scale, as Grafana's heatmap of the same query.
func heatmapPlot(title string, m model.Matrix, start time.Time) (*plot.Plot, error) {
	type bucket struct {
		le     float64
		stream *model.SampleStream
	}
	var buckets []bucket
	for _, s := range m {
		le, err := strconv.ParseFloat(string(s.Metric["le"]), 64)
		if err != nil {
			return nil, fmt.Errorf("bucket %q: %w", s.Metric["le"], err)
		}
		buckets = append(buckets, bucket{le, s})
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	var marks plotter.XYZs
	for i, b := range buckets {
		for j, v := range b.stream.Values {
			n := float64(v.Value)
			if i > 0 && j < len(buckets[i-1].stream.Values) {
				n -= float64(buckets[i-1].stream.Values[j].Value)
			}
			if n > 0.5 {
				y := b.le
				if math.IsInf(y, 1) {
					y = 2 * buckets[i-1].le
				}
				marks = append(marks, plotter.XYZ{X: v.Timestamp.Time().Sub(start).Seconds(), Y: y, Z: n})
			}
		}
	}
	p := plot.New()
	p.Title.Text = title + " (propagations per bucket)"
	p.Y.Label.Text = "seconds, bucket upper bound"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0.001, 64
	if len(marks) == 0 {
		return p, nil
	}
	sc, err := plotter.NewScatter(marks)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyleFunc = func(i int) draw.GlyphStyle {
		return draw.GlyphStyle{Color: color.RGBA{R: 230, G: 120, B: 20, A: 255}, Shape: draw.BoxGlyph{},
			Radius: vg.Points(3 + math.Min(marks[i].Z, 4))}
	}
	p.Add(sc)
	return p, nil
}
