package dashboard

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"

	"github.com/dualca/dualca/test/lib/figure"
)

// pictured are the panels docs/dashboard.png shows, by title: their first
// target's series are what test/programs/figures draws them from.
var pictured = []string{
	"Rotation phase", "Bundle and server certificate", "Roots in the bundle",
	"Clients", "Renewals by result", "Rotation lag",
	"Propagation time", "Sync errors by reason", "Forced server switches",
}

// writeSeries writes the series Prometheus returned for the pictured
// panels' queries over the test to path: what Grafana would show for the
// test's time range, for make dashboard-png to draw.
func writeSeries(path string, got map[string]panelResults, start, end time.Time) error {
	f := figure.Dashboard{Start: start, End: end, Scrape: scrape, LagThreshold: lagThreshold, Series: map[string]model.Matrix{}}
	for _, title := range pictured {
		r, ok := got[title]["A"]
		if !ok {
			return fmt.Errorf("no results for panel %q target A", title)
		}
		f.Series[title] = r.series
	}
	return figure.Write(path, f)
}
