package syncer

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

func TestSameReasonTogether(t *testing.T) {
	t.Parallel()
	retired := func(msg string) bundle.Event { return bundle.Event{Reason: bundle.ReasonRootRetired, Message: msg} }
	tests := map[string]struct {
		in, want []bundle.Event
	}{
		"two roots retired at once make one event that names both": {
			in:   []bundle.Event{retired("root R1 retired"), {Reason: bundle.ReasonBundleUpdated, Message: "holds 1 root"}, retired("root R2 retired")},
			want: []bundle.Event{retired("root R1 retired; root R2 retired"), {Reason: bundle.ReasonBundleUpdated, Message: "holds 1 root"}},
		},
		"a Warning and a Normal event of one reason stay apart": {
			in:   []bundle.Event{{Reason: bundle.ReasonBundleUpdated, Message: "a"}, {Warning: true, Reason: bundle.ReasonBundleUpdated, Message: "b"}},
			want: []bundle.Event{{Reason: bundle.ReasonBundleUpdated, Message: "a"}, {Warning: true, Reason: bundle.ReasonBundleUpdated, Message: "b"}},
		},
		"no events, none": {},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			NewWithT(t).Expect(sameReasonTogether(tt.in)).To(Equal(tt.want))
		})
	}
}
