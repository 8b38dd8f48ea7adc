package main

import (
	"encoding/csv"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The raw samples: every value the report's figures are computed from,
// as CSV files in a directory next to the report (docs/benchmarks/raw for
// docs/benchmarks.md), committed with it, so that anyone can recompute a
// cell, a percentile of another rank, or the spread between runs. Durations
// are whole microseconds, sizes bytes.

// rawDir is the directory of the raw samples of the report at out.
func rawDir(out string) string {
	return filepath.Join(strings.TrimSuffix(out, filepath.Ext(out)), "raw")
}

// relativeTo is path relative to base, or path when it cannot be.
func relativeTo(base, path string) string {
	if rel, err := filepath.Rel(base, path); err == nil {
		return filepath.ToSlash(rel)
	}
	return path
}

// rawTable is one CSV file: its header and rows.
type rawTable struct {
	name, about string
	header      []string
	rows        [][]string
}

func (t *rawTable) add(values ...any) {
	row := make([]string, len(values))
	for i, v := range values {
		switch v := v.(type) {
		case time.Duration:
			row[i] = strconv.FormatInt(v.Microseconds(), 10)
		case time.Time:
			row[i] = v.UTC().Format(time.RFC3339Nano)
		case float64:
			row[i] = strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			row[i] = map[bool]string{true: "1", false: "0"}[v]
		default:
			row[i] = fmt.Sprint(v)
		}
	}
	t.rows = append(t.rows, row)
}

// rawTables are the report's raw values, one table per measurement that
// ran; none for one that did not.
func (r *report) rawTables() []*rawTable {
	var out []*rawTable
	keep := func(t *rawTable) {
		if len(t.rows) > 0 {
			out = append(out, t)
		}
	}

	prop := &rawTable{name: "propagation.csv", about: "every propagation sample: run, system, the rotation's index in the run (1-based), whether it was written before the previous root had arrived, the root's PUT returned → the target's watch event carrying it",
		header: []string{"run", "system", "rotation", "overlapping", "latency_us"}}
	runs := &rawTable{name: "propagation-runs.csv", about: "each propagation run's totals per system: samples, overlapping rotations, target versions, CPU per rotation, the 1-minute load average at the run's start and end",
		header: []string{"run", "system", "samples", "overlapping", "versions", "cpu_per_rotation_us", "load1_start", "load1_end"}}
	for _, res := range r.propagation {
		for i, d := range res.samples {
			prop.add(res.run, res.system, res.rotation[i], res.overlap[i], d)
		}
		runs.add(res.run, res.system, len(res.samples), res.overlapping, res.versions, res.cpuPerRotation, res.load.start.load[0], res.load.end.load[0])
	}
	keep(prop)
	keep(runs)

	hs := &rawTable{name: "handshakes.csv", about: "the handshake runs: per system, what the client saw, and the moments of the rotation (ms from the root's PUT returned; -1: did not happen in the window)",
		header: []string{"system", "attempts", "failed", "failed_before", "window_after_ms", "trusted_ms", "triggered_ms", "reissued_ms", "server_switched_ms", "old_root_retired_ms"}}
	for _, h := range r.handshakes {
		hs.add(h.system, h.attempts, h.failed, h.failedBefore, h.after.Milliseconds(), h.timeline.trusted.ms(), h.timeline.triggered.ms(),
			h.timeline.reissued.ms(), h.timeline.switched.ms(), h.timeline.retired.ms())
	}
	keep(hs)

	keep(r.rootsRaw())

	startup := &rawTable{name: "startup.csv", about: "every start: selected clients, the start's index, process start → gateway in sync, → ready, and → the clients read",
		header: []string{"clients", "start", "in_sync_us", "ready_us", "clients_read_us"}}
	for _, s := range r.startup {
		for i := range max(len(s.inSync), len(s.ready), len(s.clientsRead)) {
			startup.add(s.clients, i, at(s.inSync, i), at(s.ready, i), at(s.clientsRead, i))
		}
	}
	keep(startup)

	memory := &rawTable{name: "memory.csv", about: "the memory measurement: condition, unrelated Secrets, process, its median resident set",
		header: []string{"condition", "secrets", "process", "rss_bytes"}}
	for _, m := range r.memory {
		for _, name := range slices.Sorted(maps.Keys(m.rss)) {
			memory.add(m.condition, m.secrets, name, m.rss[name])
		}
	}
	keep(memory)

	poll := &rawTable{name: "poll.csv", about: "every change of the poll-only runs: run, index, the root's PUT returned → the gateway's watch event",
		header: []string{"run", "i", "latency_us"}}
	for run, samples := range r.poll {
		for i, d := range samples {
			poll.add(run+1, i, d)
		}
	}
	keep(poll)

	scale := &rawTable{name: "scale.csv", about: "each scale point: clients, first sync, clients read, resident set, reconciles at rest and their mean, the fan-out (first → last trigger) and its ideal",
		header: []string{"clients", "first_sync_us", "clients_read_us", "rss_bytes", "reconciles", "reconcile_mean_us", "fanout_us", "ideal_us", "api_peak_per_s"}}
	for _, s := range r.scale {
		scale.add(s.clients, s.firstSync, s.clientsRead, s.rss, s.reconcile.n, s.reconcile.mean, s.fanout.total, s.fanout.ideal, s.fanout.peakRate)
	}
	keep(scale)

	fanout := &rawTable{name: "fanout.csv", about: "each cert-manager fan-out run: who triggered (dualca or floor), run, clients, rate, the root's new version seen → first trigger, first → last trigger, ideal, → every client re-issued, API rates, failed issuances re-triggered, the floor's updates that conflicted and read the Certificate again",
		header: []string{"triggered_by", "run", "clients", "qps", "to_first_us", "total_us", "ideal_us", "reissued_us", "api_peak_per_s", "api_mean_per_s", "retriggers", "floor_conflicts_read_again"}}
	for _, set := range []struct {
		name string
		runs []fanoutResult
	}{{systemDualca, r.cmFanout}, {"floor", r.cmFloor}} {
		for i, f := range set.runs {
			fanout.add(set.name, i+1, f.clients, f.qps, f.toFirst, f.total, f.ideal, f.reissued, f.peakRate, f.meanRate, f.retriggers, f.rereads)
		}
	}
	keep(fanout)

	bundle := &rawTable{name: "bundle.csv", about: "the bundle package's micro-benchmarks: the median and the range of ns/op over the runs, B/op, allocs/op",
		header: []string{"benchmark", "runs", "ns_per_op", "min_ns", "max_ns", "bytes_per_op", "allocs_per_op"}}
	for _, b := range r.bundle {
		bundle.add(b.name, b.runs, b.nsPerOp, b.minNs, b.maxNs, b.bytesPerOp, b.allocsPerOp)
	}
	keep(bundle)

	load := &rawTable{name: "load.csv", about: "the machine over each step: start and end, load averages (1, 5, 15 min) at both, and the share of all CPU time busy, in iowait and stolen (from /proc/stat)",
		header: []string{"step", "start", "end", "load1_start", "load5_start", "load15_start", "load1_end", "load5_end", "load15_end", "busy_pct", "iowait_pct", "steal_pct"}}
	for _, l := range r.load {
		busy, iowait, steal, _ := l.span.shares()
		s, e := l.span.start, l.span.end
		load.add(l.step, s.at, e.at, s.load[0], s.load[1], s.load[2], e.load[0], e.load[1], e.load[2], round2(busy), round2(iowait), round2(steal))
	}
	keep(load)
	return out
}

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }

