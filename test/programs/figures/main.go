// Command figures draws the pictures of the suites' reports from the series
// the suites measured: a suite writes them as JSON (test/lib/figure), so
// that the plotting modules stay out of the product's module.
//
//	figures soak SERIES.json OUT.png       # make soak, make soak-leaks
//	figures dashboard SERIES.json OUT.png  # make dashboard-png
package main

import (
	"fmt"
	"os"

	"github.com/dualca/dualca/test/lib/figure"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: figures soak|dashboard SERIES.json OUT.png")
		os.Exit(2)
	}
	if err := drawFigure(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "figures:", err)
		os.Exit(1)
	}
	fmt.Printf("%s drawn into %s\n", os.Args[1], os.Args[3])
}

// drawFigure draws the figure of kind from the series at in into the PNG at out.
func drawFigure(kind, in, out string) error {
	switch kind {
	case "soak":
		var f figure.Soak
		if err := figure.Read(in, &f); err != nil {
			return err
		}
		return drawSoak(out, f)
	case "dashboard":
		var f figure.Dashboard
		if err := figure.Read(in, &f); err != nil {
			return err
		}
		return drawDashboard(out, f)
	}
	return fmt.Errorf("no figure %q: soak or dashboard", kind)
}
