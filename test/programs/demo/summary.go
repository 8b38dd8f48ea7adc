package main

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/dualca/dualca/test/lib/monitor"
)

// summary is what the demo shows when the story is over.
type summary struct {
	legacy   bool
	clients  int
	interval time.Duration
	elapsed  time.Duration
	startup  time.Duration // dualca's start to the gateway Secret in sync

	rotations []rotationSummary
	largest   string // the largest bundle, "R3 R2 R1"

	ok, failed int            // handshakes, client side
	errors     map[string]int // the failures by error text
	gwErrors   map[string]int // the gateway's rejections by error text
	cutOff     int            // clients that failed at least once
	longest    int            // most handshakes one client failed in a row
	rejected   int            // handshakes the gateway saw fail
	reloads    int            // versions of its Secret the gateway loaded

	// checked is what the monitor found (package monitor).
	checked monitor.Result
	// loadErrors counts the Secret versions the gateway and the clients
	// could not use; deletions the gateway Secret's deletions they saw.
	loadErrors, deletions int

	logLines, logLeaks int // dualca's log
	stopErr            error
}

// rotationSummary is the timeline of one rotation.
type rotationSummary struct {
	n        int    // 1 for the first
	from, to string // root labels
	came     during // what the previous rotation was doing
	steps    []step
	// ok and failed count the handshakes from the new root's arrival to
	// the next one's (until), or to the end.
	ok, failed int
	until      string
}

// step is one moment of a rotation, timed from when the root Secret held
// the new root; at is negative for a moment that never came.
type step struct {
	at   time.Duration
	what string
}

func (s step) order() time.Duration {
	if s.at < 0 {
		return math.MaxInt64
	}
	return s.at
}

// summarize gathers the summary from what the demo saw.
func (d *demo) summarize(stopErr error) *summary {
	f, g := d.fleetStats, d.gatewayStats
	lines, leaks := d.dualca.log.counts()
	s := &summary{
		legacy: d.o.legacy, clients: len(d.clients), interval: d.o.interval,
		elapsed: time.Since(d.begin), startup: d.startup,
		largest: d.rec.labels(d.rec.largestBundle()),
		ok:      f.Total.Successes, failed: f.Total.Failures, errors: f.Total.Errors,
		cutOff: len(f.Failed()), longest: d.sampler.longestOutage(),
		rejected: g.Rejected, gwErrors: g.Errors, reloads: g.Reloads,
		checked:    d.rec.result(),
		loadErrors: g.LoadErrors + f.Total.LoadErrors, deletions: g.Deletions,
		logLines: lines, logLeaks: leaks, stopErr: stopErr,
	}
	for i, r := range d.rotations {
		var next *rotation
		if i+1 < len(d.rotations) {
			next = &d.rotations[i+1]
		}
		s.rotations = append(s.rotations, d.timeline(i+1, r, next))
	}
	return s
}

// timeline is rotation n's moments as the recorder saw them.
func (d *demo) timeline(n int, r rotation, next *rotation) rotationSummary {
	rs := rotationSummary{n: n, from: r.from, to: r.to, came: r.came}
	t0 := d.rec.firstSeen(keyRoot, r.root)
	if t0.IsZero() {
		return rs
	}
	end, until := d.ended, "the end"
	if next != nil {
		end, until = d.rec.firstSeen(keyRoot, next.root), next.to+"'s"
	}
	rs.ok, rs.failed = d.sampler.between(t0, end)
	rs.until = until
	add := func(m moment, what string) bool {
		t := d.rec.firstSeen(m, r.root)
		if t.IsZero() {
			return false
		}
		rs.steps = append(rs.steps, step{at: t.Sub(t0), what: what})
		return true
	}
	bundled := d.rec.labels(d.rec.bundleWhenTrusted(r.root))
	add(keyRoot, fmt.Sprintf("the root Secret holds %s: cert-manager re-issued the root CA, new key, in %s", r.to, millis(t0.Sub(r.requested))))
	add(keyFirstClient, fmt.Sprintf("the first client holds an %s certificate", r.to))
	if d.o.legacy {
		add(keyTrusted, fmt.Sprintf("the gateway is a copy of %s (ca.crt: %s) and presents it: each client is cut off until it is re-issued", r.to, bundled))
		add(keyAllClients, fmt.Sprintf("every client holds an %s certificate: the last one is back in", r.to))
		return rs
	}
	add(keyTrusted, fmt.Sprintf("the gateway trusts %s next to the roots in use (ca.crt: %s)", r.to, bundled))
	add(keyRenewing, fmt.Sprintf("Renewing: the gateway has had %s to load it; dualca has cert-manager re-issue the clients", trustPropagationDelay))
	add(keyAllClients, fmt.Sprintf("every client holds an %s certificate", r.to))
	if !add(keyServer, fmt.Sprintf("the server presents %s, the clients having trusted it for %s", r.to, trustPropagationDelay)) && next != nil {
		rs.steps = append(rs.steps, step{at: -1, what: fmt.Sprintf("the server never presented %s: %s came first, and the server went straight to it", r.to, next.to)})
	}
	add(keySteady, fmt.Sprintf("the old roots retired: the gateway trusts %s alone (Steady)", r.to))
	return rs
}

