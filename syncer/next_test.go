package syncer

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// TestNextSaysWhatPlanDecides: the next step of `dualca status` during a
// rotation, from Plan's moments (package operator prints it).
func TestNextSaysWhatPlanDecides(t *testing.T) {
	t.Parallel()
	r := newRotation(t)
	now, timings, clients, rotating := r.now, r.timings, r.clients, r.rotating
	steady := writtenGateway(r.steady)
	with := func(gw bundle.Gateway, k, v string) bundle.Gateway {
		a := gw.State.Annotations()
		a[k] = v
		gw.State = bundle.ParseState(a)
		return gw
	}
	r2 := bundle.Short(r.r2.Fingerprint)

	tests := map[string]struct {
		gw      bundle.Gateway
		root    *bundle.Root
		clients *bundle.Clients
		summary string
		unknown string
		first   bundle.Step
		dueNow  string
	}{
		"renewing: who is pending, and the switches to come": {
			gw: rotating, root: r.r2, clients: &clients,
			summary: "renewing: 1 clients pending; server switch when they are on " + r2 + " for 1m0s, or at 2026-11-24T10:55:00Z (grace); next check 2026-11-24T10:55:00Z (switch-grace)",
			first:   bundle.StepSwitchGrace,
		},
		"paused: what holds, and the one switch that cannot wait": {
			gw: with(with(rotating, bundle.AnnotationPaused, "true"), bundle.AnnotationPausedAt, "2026-11-24T09:58:00Z"), root: r.r2, clients: &clients,
			summary: "paused: no client is renewed and the server does not switch until dualca resume; server switch forced at 2026-11-26T09:54:01Z (server root expiry margin)",
			first:   bundle.StepLeafExpiry,
		},
		"promoted in phase Bundle: when it takes effect": {
			gw: with(writtenGateway(bundle.Plan(steady, r.r2, clients, timings, now.Add(-10*time.Second))), bundle.AnnotationPromote, r.r2.Fingerprint), root: r.r2, clients: &clients,
			summary: "bundle: the gateway loads root " + r2 + "; client renewals start at 2026-11-24T10:00:50Z; next check 2026-11-24T10:00:50Z (renewals-start)",
			first:   bundle.StepRenewalsStart,
		},
		"steady": {
			gw: steady, root: r.r1, clients: &clients,
			summary: "steady: root " + bundle.Short(r.r1.Fingerprint) + " alone; nothing due; next check 2026-11-25T10:00:01Z (leaf-expiry)",
			first:   bundle.StepLeafExpiry,
		},
		"a pause dualca has not obeyed yet is due now": {
			gw: with(rotating, bundle.AnnotationPaused, "true"), root: r.r2, clients: &clients,
			summary: "paused: no client is renewed and the server does not switch until dualca resume; server switch forced at 2026-11-26T09:54:01Z (server root expiry margin)",
			dueNow:  bundle.ReasonRotationPaused + ": rotation paused by the operator",
		},
		"without the root, unknown":             {gw: rotating, clients: &clients, unknown: "give --root-secret"},
		"tracked clients not read, unknown":     {gw: rotating, root: r.r2, unknown: "give its client selection"},
		"timings not recorded, unknown":         {gw: with(rotating, bundle.AnnotationTimings, "garbage"), root: r.r2, clients: &clients, unknown: "records no timings"},
		"the legacy strategy schedules nothing": {gw: with(rotating, bundle.AnnotationStrategy, bundle.StrategyLegacy), root: r.r2, summary: "legacy strategy: the gateway copies the root Secret as soon as it changes; nothing is scheduled"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			n := next(tc.gw, tc.root, tc.clients, now)
			if tc.unknown != "" {
				g.Expect(n.Unknown).To(ContainSubstring(tc.unknown))
				g.Expect(n.Upcoming).To(BeEmpty())
				return
			}
			g.Expect(n.Unknown).To(BeEmpty())
			g.Expect(n.Summary).To(Equal(tc.summary))
			if tc.first != "" {
				g.Expect(n.Upcoming).NotTo(BeEmpty())
				g.Expect(n.Upcoming[0].Step).To(Equal(tc.first))
			}
			if tc.dueNow != "" {
				g.Expect(n.DueNow).To(ConsistOf(HavePrefix(tc.dueNow)))
			} else {
				g.Expect(n.DueNow).To(BeEmpty(), "dualca has acted on the Secret as written")
			}
		})
	}
}
