package soak

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/figure"
)

// The plot marks what happened to the gateway: rotations requested and
// faults injected, not the rotations or kills skipped nor the run's phases.
func TestThePlotMarksRotationsAndFaultsOnly(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	o := &outcome{start: start, elapsed: time.Minute,
		timeline: []event{
			{at: at(1), kind: "phase"}, {at: at(2), kind: rotationRequested}, {at: at(3), kind: rotationSkipped},
			{at: at(4), kind: killSkipped}, {at: at(5), kind: "delete gateway Secret"},
		},
		samples:   []sample{{at: at(2), attempts: 9, failures: 1, broken: 4, phase: "Bundle", root: 2, server: 1}},
		resources: []resource{{at: at(2), pid: 42, rss: 1 << 25, heap: 1 << 20, gogc: 400, leader: true, roots: 2}},
	}
	g.Expect(o.figure()).To(Equal(figure.Soak{Start: start, Elapsed: time.Minute,
		Samples: []figure.SoakSample{{At: at(2), Attempts: 9, Failures: 1, Phase: "Bundle", Root: 2, Server: 1}},
		Events:  []figure.SoakEvent{{At: at(2), Rotation: true}, {At: at(5)}},
		Memory:  []figure.Memory{{At: at(2), PID: 42, RSS: 1 << 25, Heap: 1 << 20, GOGC: 400, Leader: true, Roots: 2}},
	}))
}
