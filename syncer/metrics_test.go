package syncer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
)

// The renewal counters of the strategy that runs exist from the start, at
// 0, so that rate() sees the first renewals after a start; the other
// strategy's stay absent.
func TestRenewalCountersStartAtZeroForTheStrategyThatRuns(t *testing.T) {
	for _, tc := range []struct {
		strategy    strategy
		other       string
		method      string
		otherMethod string
	}{
		{&zeroDowntime{}, legacy.Strategy{}.Name(), "issuing-condition", "secret-deletion"},
		{legacy.Strategy{}, (&zeroDowntime{}).Name(), "secret-deletion", "issuing-condition"},
	} {
		t.Run(tc.strategy.Name(), func(t *testing.T) {
			m := NewMetrics()
			m.strategy(tc.strategy)
			var want strings.Builder
			want.WriteString("# HELP dualca_renewals_total Client renewals acted on, by strategy, method (issuing-condition, secret-deletion) and result (triggered, skipped, failed).\n")
			want.WriteString("# TYPE dualca_renewals_total counter\n")
			for _, result := range []string{"failed", "skipped", "triggered"} {
				want.WriteString(`dualca_renewals_total{method="` + tc.method + `",result="` + result + `",strategy="` + tc.strategy.Name() + "\"} 0\n")
			}
			if err := testutil.CollectAndCompare(m.renewals, strings.NewReader(want.String())); err != nil {
				t.Error(err)
			}
			if n := testutil.CollectAndCount(m.renewals); n != 3 {
				t.Errorf("%d renewal series, want the 3 results of %s alone (not %s, %s)", n, tc.strategy.Name(), tc.other, tc.otherMethod)
			}
		})
	}
}

// The watch of roots holds the root read now and nothing of those before:
// a process living through rotation after rotation keeps no entry per
// root, and a root that comes back after another is a new propagation,
// timed from its return.
func TestTheRootWatchKeepsTheCurrentRootAlone(t *testing.T) {
	t.Parallel()
	m := NewMetrics()
	w := rootWatch{metrics: m}
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	w.reflected("root-0", t0)
	for i := 1; i <= 1000; i++ {
		at := t0.Add(time.Duration(i) * time.Minute)
		w.saw(fmt.Sprintf("root-%d", i), at)
		w.reflected(fmt.Sprintf("root-%d", i), at.Add(time.Second))
	}
	back := t0.Add(2000 * time.Minute)
	if got := w.saw("root-0", back); !got.Equal(back) {
		t.Errorf("root-0, back after 1000 others, is timed from %v, want its return %v", got, back)
	}
	w.reflected("root-0", back.Add(3*time.Second))
	if n := testutil.CollectAndCount(m.propagation); n != 1 {
		t.Fatalf("%d propagation histograms", n)
	}
	var out dto.Metric
	if err := m.propagation.Write(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.GetHistogram().GetSampleCount(); got != 1002 {
		t.Errorf("%d propagations observed, want 1002: one per root and one for the root that came back", got)
	}
}

// A scrape sees every root of the bundle, whenever it comes: never the
// window between a reset of the per-root gauges and their next set.
func TestAScrapeAlwaysSeesEveryRoot(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	m := NewMetrics()
	m.strategy(&zeroDowntime{})
	d := rt.renew
	roots, err := bundle.ParseCertificates("ca.crt", d.CAPEM)
	if err != nil || len(roots) != 2 {
		t.Fatalf("the rotating bundle holds %d roots (%v), want 2", len(roots), err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				m.decision(d, string(d.State.Phase), rt.clients, rt.now)
			}
		}
	}()
	m.decision(d, string(d.State.Phase), rt.clients, rt.now)
	short := 0
	for range 2000 {
		for name, c := range map[string]prometheus.Collector{"root expiry": m.rootExpiry, "root clients": m.rootClients, "strategy": m.strategyInfo} {
			want := 2
			if name == "strategy" {
				want = 1
			}
			if n := testutil.CollectAndCount(c); n != want {
				short++
				t.Logf("a scrape of %s saw %d series, want %d", name, n, want)
			}
		}
	}
	close(stop)
	<-done
	if short > 0 {
		t.Errorf("%d scrapes saw a part of the series", short)
	}
}

// The forced-switch counter's help names every cause of a forced switch.
func TestTheForcedSwitchHelpNamesEveryCause(t *testing.T) {
	t.Parallel()
	ch := make(chan *prometheus.Desc, 1)
	NewMetrics().switchesForced.Describe(ch)
	help := (<-ch).String()
	for _, cause := range []string{"grace period over", "dualca promote", "server root", "server certificate", "server chain full", "changed outside dualca"} {
		if !strings.Contains(help, cause) {
			t.Errorf("the help does not name %q: %s", cause, help)
		}
	}
}
