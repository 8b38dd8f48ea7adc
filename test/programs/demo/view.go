package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dualca/dualca/bundle"
)

// ANSI sequences for the table redrawn in place.
const (
	hideCursor   = "\x1b[?25l"
	showCursor   = "\x1b[?25h"
	noWrap       = "\x1b[?7l" // long lines are cut at the edge instead of wrapping,
	wrap         = "\x1b[?7h" // so the table is always as many lines as it has rows
	clearToEnd   = "\x1b[J"
	cursorUpFmt  = "\x1b[%dA\r"
	tableHeading = "ELAPSED  ROOT  PHASE       BUNDLE [server]  CLIENTS ON THE ROOT                     HANDSHAKES OK / FAILED"
)

// row is one line of the progress table: the state of one stage (a root
// and a phase) as last sampled.
type row struct {
	at      time.Duration // since the demo began, when the stage began
	root    string        // the current root, "R2"
	phase   string        // Bundle, Renewing, …; for the legacy strategy Re-issuing or Steady
	bundle  []string      // ca.crt, newest first
	server  string        // the root the server presents
	clients bundle.Progress
	total   int // clients
	ok      int // handshakes, since the clients started
	failed  int
}

// stage is what makes a new row: another root or another phase.
func (r row) stage() string { return r.root + " " + r.phase }

// format renders the row under tableHeading.
func (r row) format() string {
	var b []string
	for _, l := range r.bundle {
		if l == r.server {
			l = "[" + l + "]"
		}
		b = append(b, l)
	}
	clients := fmt.Sprintf("%s %d/%d", bar(r.clients.Renewed, r.total, 10), r.clients.Renewed, r.total)
	if r.clients.Pending > 0 {
		clients += fmt.Sprintf(" · %d pending", r.clients.Pending)
	}
	if r.clients.Failed > 0 {
		clients += fmt.Sprintf(" · %d failed", r.clients.Failed)
	}
	return fmt.Sprintf("%7s  %-4s  %-10s  %-15s  %-38s  %s / %s",
		seconds(r.at), r.root, r.phase, strings.Join(b, " "), clients, thousands(r.ok), thousands(r.failed))
}

// bar is a progress bar of width cells for n of total: full only when done.
func bar(n, total, width int) string {
	filled := 0
	if total > 0 {
		filled = n * width / total
	}
	if n < total && filled == width {
		filled = width - 1
	}
	filled = max(0, min(filled, width))
	return "▕" + strings.Repeat("█", filled) + strings.Repeat("░", width-filled) + "▏"
}

// thousands formats n with thousands separators: 12,345.
func thousands(n int) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// view shows the story: narration lines, and the progress table. On a
// terminal the table is redrawn in place under the narration; otherwise
// each row is printed once, when its stage begins, so that a log gets one
// line per phase instead of one per tick.
type view struct {
	out  io.Writer
	live bool

	mu      sync.Mutex
	begin   time.Time
	started bool
	legend  []string // "R1 77c1e0a2b3c4", …
	rows    []row    // stages over
	cur     *row     // the stage under way
	drawn   int      // lines of the table on the screen
}

// newView writes to out, redrawing in place when out is a terminal and the
// demo's own log lines (-v) do not share it.
func newView(out *os.File, verbose bool) *view {
	return &view{out: out, live: isTerminal(out) && !verbose}
}

// isTerminal reports whether f is a terminal that understands escape
// sequences: a character device, but not /dev/null, and TERM is not dumb.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 || os.Getenv("TERM") == "dumb" {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}

// say prints a line of narration, above the table.
func (v *view) say(line string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live || !v.started {
		v.write(line + "\n")
		return
	}
	v.write(v.erase() + line + "\n" + v.draw())
}

// start begins the table; its clock counts from begin.
func (v *view) start(begin time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.started, v.begin = true, begin
	if v.live {
		v.write(hideCursor + v.draw())
		return
	}
	v.write("\n" + tableHeading + "\n")
}

// update takes a new sample. On a terminal the table's last row follows
// the stage under way and stays, with its last values, when the next stage
// begins; otherwise a row is printed when its stage begins.
func (v *view) update(r row, legend []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.started {
		return
	}
	v.legend = legend
	switch {
	case v.cur != nil && v.cur.stage() == r.stage():
		r.at = v.cur.at
	case v.cur != nil:
		v.rows = append(v.rows, *v.cur)
		fallthrough
	default:
		if !v.live {
			v.write(r.format() + "\n")
		}
	}
	v.cur = &r
	if v.live {
		v.write(v.erase() + v.draw())
	}
}

// close ends the table: the last row stays, the cursor comes back.
func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.started {
		return
	}
	v.started = false
	if v.live {
		v.write(showCursor + "\n")
		return
	}
	v.write("\n")
}

// lines is the table as drawn on a terminal.
func (v *view) lines() []string {
	out := []string{"", fmt.Sprintf("%7s  roots %s    [ ] the root the server presents",
		seconds(time.Since(v.begin)), strings.Join(v.legend, " · ")), tableHeading}
	for _, r := range v.rows {
		out = append(out, r.format())
	}
	if v.cur != nil {
		out = append(out, v.cur.format())
	}
	return out
}

// erase is what moves the cursor back to the top of the table and clears
// from there.
func (v *view) erase() string {
	up := ""
	if v.drawn > 0 {
		up = fmt.Sprintf(cursorUpFmt, v.drawn)
	}
	v.drawn = 0
	return up + clearToEnd
}

// draw is the table, lines cut at the terminal's edge rather than wrapped,
// so that it takes exactly as many lines as erase will go back up.
func (v *view) draw() string {
	lines := v.lines()
	v.drawn = len(lines)
	return noWrap + strings.Join(lines, "\n") + "\n" + wrap
}

// write writes s in one go, so that a redraw does not flicker. A view whose
// output has gone away has nothing better to do than carry on: the summary
// and the exit code still tell.
func (v *view) write(s string) { _, _ = io.WriteString(v.out, s) }

// dash shows an absent value as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
