package bundle_test

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// TestPlanNextCheck checks NextCheck against its contract: it is the first
// moment at which time alone changes the decision. Planning again on the
// Secret just written, any time before NextCheck, must decide the same.
func TestPlanNextCheck(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	onR1 := newClient(t, "ns/a", f.r1, f.r1)
	onR2 := newClient(t, "ns/a", f.r2, f.r2, f.r1)

	tests := map[string]struct {
		gw      bundle.Gateway
		clients bundle.Clients
		now     time.Time
		want    time.Time
	}{
		"a rotation just recorded is checked again when its propagation delay ends": {
			gw:      gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: tracked(onR1),
			now:     testNow,
			want:    testNow.Add(time.Minute),
		},
		"in phase Bundle the next check is RootAddedAt plus the propagation delay": {
			gw:      gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: tracked(onR1),
			now:     testNow,
			want:    testNow.Add(50 * time.Second),
		},
		"while clients renew the next check is the end of the grace period": {
			gw:      gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: tracked(onR1),
			now:     testNow,
			want:    testNow.Add(55 * time.Minute),
		},
		"paused, the end of the grace period is no moment: the next is the first leaf expiry": {
			gw: operated(gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
				bundle.AnnotationPaused, bundle.PausedTrue, bundle.AnnotationPausedAt, testNow.Add(-time.Minute).Format(time.RFC3339)),
			clients: tracked(onR1),
			now:     testNow,
			want:    testNow.Add(2*h + time.Second),
		},
		"untracked clients: before the switch the next check is the end of the grace period": {
			gw:      gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: bundle.Clients{},
			now:     testNow,
			want:    testNow.Add(55 * time.Minute),
		},
		"a server root expiring before the grace ends is checked the first second its switch is forced": {
			gw:      gatewaySecret{server: f.soon, roots: list(f.r2, f.soon), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: tracked(newClient(t, "ns/a", f.soon, f.soon)),
			now:     testNow,
			want:    f.soon.Cert.NotAfter.Add(-testMargin).Add(time.Second),
		},
		"at the very second a server root reaches its expiry margin the next check is the next second, not its expiry": {
			gw:      gatewaySecret{server: f.soon, roots: list(f.r2, f.soon), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * h)}.gateway(),
			clients: tracked(newClient(t, "ns/a", f.soon, f.soon)),
			now:     f.soon.Cert.NotAfter.Add(-testMargin),
			want:    f.soon.Cert.NotAfter.Add(-testMargin).Add(time.Second),
		},
		"after the switch the next check is when the old root may be retired": {
			gw:      gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Minute), switchedAt: testNow.Add(-30 * time.Second)}.gateway(),
			clients: tracked(onR2),
			now:     testNow,
			want:    testNow.Add(30 * time.Second),
		},
		"untracked clients: after the switch the next check is the old root's expiry": {
			gw:      gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-50 * time.Minute)}.gateway(),
			clients: bundle.Clients{},
			now:     testNow,
			want:    f.r1.Cert.NotAfter.Add(time.Second),
		},
		"an old root kept for a client's leaf is checked again when that leaf expires": {
			gw:      gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-50 * time.Minute)}.gateway(),
			clients: tracked(newClient(t, "ns/a", f.r2, f.r2), newClient(t, "ns/b", f.r1, f.r2, f.r1)),
			now:     testNow,
			want:    testNow.Add(2*h + time.Second), // the leaves of newClient expire then: valid through NotAfter
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := validRoot(t, f.r2, tc.now)
			d := bundle.Plan(tc.gw, root, tc.clients, testTimings, tc.now)
			expectConsistent(t, d, root, tc.now)
			g.Expect(d.NextCheck).To(BeTemporally("==", tc.want), "NextCheck")

			// Nothing changes by time alone before NextCheck.
			written := written(d)
			for _, at := range []time.Time{tc.now.Add(time.Second), d.NextCheck.Add(-time.Second)} {
				if !at.After(tc.now) || !at.Before(d.NextCheck) {
					continue
				}
				again := bundle.Plan(written, validRoot(t, f.r2, at), tc.clients, testTimings, at)
				g.Expect(again.Events).To(BeEmpty(), "events at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(bytes.Equal(again.CertPEM, d.CertPEM)).To(BeTrue(), "tls.crt changed at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(bytes.Equal(again.CAPEM, d.CAPEM)).To(BeTrue(), "ca.crt changed at %s, before NextCheck %s", at, d.NextCheck)
				g.Expect(again.State.Annotations()).To(Equal(d.State.Annotations()), "annotations at %s, before NextCheck %s", at, d.NextCheck)
			}
		})
	}
}