// writeRaw writes the raw tables into dir, with a README naming their
// columns, after removing the CSV files of an earlier report: what the
// directory holds is this report's.
func (r *report) writeRaw(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: a directory of the repository's documents
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.csv"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return err
		}
	}
	var readme strings.Builder
	fmt.Fprintf(&readme, "# Raw samples of the benchmark report (commit %s)\n\n", r.commit)
	readme.WriteString("Written by `make bench` with the report beside this directory: every value its figures are computed from.\n")
	readme.WriteString("Durations are whole microseconds (`_us`) or milliseconds (`_ms`), sizes bytes, times UTC.\n\n")
	readme.WriteString("| file | what | columns |\n|---|---|---|\n")
	for _, t := range r.rawTables() {
		if err := writeCSV(filepath.Join(dir, t.name), t); err != nil {
			return err
		}
		fmt.Fprintf(&readme, "| `%s` | %s | %s |\n", t.name, t.about, strings.Join(t.header, ", "))
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme.String()), 0o644) //nolint:gosec // G306: a committed document
}

func writeCSV(path string, t *rawTable) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.Write(t.header); err != nil {
		_ = f.Close()
		return err
	}
	if err := w.WriteAll(t.rows); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// at is samples[i], "" past their end.
func at(samples []time.Duration, i int) any {
	if i < len(samples) {
		return samples[i]
	}
	return ""
}