// maxRace bounds how long a client certificate issued from a root not
// bundled yet may wait for dualca to bundle it (milliseconds, normally).
const maxRace = 10 * time.Second

// passed is the verdict: no handshake failed, the gateway refused nobody,
// every gateway version was usable and kept the invariants, every Secret
// version loaded and none was deleted, every race was short, dualca's log
// holds no key material, and everything stopped cleanly.
func (s *summary) passed() bool {
	return s.failed == 0 && s.rejected == 0 && s.checked.ViolationCount == 0 && s.loadErrors == 0 && s.deletions == 0 &&
		s.checked.LongestRace() <= maxRace && s.logLeaks == 0 && s.stopErr == nil
}

func (s *summary) exitCode() int {
	if s.passed() {
		return exitOK
	}
	return exitFailed
}

// text is the summary as printed.
func (s *summary) text() string {
	var b strings.Builder
	w := &b
	strategy := "zero-downtime"
	if s.legacy {
		strategy = "legacy (--cert-management-legacy)"
	}
	fmt.Fprintf(w, "\nsummary · %s · %d clients, each handshaking every %s · %s in all\n\n", strategy, s.clients, s.interval, seconds(s.elapsed))
	fmt.Fprintf(w, "dualca      started, and wrote the gateway Secret from R1 %s later\n", millis(s.startup))
	for _, r := range s.rotations {
		fmt.Fprintf(w, "\nrotation %d  %s → %s\n", r.n, r.from, r.to)
		if r.came.what != "" {
			fmt.Fprintf(w, "            came when %s\n", r.came.what)
		}
		// In the order they happened, the moments that never came last.
		steps := slices.Clone(r.steps)
		slices.SortStableFunc(steps, func(a, b step) int { return cmp.Compare(a.order(), b.order()) })
		for _, st := range steps {
			at := "—"
			if st.at >= 0 {
				at = "+" + millis(st.at)
			}
			fmt.Fprintf(w, "  %9s  %s\n", at, st.what)
		}
		fmt.Fprintf(w, "  %9s  handshakes from %s's arrival to %s: %s ok, %s failed\n", "", r.to, r.until, thousands(r.ok), thousands(r.failed))
	}
	fmt.Fprintln(w)
	if s.legacy {
		fmt.Fprintf(w, "bundle      one root at a time, a copy of the root Secret; the gateway loaded %d versions of its Secret\n", s.reloads)
	} else {
		fmt.Fprintf(w, "bundle      at most %s at once; the gateway loaded %d versions of its Secret\n", s.largest, s.reloads)
	}
	fmt.Fprintf(w, "handshakes  %s ok, %s failed", thousands(s.ok), thousands(s.failed))
	if s.failed > 0 {
		fmt.Fprintf(w, ": %d of %d clients cut off, one for %d handshakes in a row (about %s)",
			s.cutOff, s.clients, s.longest, seconds(time.Duration(s.longest)*s.interval))
	}
	fmt.Fprintf(w, "; the gateway rejected %s\n", thousands(s.rejected))
	for _, e := range topErrors(s.errors, 3) {
		fmt.Fprintf(w, "            client: %s\n", e)
	}
	for _, e := range topErrors(s.gwErrors, 3) {
		fmt.Fprintf(w, "            gateway: %s\n", e)
	}
	if !s.legacy {
		switch {
		case len(s.checked.Violations) > 0:
			fmt.Fprintf(w, "invariants  BROKEN %d times in the %d versions of the gateway Secret checked:\n", s.checked.ViolationCount, s.checked.Versions)
			for _, v := range s.checked.Violations[:min(10, len(s.checked.Violations))] {
				fmt.Fprintf(w, "            %s\n", v)
			}
		default:
			fmt.Fprintf(w, "invariants  each of the %d versions of the gateway Secret parsed, matched its key, trusted its server's root and every client's, and its chain verified for every client\n", s.checked.Versions)
		}
		fmt.Fprintf(w, "races       %d client certificates issued from a root before dualca bundled it, the longest wait %s (at most %s allowed)\n",
			s.checked.RaceCount, millis(s.checked.LongestRace()), seconds(maxRace))
	}
	fmt.Fprintf(w, "loads       %d Secret versions the gateway or a client could not use; the gateway Secret deleted %d times\n", s.loadErrors, s.deletions)
	if s.logLeaks > 0 {
		fmt.Fprintf(w, "dualca log  %d of its %d lines hold key or certificate material\n", s.logLeaks, s.logLines)
	} else {
		fmt.Fprintf(w, "dualca log  %d lines, none with key or certificate material\n", s.logLines)
	}
	if s.stopErr != nil {
		fmt.Fprintf(w, "stopping    %v\n", s.stopErr)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, s.verdict())
	return b.String()
}

