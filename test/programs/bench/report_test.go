package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestJudgeNeedsEveryRunAndThree(t *testing.T) {
	g := NewWithT(t)
	met := func(run int) runCheck { return runCheck{run: run, measured: "x", ok: true} }
	g.Expect(judge([]runCheck{met(1), met(2), met(3)})).To(Equal("met in 3 of 3 runs"))
	g.Expect(judge([]runCheck{met(1), {run: 2, failed: "21.5 ms ≥ 20.0 ms"}, met(3)})).To(Equal("**missed** in run 2: 21.5 ms ≥ 20.0 ms"))
	g.Expect(judge([]runCheck{met(1)})).To(HavePrefix("**not judged**"))
}

func TestBinaryRevision(t *testing.T) {
	g := NewWithT(t)
	rev, err := binaryRevision("dualca 0.1.0 (commit 0123abc-dirty, go1.26.8)\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(Equal("0123abc-dirty"))
	_, err = binaryRevision("dualca (devel)")
	g.Expect(err).To(HaveOccurred())
}

func TestProvenanceCheck(t *testing.T) {
	g := NewWithT(t)
	clean := provenance{commit: "abc", short: "abc", binary: "abc"}
	g.Expect(clean.check(true)).To(Succeed())
	dirty := provenance{commit: "abc", short: "abc", binary: "abc-dirty", changed: []string{"?? new.go"}}
	g.Expect(dirty.check(true)).To(MatchError(ContainSubstring("untracked files included")))
	g.Expect(dirty.check(false)).To(Succeed(), "a -quick or -only run measures the tree's own build")
	other := provenance{commit: "abc", short: "abc", binary: "def"}
	g.Expect(other.check(false)).To(MatchError(ContainSubstring("built from def")))
}

// A report's raw files hold every propagation sample with its run and
// system, and the report judges each run.
func TestRawAndPropagationVerdicts(t *testing.T) {
	g := NewWithT(t)
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	result := func(run int, system string, cpu time.Duration, samples []time.Duration) propagationResult {
		res := propagationResult{run: run, system: system, samples: samples, cpuPerRotation: cpu}
		for i := range samples {
			res.rotation = append(res.rotation, i+1)
			res.overlap = append(res.overlap, false)
		}
		return res
	}
	r := &report{commit: "abc", quick: true}
	for run := 1; run <= 3; run++ {
		dualcaWorst := 10
		if run == 2 {
			dualcaWorst = 21
		}
		r.propagation = append(r.propagation,
			result(run, systemDualca, 4*time.Millisecond, ms(5, 6, dualcaWorst)),
			result(run, systemTrustManager, 2*time.Millisecond, ms(4, 5, 12)),
			result(run, systemCopier, time.Millisecond, ms(3, 4, 9)))
	}
	dir := t.TempDir()
	g.Expect(r.writeRaw(dir)).To(Succeed())
	f, err := os.Open(filepath.Join(dir, "propagation.csv"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rows).To(HaveLen(1 + 3*3*3))
	g.Expect(rows[0]).To(Equal([]string{"run", "system", "rotation", "overlapping", "latency_us"}))
	g.Expect(rows).To(ContainElement([]string{"2", systemDualca, "3", "0", "21000"}))

	g.Expect(r.plot(filepath.Join(dir, "plot.png"))).To(Succeed())

	var out bytes.Buffer
	g.Expect(r.write(&out, "", "")).To(Succeed())
	text := out.String()
	g.Expect(text).To(ContainSubstring("| propagation p99 under 20.0 ms, in every run (p99 < 20.0 ms) | run 1: 10.0 ms; run 2: 21.0 ms; run 3: 10.0 ms | **missed** in run 2: 21.0 ms ≥ 20.0 ms |"))
	g.Expect(text).To(ContainSubstring("**missed** in run 2: 21.0 ms > 12.0 ms |"))
	g.Expect(lineWith(text, "CPU per rotation within 1.5×")).To(ContainSubstring("**missed** in run 1: 2.00× > 1.50×; run 2: 2.00× > 1.50×; run 3: 2.00× > 1.50×"))
}

func lineWith(text, part string) string {
	for l := range strings.SplitSeq(text, "\n") {
		if strings.Contains(l, part) {
			return l
		}
	}
	return ""
}
