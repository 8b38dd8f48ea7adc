package main

import (
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/sizing"
)

// The sizing's lines lie over every point (at rest and at the peak), its block parses back, and the check of the chart's limit
// is judged on the kernel's and the process's word.
func TestSizingReport(t *testing.T) {
	g := NewWithT(t)
	const mb = 1 << 20
	r := &report{commit: "abc1234", only: "scale", scaleBase: 38 * mb,
		scale: []scalePoint{
			{clients: 1000, rss: 51 * mb, peakRSS: 70 * mb, afterRSS: 60 * mb},
			{clients: 10000, rss: 170 * mb, peakRSS: 290 * mb, afterRSS: 280 * mb,
				check: &limitCheck{limit: 352 * mb, alive: true, ready: true, inSync: true, stats: cgroupStats{maxUsage: 300 * mb, failcnt: 0}}},
		},
		claim: sizing.Row{Clients: 10000, Limit: 352 * mb}}
	m, ok := r.sizingModel()
	g.Expect(ok).To(BeTrue())
	// At rest, the larger of before and after each fan-out: 38, 60 and 280 MiB at 0, 1000 and 10000 clients, a
	// least-squares slope of 24.87 KiB per client (24.9 rounded up), the base the least that leaves no point above
	// (38 MiB); the peak, 38, 70 and 290 MiB: 25.41 KiB (25.5), and 1000 clients' 70 MiB less 1000 × 25.5 KiB
	// (45.1 MiB rounded up) for the base.
	g.Expect(m).To(Equal(sizing.Model{Rest: sizing.Line{BaseMiB: 38, PerClientKiB: 24.9}, Peak: sizing.Line{BaseMiB: 45.1, PerClientKiB: 25.5}}))
	for _, s := range r.scale {
		g.Expect(m.Rest.At(s.clients)).To(BeNumerically(">=", float64(max(s.rss, s.afterRSS))))
		g.Expect(m.Peak.At(s.clients)).To(BeNumerically(">=", float64(s.peakRSS)))
	}
	var out strings.Builder
	r.writeSizing(func(f string, a ...any) { out.WriteString(fmt.Sprintf(f, a...) + "\n") })
	got, rows, _, err := sizing.Parse(out.String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(m))
	g.Expect(rows).To(HaveLen(len(sizingSizes)))
	g.Expect(out.String()).To(ContainSubstring("-only scale -scale 1000,10000` at commit `abc1234`"))
	g.Expect(out.String()).To(ContainSubstring("**the chart's limit is under this run's model**"))
	g.Expect(out.String()).To(ContainSubstring("| held |"))
	g.Expect(r.scale[1].check.held()).To(BeTrue())

	killed := *r.scale[1].check
	killed.stats.oomKills, killed.alive = 1, false
	g.Expect(killed.held()).To(BeFalse())
	var none *limitCheck
	g.Expect(none.held()).To(BeFalse())

	r.scale[1].check = &limitCheck{limit: 352 * mb, unavailable: "no cgroup v1 memory controller"}
	out.Reset()
	r.writeSizing(func(f string, a ...any) { out.WriteString(fmt.Sprintf(f, a...) + "\n") })
	g.Expect(out.String()).To(ContainSubstring("It could not be checked in this run: no cgroup v1 memory controller."))
	out.Reset()
	r.writeSizingTarget(func(f string, a ...any) { out.WriteString(fmt.Sprintf(f, a...) + "\n") })
	g.Expect(out.String()).To(ContainSubstring("not checked in this run"))
}

// make bench checks the chart's claim: its scale sizes hold the largest
// the chart's README claims.
func TestTheRunChecksTheChartsClaim(t *testing.T) {
	g := NewWithT(t)
	claim, err := sizing.Claim(controlplane.TestRepoRoot(t))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claim.Clients).To(Equal(chartClaim))
	var o options
	o.defaults()
	g.Expect(o.scale).To(ContainElement(claim.Clients))
}
