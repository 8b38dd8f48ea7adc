package syncer

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dualca/dualca/legacy"
)

// The renewal counters of the strategy that runs exist from the start, at
// 0, so that rate() sees the first renewals after a start; the other
// strategy's stay absent.
func TestRenewalCountersStartAtZeroForTheStrategyThatRuns(t *testing.T) {
	for _, tc := range []struct {
		strategy    Strategy
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
