package operator

import (
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// TestTheNextStepIsPrintedWithItsFirstMoments: the text report shows the
// summary, what is due now, and no more than maxUpcomingShown moments
// (JSON has them all); what cannot be told is said so.
func TestTheNextStepIsPrintedWithItsFirstMoments(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var upcoming []syncer.Upcoming
	for i := range maxUpcomingShown + 2 {
		upcoming = append(upcoming, syncer.Upcoming{At: at.Add(time.Duration(i) * time.Hour), Step: bundle.StepRetire, Root: "0123456789ab", What: "roots leave"})
	}
	tests := map[string]struct {
		next  *syncer.Next
		want  string
		shown int
	}{
		"a summary, what is due, the first moments": {
			next:  &syncer.Next{Summary: "renewing: 3 clients pending", DueNow: []string{"RotationPaused: paused"}, Upcoming: upcoming},
			want:  "next\trenewing: 3 clients pending\ndue now\tRotationPaused: paused\nupcoming\t2026-11-24T10:00:00Z  retire 0123456789ab: roots leave\n",
			shown: maxUpcomingShown,
		},
		"unknown": {next: &syncer.Next{Unknown: "needs a usable root", Upcoming: upcoming}, want: "next\tunknown: needs a usable root\n"},
		"none":    {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			var text bytes.Buffer
			writeNext(&text, tc.next)
			g.Expect(text.String()).To(HavePrefix(tc.want))
			g.Expect(strings.Count(text.String(), "roots leave")).To(Equal(tc.shown))
		})
	}
}
