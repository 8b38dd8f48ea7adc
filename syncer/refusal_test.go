package syncer

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/dualca/dualca/bundle"
)

// A plan refused for its size (bundle/budget.go) leaves the gateway
// behind the current root: the rotation lag grows, every such reconcile
// counts as a sync error of reason bundle_too_large, the last sync stays
// where it was, and the BundleTooLarge Warning is told once per root kept
// out, not at every reconcile; once a plan fits, the lag is 0 again.
func TestARefusedPlanIsToldOnceAndLeavesTheGatewayBehind(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	m := NewMetrics()
	rec := &recordedEvents{}
	r := &reporter{recorder: rec, metrics: m, strategy: &zeroDowntime{}, roots: rootWatch{metrics: m}}
	gw := &corev1.Secret{}
	refused := pass{rootFP: "new", written: written{object: gw}, decision: bundle.Decision{
		State:   bundle.State{Strategy: bundle.StrategyZeroDowntime, Root: "old", Phase: bundle.PhaseSteady},
		Refused: "ca.crt would be too large",
		Events:  []bundle.Event{{Warning: true, Reason: bundle.ReasonBundleTooLarge, Message: "the gateway is left as it is"}},
	}}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r.rootSeen("new", start)
	r.synced(context.Background(), refused, start)
	r.synced(context.Background(), refused, start.Add(time.Minute))

	g.Expect(rec.events).To(HaveLen(1), "told once")
	g.Expect(rec.events[0].reason).To(Equal(bundle.ReasonBundleTooLarge))
	g.Expect(rec.events[0].typ).To(Equal(corev1.EventTypeWarning))
	g.Expect(testutil.ToFloat64(m.syncErrors.WithLabelValues("bundle_too_large"))).To(Equal(2.0))
	g.Expect(testutil.ToFloat64(m.rotationLag)).To(Equal(60.0), "behind the root since it was first seen")
	g.Expect(testutil.ToFloat64(m.lastSync)).To(BeZero(), "not in sync")

	fits := refused
	fits.decision = bundle.Decision{State: bundle.State{Strategy: bundle.StrategyZeroDowntime, Root: "new", Phase: bundle.PhaseBundle}}
	r.synced(context.Background(), fits, start.Add(2*time.Minute))
	g.Expect(testutil.ToFloat64(m.rotationLag)).To(BeZero())
	g.Expect(testutil.ToFloat64(m.lastSync)).To(Equal(float64(start.Add(2 * time.Minute).Unix())))
	r.synced(context.Background(), refused, start.Add(3*time.Minute))
	g.Expect(rec.events).To(HaveLen(2), "a refusal after a plan that fit is told again")
}
