// Package dashboard proves the Grafana dashboard the chart ships
// (charts/dualca/dashboards/dualca.json) against the real thing: a
// Prometheus server (bin/prometheus) scrapes the real dualca binary every
// second while it rotates a cert-manager root with clients on a real API
// server, and evaluates the chart's alert rules, rendered by helm as the
// chart ships them. Every panel's queries then run through Prometheus'
// HTTP API during and after the rotation, and must return data and the
// values the rotation implies; every query parses with Prometheus' own
// parser and reads only metrics docs/metrics.md describes; and
// DualcaRotationLag fires while dualca is held behind and resolves once it
// catches up.
//
// With -dashboard.series=PATH the test also writes the series its main
// panels showed, which make dashboard-png draws into the README's picture
// with test/programs/figures.
package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// dashboardJSON is the dashboard's model, as far as the test reads it.
type dashboardJSON struct {
	UID        string `json:"uid"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Type string `json:"type"`
	Name string `json:"name"`
	// Query is "prometheus" for the datasource variable, and a query
	// object for a query variable, whose definition holds its text.
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int        `json:"id"`
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Datasource datasource `json:"datasource"`
	Targets    []target   `json:"targets"`
}

type target struct {
	RefID        string     `json:"refId"`
	Expr         string     `json:"expr"`
	Instant      bool       `json:"instant"`
	LegendFormat string     `json:"legendFormat"`
	Datasource   datasource `json:"datasource"`
}

// loadDashboard reads the chart's dashboard.
func loadDashboard(t *testing.T) dashboardJSON {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca", "dashboards", "dualca.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboardJSON
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dualca.json: %v", err)
	}
	return d
}

// grafanaVars are the values the test gives the dashboard's variables and
// Grafana's built-in interval variables, as Grafana would substitute them.
type grafanaVars struct {
	namespace, job string
	// rateInterval is $__rate_interval: Grafana makes it at least four
	// scrape intervals.
	rateInterval time.Duration
	// rangeLength is $__range, the dashboard's time range.
	rangeLength time.Duration
}

// expand substitutes the variables in a query, as Grafana does before
// sending it: a multi-value variable becomes a regular expression.
func (v grafanaVars) expand(expr string) string {
	return strings.NewReplacer(
		"$__rate_interval", promDuration(v.rateInterval),
		"$__range", promDuration(v.rangeLength),
		"$namespace", regexp.QuoteMeta(v.namespace),
		"$job", regexp.QuoteMeta(v.job),
	).Replace(expr)
}

// promDuration is d in whole seconds, rounded up, as PromQL writes it.
func promDuration(d time.Duration) string {
	return fmt.Sprintf("%ds", int64((d+time.Second-1)/time.Second))
}

// documentedMetrics are the metric names docs/metrics.md names in
// backquotes: dualca's table, and the controller-runtime metrics it
// mentions.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(controlplane.TestRepoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z_:]+)(\\{[^`]*\\})?`").FindAllStringSubmatch(string(data), -1) {
		if strings.Contains(m[1], "_") {
			names[m[1]] = true
		}
	}
	return names
}

// documented reports whether name, or the histogram it is a series of, is
// among the documented metrics.
func documented(docs map[string]bool, name string) bool {
	if docs[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && docs[base] {
			return true
		}
	}
	return false
}