// verdict is the last line.
func (s *summary) verdict() string {
	n := len(s.rotations)
	switch {
	case s.passed() && !s.legacy:
		return fmt.Sprintf("PASS  not one of %s handshakes failed across %s%s", thousands(s.ok), plural(n, "root rotation"), s.overlapping())
	case s.passed():
		return "PASS  no handshake failed this time, though the legacy strategy usually cuts clients off at each rotation"
	case s.legacy && s.failed > 0:
		return fmt.Sprintf("FAIL  %s failed: the legacy strategy cuts clients off at every rotation until they are re-issued.\n"+
			"      That is the downtime the zero-downtime strategy avoids: `make demo` plays the same story without it.", handshakes(s.failed))
	case s.failed > 0 || s.rejected > 0:
		return fmt.Sprintf("FAIL  %s failed and the gateway rejected %d with the zero-downtime strategy", handshakes(s.failed), s.rejected)
	default:
		var why []string
		if s.checked.ViolationCount > 0 {
			why = append(why, "a version of the gateway Secret broke an invariant")
		}
		if s.loadErrors > 0 || s.deletions > 0 {
			why = append(why, "a Secret version could not be loaded or the gateway Secret was deleted")
		}
		if s.checked.LongestRace() > maxRace {
			why = append(why, "a client waited too long for its root to be bundled")
		}
		if s.logLeaks > 0 {
			why = append(why, "dualca logged key or certificate material")
		}
		if s.rejected > 0 {
			why = append(why, fmt.Sprintf("the gateway rejected %d", s.rejected))
		}
		if s.stopErr != nil {
			why = append(why, "something did not stop cleanly")
		}
		return "FAIL  " + strings.Join(why, "; ")
	}
}

// overlapping says whether the second rotation overlapped the first.
func (s *summary) overlapping() string {
	for _, r := range s.rotations {
		if r.came.overlapping && r.n == 2 {
			return ", the second overlapping the first"
		}
	}
	return ""
}

// handshakes is "1 handshake" or "1,234 handshakes".
func handshakes(n int) string {
	if n == 1 {
		return "1 handshake"
	}
	return thousands(n) + " handshakes"
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// topErrors lists the n most frequent errors, most frequent first: "812×
// remote error: tls: unknown certificate authority".
func topErrors(errs map[string]int, n int) []string {
	kinds := slices.SortedFunc(maps.Keys(errs), func(a, b string) int {
		return cmp.Or(cmp.Compare(errs[b], errs[a]), cmp.Compare(a, b))
	})
	var out []string
	for _, k := range kinds[:min(n, len(kinds))] {
		text := k
		if r := []rune(text); len(r) > 120 {
			text = string(r[:120]) + "…"
		}
		out = append(out, fmt.Sprintf("%s× %s", thousands(errs[k]), text))
	}
	return out
}
