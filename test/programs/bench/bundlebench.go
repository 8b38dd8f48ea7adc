package main

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// bundleBenchmarks runs the go test benchmarks of the bundle package three
// times each (once in a quick run) and keeps the medians.
func (b *bench) bundleBenchmarks(ctx context.Context) error {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	count := "3"
	if b.opts.quick {
		count = "1"
	}
	// Half a second per benchmark and run: three runs of each keep the
	// spread visible, and make bench within its time (about 70 minutes).
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchtime", "500ms", "-benchmem", "-count", count, "./bundle/"}
	// The report shows the command as a shell takes it.
	b.report.bundleCommand = "go " + strings.ReplaceAll(strings.Join(args, " "), "^$", "'^$'")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", b.report.bundleCommand, err, out)
	}
	b.report.bundle = parseBenchmarks(string(out))
	if len(b.report.bundle) == 0 {
		return fmt.Errorf("no benchmark results in:\n%s", out)
	}
	return nil
}

// benchResult is the median of one benchmark's repetitions.
type benchResult struct {
	name                    string
	runs                    int
	nsPerOp, minNs, maxNs   float64
	bytesPerOp, allocsPerOp float64
}

// parseBenchmarks reads `go test -bench` output into medians by name.
func parseBenchmarks(out string) []benchResult {
	type acc struct{ ns, bytes, allocs []float64 }
	byName := map[string]*acc{}
	var order []string
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i] // the GOMAXPROCS suffix
		}
		a := byName[name]
		if a == nil {
			a = &acc{}
			byName[name] = a
			order = append(order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				a.ns = append(a.ns, v)
			case "B/op":
				a.bytes = append(a.bytes, v)
			case "allocs/op":
				a.allocs = append(a.allocs, v)
			}
		}
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return 0
		}
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	var results []benchResult
	for _, name := range order {
		a := byName[name]
		results = append(results, benchResult{name: name, runs: len(a.ns), nsPerOp: med(a.ns),
			minNs: slices.Min(a.ns), maxNs: slices.Max(a.ns), bytesPerOp: med(a.bytes), allocsPerOp: med(a.allocs)})
	}
	return results
}
