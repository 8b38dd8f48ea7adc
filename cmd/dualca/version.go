package main

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// version and revision say which dualca this is. `make build` and `make
// image` set them with -ldflags "-X main.version=... -X main.revision=...";
// a plain `go build` leaves these defaults.
var (
	version  = "(devel)"
	revision = "unknown"
)

// buildInfo is what `dualca version` prints, the start-up log line carries
// and the dualca_build_info metric exports.
type buildInfo struct {
	Version, Revision, GoVersion string
}

// currentBuild reads the Go version from the binary's build info, which
// every module-mode build has; version and revision come from the linker.
func currentBuild() buildInfo {
	b := buildInfo{Version: version, Revision: revision, GoVersion: "unknown"}
	if info, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = info.GoVersion
	}
	return b
}

// String is the line `dualca version` prints.
func (b buildInfo) String() string {
	return fmt.Sprintf("dualca %s (commit %s, %s)", b.Version, b.Revision, b.GoVersion)
}

// registerBuildInfo exports dualca_build_info{version,revision,goversion} 1
// on reg: controller-runtime's registry, which the manager's metrics
// endpoint serves. The values never change in a process, so a second call
// (tests run several managers in one process) keeps the first gauge.
func registerBuildInfo(reg prometheus.Registerer, b buildInfo) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_build_info",
		Help: "Always 1; its labels say which dualca runs: version, source revision and Go version.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(b.Version, b.Revision, b.GoVersion).Set(1)
	err := reg.Register(g)
	if are := (prometheus.AlreadyRegisteredError{}); errors.As(err, &are) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registering dualca_build_info: %w", err)
	}
	return nil
}
