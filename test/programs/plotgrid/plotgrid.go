// Package plotgrid writes gonum plots side by side into one PNG: the
// benchmark's figure (bench) and the soak's and the dashboard's pictures
// (figures) are made that way.
package plotgrid

import (
	"fmt"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// WritePNG draws plots in a grid of cols columns, row by row, each in a
// cell of width by height, and writes the image to path.
func WritePNG(path string, cols int, width, height vg.Length, plots ...*plot.Plot) error {
	if len(plots) == 0 || cols < 1 {
		return fmt.Errorf("writing %s: nothing to draw", path)
	}
	cols = min(cols, len(plots))
	rows := (len(plots) + cols - 1) / cols
	img := vgimg.New(vg.Length(cols)*width, vg.Length(rows)*height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter / 2,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	for i, p := range plots {
		p.Draw(tiles.At(dc, i%cols, i/cols))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
