package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/dualca/dualca/test/plotgrid"
)

// plot draws the propagation latency distribution and the memory
// comparison side by side into a PNG.
func (r *report) plot(path string) error {
	var panels []*plot.Plot
	if len(r.propagation) > 0 {
		p, err := r.latencyPlot()
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(r.memory) > 0 {
		p, err := r.memoryPlot()
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	return plotgrid.WritePNG(path, len(panels), 14*vg.Centimeter, 10*vg.Centimeter, panels...)
}

func (r *report) latencyPlot() (*plot.Plot, error) {
	all := pooled(r.propagation)
	values := make(plotter.Values, len(all))
	for i, d := range all {
		values[i] = float64(d) / float64(time.Millisecond)
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Propagation, root change → gateway written (%d rotations)", len(all))
	p.X.Label.Text = "milliseconds"
	p.Y.Label.Text = "rotations"
	h, err := plotter.NewHist(values, 40)
	if err != nil {
		return nil, err
	}
	h.FillColor = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	p.Add(h)
	d := distributionOf(all)
	top := 0.0
	for _, b := range h.Bins {
		top = max(top, b.Weight)
	}
	for _, m := range []struct {
		name  string
		at    time.Duration
		color color.Color
	}{
		{"p50", d.p50, color.RGBA{G: 128, A: 255}},
		{"p99", d.p99, color.RGBA{R: 200, G: 120, A: 255}},
		{"target p99", 20 * time.Millisecond, color.RGBA{R: 200, A: 255}},
	} {
		x := float64(m.at) / float64(time.Millisecond)
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 0}, {X: x, Y: top}})
		if err != nil {
			return nil, err
		}
		l.Color = m.color
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s %.1f ms", m.name, x), l)
	}
	p.Legend.Top = true
	p.X.Min = 0
	return p, nil
}

func (r *report) memoryPlot() (*plot.Plot, error) {
	levels := r.opts()
	var dualca, baseline plotter.Values
	var names []string
	for _, n := range levels {
		d, b := r.memoryMedian(n)
		dualca, baseline = append(dualca, d/(1<<20)), append(baseline, b/(1<<20))
		names = append(names, fmt.Sprintf("%d Secrets", n))
	}
	p := plot.New()
	p.Title.Text = "Resident memory beside unrelated Secrets"
	p.Y.Label.Text = "MiB (median of runs)"
	w := vg.Points(18)
	bd, err := plotter.NewBarChart(dualca, w)
	if err != nil {
		return nil, err
	}
	bd.Color = color.RGBA{R: 70, G: 130, B: 180, A: 255}
	bd.Offset = -w / 2
	bb, err := plotter.NewBarChart(baseline, w)
	if err != nil {
		return nil, err
	}
	bb.Color = color.RGBA{R: 190, G: 190, B: 190, A: 255}
	bb.Offset = w / 2
	p.Add(bd, bb)
	p.Legend.Add("dualca", bd)
	p.Legend.Add("baseline: informer on all Secrets", bb)
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	return p, nil
}
