package figure

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
)

// The figures program reads what the suites wrote, in another process:
// times, durations and Prometheus' series, NaN included, must come back as
// they were measured.
func TestAFigureReadsBackAsWritten(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	path := filepath.Join(t.TempDir(), "dashboard.json")
	want := Dashboard{Start: start, End: start.Add(time.Minute), Scrape: time.Second, LagThreshold: 3,
		Series: map[string]model.Matrix{"Clients": {{
			Metric: model.Metric{"state": "renewed"},
			Values: []model.SamplePair{{Timestamp: model.TimeFromUnixNano(start.UnixNano()), Value: 2}, {Timestamp: model.TimeFromUnixNano(start.Add(time.Second).UnixNano()), Value: model.SampleValue(math.NaN())}},
		}}}}
	g.Expect(Write(path, want)).To(Succeed())
	var got Dashboard
	g.Expect(Read(path, &got)).To(Succeed())
	g.Expect(got.Start.Equal(want.Start)).To(BeTrue())
	g.Expect(got.End.Equal(want.End)).To(BeTrue())
	g.Expect(got.Scrape).To(Equal(want.Scrape))
	g.Expect(got.LagThreshold).To(Equal(want.LagThreshold))
	g.Expect(got.Series).To(HaveKey("Clients"))
	s := got.Series["Clients"][0]
	g.Expect(s.Metric).To(Equal(want.Series["Clients"][0].Metric))
	g.Expect(s.Values).To(HaveLen(2))
	g.Expect(s.Values[0]).To(Equal(want.Series["Clients"][0].Values[0]))
	g.Expect(math.IsNaN(float64(s.Values[1].Value))).To(BeTrue())

	soakPath := filepath.Join(t.TempDir(), "soak.json")
	soak := Soak{Start: start, Elapsed: time.Hour,
		Samples: []SoakSample{{At: start, Attempts: 10, Failures: 1, Phase: "Bundle", Root: 2, Server: 1}},
		Events:  []SoakEvent{{At: start, Rotation: true}},
		Memory:  []Memory{{At: start, PID: 42, RSS: 1 << 25, Heap: 1 << 20, GOGC: 400, Leader: true, Roots: 3}}}
	g.Expect(Write(soakPath, soak)).To(Succeed())
	var back Soak
	g.Expect(Read(soakPath, &back)).To(Succeed())
	g.Expect(back).To(Equal(soak))
}
