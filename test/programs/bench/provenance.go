package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Provenance: what a report measured, and on what machine state.
//
// A final report (neither -quick nor -only) measures a commit: the run
// fails before measuring anything when the tree differs from HEAD in any
// way, untracked files included, or when the dualca binary says it was
// built from another revision. A -quick or -only run measures whatever is
// there and says so.

// provenance is the commit measured and the state of the tree at start.
type provenance struct {
	commit, short string
	// changed are the lines of `git status --porcelain` at start: tracked
	// changes and untracked files. Empty for a clean tree.
	changed []string
	// binary is the revision the dualca binary was built from, as `dualca
	// version` prints it.
	binary string
	// atEnd is HEAD and the tree's state when the run ended, when either
	// differs from the start ("" when not).
	atEnd string
}

func (p provenance) dirty() bool { return len(p.changed) > 0 }

// readProvenance reads the commit and the tree of the repository at root
// and the revision of the dualca binary.
func readProvenance(root, dualca string) (provenance, error) {
	var p provenance
	head, err := gitOutput(root, "rev-parse", "HEAD")
	if err != nil {
		return p, fmt.Errorf("reading the commit: %w", err)
	}
	p.commit = strings.TrimSpace(head)
	p.short = p.commit[:min(len(p.commit), 7)]
	if p.changed, err = treeChanges(root); err != nil {
		return p, err
	}
	out, err := exec.Command(dualca, "version").Output()
	if err != nil {
		return p, fmt.Errorf("%s version: %w", dualca, err)
	}
	p.binary, err = binaryRevision(string(out))
	return p, err
}

// treeChanges are the lines of `git status --porcelain`, untracked files
// included (ignored ones are not: bin/ and the caches).
func treeChanges(root string) ([]string, error) {
	status, err := gitOutput(root, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return nil, fmt.Errorf("reading the tree's state: %w", err)
	}
	var lines []string
	for l := range strings.SplitSeq(strings.TrimRight(status, "\n"), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// binaryRevision reads the revision from `dualca version`'s line,
// "dualca 0.1.0 (commit <revision>, go1.26.8)".
func binaryRevision(line string) (string, error) {
	_, rest, ok := strings.Cut(line, "(commit ")
	rev, _, ok2 := strings.Cut(rest, ",")
	if !ok || !ok2 || rev == "" {
		return "", fmt.Errorf("no revision in `dualca version`'s output %q", strings.TrimSpace(line))
	}
	return rev, nil
}

// check fails when the run may not measure what it is given: a final run
// on a tree that differs from HEAD, or any run of a binary built from
// another commit. A -quick or -only run of a dirty tree accepts the binary
// `make build` makes of it, HEAD's revision with -dirty.
func (p provenance) check(final bool) error {
	if final && p.dirty() {
		return fmt.Errorf("the tree differs from HEAD %s in %d paths (untracked files included; first: %q): commit or remove them, or run with -quick or -only, whose reports say they are not final",
			p.short, len(p.changed), p.changed[0])
	}
	want := p.commit
	if p.binary == want || (!final && p.dirty() && p.binary == want+"-dirty") {
		return nil
	}
	if final || !p.dirty() {
		return fmt.Errorf("the dualca binary was built from %s, not from HEAD %s: rebuild it (make build)", p.binary, p.commit)
	}
	return fmt.Errorf("the dualca binary was built from %s, not from HEAD %s or its working tree (%s-dirty): rebuild it (make build)", p.binary, p.commit, p.commit)
}

// recheck records HEAD and the tree at the end of the run when they moved.
func (p *provenance) recheck(root string) {
	head, err := gitOutput(root, "rev-parse", "HEAD")
	changed, err2 := treeChanges(root)
	if err := errors.Join(err, err2); err != nil {
		p.atEnd = "unknown: " + err.Error()
		return
	}
	head = strings.TrimSpace(head)
	if head == p.commit && slices.Equal(changed, p.changed) {
		return
	}
	state := "a clean tree"
	if len(changed) > 0 {
		state = fmt.Sprintf("%d changed or untracked paths", len(changed))
	}
	p.atEnd = fmt.Sprintf("HEAD %s with %s", head[:min(len(head), 7)], state)
}

func gitOutput(root string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(exit.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(out), nil
}

// machineLoad is the machine's state at one moment: the load averages and
// the kernel's cumulative CPU counters (/proc/stat's cpu line, in ticks).
type machineLoad struct {
	at       time.Time
	load     [3]float64 // 1, 5 and 15 minutes
	cpu      cpuTicks
	readable bool
}

// cpuTicks are /proc/stat's aggregate counters.
type cpuTicks struct{ busy, idle, iowait, steal, total uint64 }

// readLoad reads /proc/loadavg and /proc/stat; what it cannot read stays
// zero and readable false.
func readLoad() machineLoad {
	m := machineLoad{at: time.Now()}
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return m
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return m
	}
	for i := range 3 {
		if m.load[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return m
		}
	}
	if m.cpu, err = readCPUTicks(); err != nil {
		return m
	}
	m.readable = true
	return m
}

// readCPUTicks reads the first line of /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is already in user).
func readCPUTicks() (cpuTicks, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTicks{}, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return cpuTicks{}, errors.New("empty /proc/stat")
	}
	fields := strings.Fields(s.Text())
	if len(fields) < 9 || fields[0] != "cpu" {
		return cpuTicks{}, fmt.Errorf("unexpected /proc/stat line %q", s.Text())
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(fields[i+1], 10, 64); err != nil {
			return cpuTicks{}, err
		}
	}
	t := cpuTicks{idle: v[3], iowait: v[4], steal: v[7]}
	t.busy = v[0] + v[1] + v[2] + v[5] + v[6]
	t.total = t.busy + t.idle + t.iowait + t.steal
	return t, nil
}

// loadSpan is the machine between two moments.
type loadSpan struct{ start, end machineLoad }

func spanSince(start machineLoad) loadSpan { return loadSpan{start: start, end: readLoad()} }

// shares are the machine's busy, iowait and steal time over the span, in
// per cent of all its CPU time; ok false when unreadable.
func (s loadSpan) shares() (busy, iowait, steal float64, ok bool) {
	if !s.start.readable || !s.end.readable || s.end.cpu.total <= s.start.cpu.total {
		return 0, 0, 0, false
	}
	total := float64(s.end.cpu.total - s.start.cpu.total)
	pct := func(a, b uint64) float64 { return float64(b-a) / total * 100 }
	return pct(s.start.cpu.busy, s.end.cpu.busy), pct(s.start.cpu.iowait, s.end.cpu.iowait), pct(s.start.cpu.steal, s.end.cpu.steal), true
}

// loads is "1.23 → 2.34", the 1-minute load average at start and end.
func (s loadSpan) loads() string {
	if !s.start.readable || !s.end.readable {
		return "–"
	}
	return fmt.Sprintf("%.2f → %.2f", s.start.load[0], s.end.load[0])
}

// stepLoad is a step's span, for the report's table of the machine's load.
type stepLoad struct {
	step string
	span loadSpan
}
