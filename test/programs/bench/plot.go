package main

import (
	"fmt"
	"image/color"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/dualca/dualca/test/programs/plotgrid"
)

// colors of the processes, the same in every panel.
var colors = map[string]color.Color{
	systemDualca:       color.RGBA{R: 70, G: 130, B: 180, A: 255},
	systemTrustManager: color.RGBA{R: 220, G: 120, B: 40, A: 255},
	systemCopier:       color.RGBA{R: 120, G: 120, B: 120, A: 255},
	informerName:       color.RGBA{R: 150, G: 150, B: 150, A: 255},
}

// plot draws the panels of what was measured into one PNG: the three
// systems' propagation, the memory side by side, the cost against roots,
// and the curves against selected clients.
func (r *report) plot(path string) error {
	var panels []*plot.Plot
	for _, make := range []func() (*plot.Plot, error){r.propagationPlot, r.memoryPlot, r.rootsPlot, r.scaleRSSPlot, r.scaleReconcilePlot, r.scaleFanoutPlot} {
		p, err := make()
		if err != nil {
			return err
		}
		if p != nil {
			panels = append(panels, p)
		}
	}
	if len(panels) == 0 {
		return nil
	}
	return plotgrid.WritePNG(path, 3, 13*vg.Centimeter, 10*vg.Centimeter, panels...)
}

func milliseconds(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// propagationPlot is each system's distribution, its runs pooled, as a
// cumulative curve; the legend gives each run's p99.
func (r *report) propagationPlot() (*plot.Plot, error) {
	if len(r.propagation) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Propagation, PUT acknowledged → target's watch event"
	p.X.Label.Text = "milliseconds"
	p.Y.Label.Text = "share of rotations, runs pooled"
	for _, system := range []string{systemDualca, systemTrustManager, systemCopier} {
		var all []time.Duration
		var p99s []string
		for _, res := range r.propagation {
			if res.system == system {
				all = append(all, res.samples...)
				p99s = append(p99s, strings.TrimSuffix(ms(distributionOf(res.samples).p99), " ms"))
			}
		}
		if len(all) == 0 {
			continue
		}
		slices.Sort(all)
		pts := make(plotter.XYs, len(all))
		for i, d := range all {
			pts[i] = plotter.XY{X: milliseconds(d), Y: float64(i+1) / float64(len(all))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = colors[system]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s p99 by run %s ms", system, strings.Join(p99s, " / ")), l)
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.X.Min = 0
	return p, nil
}

// memoryPlot is the resident sets side by side in each condition.
func (r *report) memoryPlot() (*plot.Plot, error) {
	if len(r.memory) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Resident memory, side by side"
	p.Y.Label.Text = "MiB"
	w := vg.Points(12)
	var names []string
	for _, m := range r.memory {
		names = append(names, m.condition)
	}
	for i, name := range []string{systemDualca, systemTrustManager, informerName} {
		var v plotter.Values
		for _, m := range r.memory {
			v = append(v, float64(m.rss[name])/(1<<20))
		}
		bars, err := plotter.NewBarChart(v, w)
		if err != nil {
			return nil, err
		}
		bars.Color = colors[name]
		bars.Offset = w * vg.Length(i-1)
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.NominalX(names...)
	return p, nil
}

// rootsPlot is dualca's propagation against the roots in its bundle, with
// the floor's p99 at each size.
func (r *report) rootsPlot() (*plot.Plot, error) {
	if len(r.roots) == 0 {
		return nil, nil
	}
	var p99, p50, floor plotter.XYs
	for _, pt := range r.roots {
		d := distributionOf(pt.samples)
		p99 = append(p99, plotter.XY{X: float64(pt.roots), Y: milliseconds(d.p99)})
		p50 = append(p50, plotter.XY{X: float64(pt.roots), Y: milliseconds(d.p50)})
		floor = append(floor, plotter.XY{X: float64(pt.roots), Y: milliseconds(distributionOf(pt.floor.samples).p99)})
	}
	p := plot.New()
	p.Title.Text = "dualca propagation against roots in the bundle"
	p.X.Label.Text = "roots in ca.crt"
	p.Y.Label.Text = "milliseconds"
	if err := plotutil.AddLinePoints(p, "p99", p99, "p50", p50, "floor p99 (a copier writing that size)", floor); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

func (r *report) scaleLine(title, ylabel string, y func(scalePoint) float64) (*plot.Plot, error) {
	if len(r.scale) == 0 {
		return nil, nil
	}
	var pts plotter.XYs
	for _, s := range r.scale {
		pts = append(pts, plotter.XY{X: float64(s.clients), Y: y(s)})
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "selected clients"
	p.Y.Label.Text = ylabel
	if err := plotutil.AddLinePoints(p, "dualca", pts); err != nil {
		return nil, err
	}
	p.Y.Min = 0
	return p, nil
}

func (r *report) scaleRSSPlot() (*plot.Plot, error) {
	return r.scaleLine("dualca resident memory against clients", "MiB", func(s scalePoint) float64 { return float64(s.rss) / (1 << 20) })
}

func (r *report) scaleReconcilePlot() (*plot.Plot, error) {
	return r.scaleLine("dualca reconcile at rest (mean) against clients", "milliseconds", func(s scalePoint) float64 { return milliseconds(s.reconcile.mean) })
}

func (r *report) scaleFanoutPlot() (*plot.Plot, error) {
	p, err := r.scaleLine(fmt.Sprintf("renewal triggers at %d/s against clients", scaleQPS), "seconds", func(s scalePoint) float64 { return s.fanout.total.Seconds() })
	if p == nil || err != nil {
		return p, err
	}
	var ideal plotter.XYs
	for _, s := range r.scale {
		ideal = append(ideal, plotter.XY{X: float64(s.clients), Y: s.fanout.ideal.Seconds()})
	}
	l, err := plotter.NewLine(ideal)
	if err != nil {
		return nil, err
	}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	p.Add(l)
	p.Legend.Add("ideal, clients / rate", l)
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
