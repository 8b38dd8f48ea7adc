package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
)

func TestRowFormat(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		row  row
		want []string // substrings, in order
	}{
		"the server's root is bracketed among the bundle's roots, newest first": {
			row:  row{at: 12300 * time.Millisecond, root: "R3", phase: "Renewing", bundle: []string{"R3", "R2", "R1"}, server: "R1", total: 30},
			want: []string{"  12.3s", "R3", "Renewing", "R3 R2 [R1]"},
		},
		"pending and failed clients are shown, with a bar of the renewed": {
			row:  row{root: "R2", phase: "Renewing", clients: bundle.Progress{Renewed: 18, Pending: 11, Failed: 1}, total: 30},
			want: []string{"▕██████░░░░▏ 18/30 · 11 pending · 1 failed"},
		},
		"handshakes get thousands separators": {
			row:  row{root: "R1", phase: "Steady", clients: bundle.Progress{Renewed: 30}, total: 30, ok: 1234567, failed: 0},
			want: []string{"▕██████████▏ 30/30", "1,234,567 / 0"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := tc.row.format()
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("row %q: want %q (in this order)", got, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestBarIsFullOnlyWhenDone(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		n, total int
		want     string
	}{
		"none":                   {0, 30, "▕░░░░░░░░░░▏"},
		"half":                   {15, 30, "▕█████░░░░░▏"},
		"one short is not full":  {29, 30, "▕█████████░▏"},
		"all":                    {30, 30, "▕██████████▏"},
		"no clients is an empty": {0, 0, "▕░░░░░░░░░░▏"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := bar(tc.n, tc.total, 10); got != tc.want {
				t.Errorf("bar(%d, %d) = %q, want %q", tc.n, tc.total, got, tc.want)
			}
		})
	}
}

// samples are three stages of a rotation, sampled several times each.
func samples() []row {
	renewing := func(n int) row {
		return row{root: "R2", phase: "Renewing", bundle: []string{"R2", "R1"}, server: "R1",
			clients: bundle.Progress{Renewed: n, Pending: 30 - n}, total: 30, ok: 100 * n}
	}
	return []row{
		{root: "R1", phase: "Steady", bundle: []string{"R1"}, server: "R1", clients: bundle.Progress{Renewed: 30}, total: 30},
		{root: "R1", phase: "Steady", bundle: []string{"R1"}, server: "R1", clients: bundle.Progress{Renewed: 30}, total: 30},
		renewing(0), renewing(10), renewing(20), renewing(30),
		{root: "R2", phase: "Retiring", bundle: []string{"R2", "R1"}, server: "R2", clients: bundle.Progress{Renewed: 30}, total: 30},
	}
}

func TestNotOnATerminalEachStageIsOneLineWhenItBegins(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := &view{out: &out}
	v.say("before the table")
	v.start(time.Now())
	for i, r := range samples() {
		v.update(r, []string{"R1 aaaaaaaaaaaa", "R2 bbbbbbbbbbbb"})
		if i == 3 {
			v.say("a line of narration")
		}
	}
	v.close()

	got := out.String()
	if strings.Contains(got, "\x1b") {
		t.Fatalf("escape sequences in output that is not a terminal:\n%q", got)
	}
	var rows []string
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(strings.TrimLeft(l, " "), "0.0s") {
			rows = append(rows, l)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("want one row per stage (3), got %d:\n%s", len(rows), got)
	}
	if !strings.Contains(rows[1], "Renewing") || !strings.Contains(rows[1], "0/30 · 30 pending") {
		t.Errorf("the Renewing row shows the stage as it began, got %q", rows[1])
	}
	if strings.Count(got, tableHeading) != 1 || !strings.HasPrefix(got, "before the table\n") {
		t.Errorf("want the narration, then the heading once:\n%s", got)
	}
	if i, j := strings.Index(got, "Renewing"), strings.Index(got, "a line of narration"); i > j {
		t.Errorf("narration comes after the row of the stage under way:\n%s", got)
	}
}

func TestOnATerminalTheTableIsRedrawnInPlace(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := &view{out: &out, live: true}
	v.start(time.Now())
	first := out.Len()
	if n := strings.Count(out.String(), "\n"); n != 3 {
		t.Fatalf("the empty table is a blank line, the roots and the heading: %d lines", n)
	}
	all := samples()
	for _, r := range all {
		v.update(r, nil)
	}
	// Each update goes back up over exactly the lines drawn before it.
	frames := strings.Split(out.String()[first:], clearToEnd)
	drawn := 3
	for i, f := range frames[:len(frames)-1] {
		if want := fmt.Sprintf(cursorUpFmt, drawn); !strings.HasSuffix(f, want) {
			t.Fatalf("update %d: want %q before clearing, frame %q", i, want, f)
		}
		drawn = strings.Count(frames[i+1], "\n")
	}
	// The last frame holds every stage, each with its last values.
	last := frames[len(frames)-1]
	for _, want := range []string{"R1    Steady", "R2    Renewing    R2 [R1]          ▕██████████▏ 30/30", "R2    Retiring"} {
		if !strings.Contains(last, want) {
			t.Errorf("last frame lacks %q:\n%s", want, last)
		}
	}
	if !strings.HasPrefix(last, noWrap) || !strings.HasSuffix(last, wrap) {
		t.Errorf("a frame turns line wrapping off and on again: %q", last)
	}
	v.close()
	if !strings.HasSuffix(out.String(), showCursor+"\n") {
		t.Errorf("close shows the cursor again")
	}
}

func TestThousands(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -4321: "-4,321"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNeitherDevNullNorAPipeIsATerminal(t *testing.T) {
	t.Parallel()
	null, err := os.Open(os.DevNull) // a character device, like a terminal
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = null.Close() }()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close(); _ = w.Close() }()
	for _, f := range []*os.File{null, w} {
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal: the table would be redrawn with escape sequences", f.Name())
		}
	}
}
