// Package figure holds what a suite measured for a picture, as the JSON
// file it writes and the figures program of test/programs draws: the
// suites, like the rest of the product's module, stay free of the plotting
// modules, which only the programs' module requires.
package figure

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/common/model"
)

// Soak is a soak run's timeline (docs/soak.png).
type Soak struct {
	Start   time.Time
	Elapsed time.Duration
	Samples []SoakSample
	// Events are the rotations requested and the faults injected.
	Events []SoakEvent
	// Memory is each replica process's resident set over the run.
	Memory []Memory
}

// SoakSample is the healthy clients' traffic and the gateway's state at a
// moment.
type SoakSample struct {
	At                 time.Time
	Attempts, Failures int    // the healthy clients' totals so far
	Phase              string // "" while the gateway Secret is deleted
	Root, Server       int    // the current and the server root (1 for R1), 0 unknown
}

// SoakEvent is a rotation requested or a fault injected.
type SoakEvent struct {
	At       time.Time
	Rotation bool // else a fault
}

// Memory is one process's memory at a moment: enough to re-run the soak's
// leak judge on a recorded run.
type Memory struct {
	At  time.Time
	PID int
	RSS float64 // bytes
	// Heap is the live heap the last GC marked (bytes) and GOGC the GC's
	// percentage then: the heap goal is Heap × (1 + GOGC/100).
	Heap, GOGC float64
	Leader     bool    // the process held the lease
	Roots      float64 // roots in the gateway's bundle, as it last decided
}

// Dashboard is what the dashboard's panels showed over the dashboard test
// (docs/dashboard.png), as a real Prometheus answered their queries.
type Dashboard struct {
	Start, End time.Time
	// Scrape is Prometheus' scrape interval: a sample stands until the next.
	Scrape time.Duration
	// LagThreshold is the rotation lag alert's threshold, in seconds.
	LagThreshold float64
	// Series are the range results of each panel's first target (refId A),
	// by panel title.
	Series map[string]model.Matrix
}

// Write writes a figure's data (a Soak or a Dashboard) to path as JSON.
func Write(path string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644) //nolint:gosec // G306: measurements, read by the figures program
}

// Read reads what Write wrote at path into data.
func Read(path string, data any) error {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the file the make target names
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, data); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}
