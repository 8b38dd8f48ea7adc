package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/test/lib/monitor"
)

func TestSummaryVerdictAndExitCode(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		s        summary
		wantCode int
		want     string
	}{
		"zero-downtime without a failure passes": {
			s:        summary{ok: 4000},
			wantCode: exitOK, want: "PASS  not one of 4,000 handshakes failed",
		},
		"two rotations, the second overlapping the first, say so": {
			s:        summary{ok: 4000, rotations: []rotationSummary{{n: 1}, {n: 2, came: during{what: "every client holds an R2 certificate", overlapping: true}}}},
			wantCode: exitOK, want: "across 2 root rotations, the second overlapping the first\n",
		},
		"a second rotation that came too late to overlap does not claim it": {
			s:        summary{ok: 4000, rotations: []rotationSummary{{n: 1}, {n: 2, came: during{what: "the server already presents it"}}}},
			wantCode: exitOK, want: "across 2 root rotations\n",
		},
		"zero-downtime with one failed handshake fails": {
			s:        summary{ok: 4000, failed: 1, errors: map[string]int{"handshake: remote error: tls: bad certificate": 1}},
			wantCode: exitFailed, want: "FAIL  1 handshake failed",
		},
		"a rejection seen only by the gateway fails too": {
			s:        summary{ok: 4000, rejected: 2},
			wantCode: exitFailed, want: "the gateway rejected 2",
		},
		"a broken invariant fails even when every handshake passed": {
			s:        summary{ok: 4000, checked: monitor.Result{ViolationCount: 1, Violations: []string{"the gateway does not trust the root of client agent-3"}}},
			wantCode: exitFailed, want: "invariants  BROKEN",
		},
		"key material in dualca's log fails": {
			s:        summary{ok: 4000, logLines: 30, logLeaks: 1},
			wantCode: exitFailed, want: "1 of its 30 lines hold key or certificate material",
		},
		"legacy failures fail and say it is the downtime avoided": {
			s:        summary{legacy: true, ok: 1500, failed: 800, clients: 30, cutOff: 30, longest: 20, interval: 150 * time.Millisecond},
			wantCode: exitFailed, want: "the downtime the zero-downtime strategy avoids",
		},
		"a legacy run without a failure passes": {
			s:        summary{legacy: true, ok: 1500},
			wantCode: exitOK, want: "PASS  no handshake failed this time",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			text := tc.s.text()
			if got := tc.s.exitCode(); got != tc.wantCode {
				t.Errorf("exit code %d, want %d", got, tc.wantCode)
			}
			if !strings.Contains(text, tc.want) {
				t.Errorf("summary lacks %q:\n%s", tc.want, text)
			}
		})
	}
}

func TestSummaryTimeline(t *testing.T) {
	t.Parallel()
	s := summary{ok: 10, rotations: []rotationSummary{{
		n: 1, from: "R1", to: "R2", until: "R3's", ok: 7,
		steps: []step{
			{at: 2400 * time.Millisecond, what: "Renewing"},
			{at: -1, what: "the server never presented R2"},
			{at: 0, what: "the root Secret holds R2"},
			{at: 28 * time.Millisecond, what: "the gateway trusts R2"},
		},
	}}}
	text := s.text()
	want := []string{"rotation 1  R1 → R2", "+0 ms  the root Secret holds R2", "+28 ms  the gateway trusts R2", "+2.4s  Renewing",
		"—  the server never presented R2", "handshakes from R2's arrival to R3's: 7 ok, 0 failed"}
	rest := text
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("want %q, in this order:\n%s", w, text)
		}
		rest = rest[i+len(w):]
	}
}

func TestCountsBetween(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	counts := []count{{t0, 0, 0}, {t0.Add(time.Second), 100, 0}, {t0.Add(2 * time.Second), 150, 40}, {t0.Add(3 * time.Second), 250, 40}}
	tests := map[string]struct {
		from, to   time.Time
		ok, failed int
	}{
		"between two samples counts from the last one before each": {t0.Add(1500 * time.Millisecond), t0.Add(3500 * time.Millisecond), 150, 40},
		"a moment before the first sample counts from the first":   {t0.Add(-time.Second), t0.Add(time.Second), 100, 0},
		"on a sample":                   {t0.Add(2 * time.Second), t0.Add(3 * time.Second), 100, 0},
		"an empty interval counts none": {t0.Add(2 * time.Second), t0.Add(2 * time.Second), 0, 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if ok, failed := countsBetween(counts, tc.from, tc.to); ok != tc.ok || failed != tc.failed {
				t.Errorf("got %d ok, %d failed; want %d, %d", ok, failed, tc.ok, tc.failed)
			}
		})
	}
}
