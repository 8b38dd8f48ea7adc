// Pins promtool, which the alert tests (test/alerts) run against the
// chart's PrometheusRule. Nothing here is compiled: tools.mk builds
// ./cmd/promtool inside the downloaded github.com/prometheus/prometheus
// module, with that module's own go.mod and go.sum, because `go install`
// rejects it for its replace directives. This file is the single place the
// version lives (v0.315.0 is Prometheus 3.15.0), and go.sum makes the
// download verified without asking the checksum database.
//
// Do not run `go mod tidy` here: no package imports prometheus, so tidy
// would drop the requirement.
module github.com/dualca/dualca/test/tools/promtool

go 1.26.8

require github.com/prometheus/prometheus v0.315.0
