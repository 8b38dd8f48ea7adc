package main

import (
	"image/color"
	"maps"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/dualca/dualca/test/lib/figure"
	"github.com/dualca/dualca/test/programs/plotgrid"
)

// drawSoak draws a soak run's timeline into a PNG at path: the healthy
// clients' traffic with the rotations and faults, the gateway's phase and
// roots, and each replica's resident memory, one above the other.
func drawSoak(path string, f figure.Soak) error {
	at := func(t time.Time) float64 { return t.Sub(f.Start).Minutes() }
	traffic, err := trafficPlot(f, at)
	if err != nil {
		return err
	}
	phases, err := soakPhasePlot(f, at)
	if err != nil {
		return err
	}
	memory, err := memoryPlot(f, at)
	if err != nil {
		return err
	}
	panels := []*plot.Plot{traffic, phases, memory}
	for _, p := range panels {
		p.X.Min, p.X.Max = 0, f.Elapsed.Minutes()
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

func trafficPlot(f figure.Soak, at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Healthy clients' handshakes per second; rotations (green) and faults (orange)"
	p.X.Label.Text = "minutes"
	rate, failed := rates(f.Samples, at)
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
	top := 1.0
	for _, r := range rate {
		top = max(top, r.Y)
	}
	for _, e := range f.Events {
		c := orange
		if e.Rotation {
			c = green
		}
		l, err := plotter.NewLine(plotter.XYs{{X: at(e.At), Y: 0}, {X: at(e.At), Y: top * 1.05}})
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

// rates are the handshakes and the failed handshakes per second between
// samples, over rateWindow at least: samples that came close together (a
// sampler held up, then catching up) make no spikes.
func rates(samples []figure.SoakSample, at func(time.Time) float64) (rate, failed plotter.XYs) {
	a := 0
	for i := 1; i < len(samples); i++ {
		b := samples[i]
		if b.At.Sub(samples[a].At) < rateWindow && i < len(samples)-1 {
			continue
		}
		dt := b.At.Sub(samples[a].At).Seconds()
		from := samples[a]
		a = i
		if dt <= 0 {
			continue
		}
		rate = append(rate, plotter.XY{X: at(b.At), Y: float64(b.Attempts-from.Attempts) / dt})
		if n := b.Failures - from.Failures; n > 0 {
			failed = append(failed, plotter.XY{X: at(b.At), Y: float64(n) / dt})
		}
	}
	return rate, failed
}

// phaseLevels places the phases on the y axis.
var phaseLevels = map[string]float64{"": 0, "Steady": 1, "Bundle": 2, "Renewing": 3, "Retiring": 4}

func soakPhasePlot(f figure.Soak, at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "The gateway's phase (0 deleted, 1 Steady, 2 Bundle, 3 Renewing, 4 Retiring), current root and server root (R number)"
	p.X.Label.Text = "minutes"
	var phase, root, server plotter.XYs
	for _, s := range f.Samples {
		phase = append(phase, plotter.XY{X: at(s.At), Y: phaseLevels[s.Phase]})
		root = append(root, plotter.XY{X: at(s.At), Y: float64(s.Root)})
		server = append(server, plotter.XY{X: at(s.At), Y: float64(s.Server)})
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

func memoryPlot(f figure.Soak, at func(time.Time) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "dualca's resident memory per replica process (MiB)"
	p.X.Label.Text = "minutes"
	byPid := map[int]plotter.XYs{}
	for _, m := range f.Memory {
		byPid[m.PID] = append(byPid[m.PID], plotter.XY{X: at(m.At), Y: m.RSS / (1 << 20)})
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
