package bundle_test

import (
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// operated is gw with the operator's annotations (and dualca's paused-at)
// set, read back through their text form; an empty value removes one.
func operated(gw bundle.Gateway, kv ...string) bundle.Gateway {
	a := gw.State.Annotations()
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(a, kv[i])
			continue
		}
		a[kv[i]] = kv[i+1]
	}
	gw.State = bundle.ParseState(a)
	return gw
}

// event is the event of d with reason, nil when there is none.
func event(d bundle.Decision, reason string) *bundle.Event {
	i := slices.IndexFunc(d.Events, func(e bundle.Event) bool { return e.Reason == reason })
	if i < 0 {
		return nil
	}
	return &d.Events[i]
}

func hasStep(d bundle.Decision, step bundle.Step) bool {
	return slices.ContainsFunc(d.Upcoming, func(m bundle.Moment) bool { return m.Step == step })
}

func TestOperatorControls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r1, r2 := bundle.Fingerprint(f.r1.Cert), bundle.Fingerprint(f.r2.Cert)
	stamp := testNow.Format(time.RFC3339)
	onR1 := newClient(t, "ns/a", f.r1, f.r1)
	onR2 := newClient(t, "ns/a", f.r2, f.r2)
	// renewing: R2 in the bundle for 5 minutes, the server on R1.
	renewing := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * time.Hour)}
	// ready: every client on R2 for longer than the propagation delay.
	ready := renewing
	ready.readyAt = testNow.Add(-2 * time.Minute)
	// overdue: the grace period is over.
	overdue := renewing
	overdue.addedAt = testNow.Add(-2 * time.Hour)
	// brink: the server root is inside its expiry margin.
	brink := gatewaySecret{server: f.brink, roots: list(f.r2, f.brink), root: f.r2, addedAt: testNow.Add(-5 * time.Minute), switchedAt: testNow.Add(-2 * time.Hour)}
	// bundling: R2 entered the bundle 10 s ago.
	bundling := renewing
	bundling.addedAt = testNow.Add(-10 * time.Second)
	switched := gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Minute), switchedAt: testNow.Add(-5 * time.Minute)}

	tests := map[string]struct {
		gw      bundle.Gateway
		clients bundle.Clients
		check   func(g *WithT, d bundle.Decision)
	}{
		"without a pause a pending client is renewed (what the pause cases hold back)": {
			gw: renewing.gateway(), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.Renew).To(Equal([]string{"ns/a"}))
				g.Expect(d.State.PausedAt).To(BeZero())
			},
		},
		"a pause is obeyed: no renewal, told once with RotationPaused, recorded": {
			gw: operated(renewing.gateway(), bundle.AnnotationPaused, "true"), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.Renew).To(BeEmpty())
				g.Expect(event(d, bundle.ReasonRotationPaused)).To(HaveValue(HaveField("Warning", false)))
				g.Expect(d.State.PausedAt).To(Equal(testNow))
				g.Expect(d.State.Annotations()).To(HaveKeyWithValue(bundle.AnnotationPaused, "true"), "the operator's annotation stays")
				g.Expect(d.State.Phase).To(Equal(bundle.PhaseRenewing), "the phase is where the rotation stands")
			},
		},
		"a value dualca does not know is read as paused, with a Warning that quotes it": {
			gw: operated(renewing.gateway(), bundle.AnnotationPaused, "yes"), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.Renew).To(BeEmpty())
				e := event(d, bundle.ReasonRotationPaused)
				g.Expect(e).NotTo(BeNil())
				g.Expect(e.Warning).To(BeTrue())
				g.Expect(e.Message).To(ContainSubstring(`dualca.io/paused="yes" is neither "true" nor "false": read as paused`))
				g.Expect(d.State.Annotations()).To(HaveKeyWithValue(bundle.AnnotationPaused, "yes"), "kept verbatim: the operator's to fix")
			},
		},
		"\"false\" is not paused": {
			gw: operated(renewing.gateway(), bundle.AnnotationPaused, "false"), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.Renew).To(Equal([]string{"ns/a"}))
				g.Expect(d.Events).To(BeEmpty())
			},
		},
		"paused with every client ready: the server stays": {
			gw: operated(ready.gateway(), bundle.AnnotationPaused, "true", bundle.AnnotationPausedAt, stamp), clients: tracked(onR2),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r1))
				g.Expect(d.Events).To(BeEmpty(), "a pause already obeyed is not told again")
				g.Expect(hasStep(d, bundle.StepSwitchClientsReady)).To(BeFalse(), "no readiness switch to come while paused")
			},
		},
		"paused past the grace period: the server stays, and no grace moment is due": {
			gw: operated(overdue.gateway(), bundle.AnnotationPaused, "true", bundle.AnnotationPausedAt, stamp), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r1))
				g.Expect(hasStep(d, bundle.StepSwitchGrace)).To(BeFalse())
				g.Expect(hasStep(d, bundle.StepSwitchServerExpiry)).To(BeTrue(), "the expiry margin still comes")
			},
		},
		"paused, a server root inside its expiry margin still switches, with a Warning saying it could not wait": {
			gw: operated(brink.gateway(), bundle.AnnotationPaused, "true", bundle.AnnotationPausedAt, stamp), clients: tracked(newClient(t, "ns/a", f.brink, f.brink)),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r2))
				e := event(d, bundle.ReasonServerSwitchForced)
				g.Expect(e).To(HaveValue(HaveField("Warning", true)))
				g.Expect(e.Message).To(ContainSubstring("the rotation is paused, but this cannot wait"))
				g.Expect(d.Renew).To(BeEmpty(), "renewals stay paused")
			},
		},
		"resumed: RotationResumed, paused-at cleared, and the switch for ready clients comes at once": {
			gw: operated(ready.gateway(), bundle.AnnotationPausedAt, testNow.Add(-time.Hour).Format(time.RFC3339)), clients: tracked(onR2),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(event(d, bundle.ReasonRotationResumed)).To(HaveValue(HaveField("Message", ContainSubstring("paused since"))))
				g.Expect(d.State.PausedAt).To(BeZero())
				g.Expect(d.State.Server).To(Equal(r2))
				g.Expect(event(d, bundle.ReasonServerSwitched)).NotTo(BeNil())
			},
		},
		"promote switches with a client pending: a ServerSwitchForced Warning naming it, and the promote is consumed": {
			gw: operated(renewing.gateway(), bundle.AnnotationPromote, r2), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r2))
				e := event(d, bundle.ReasonServerSwitchForced)
				g.Expect(e).To(HaveValue(HaveField("Warning", true)))
				g.Expect(e.Message).To(ContainSubstring("promoted by the operator (dualca promote) with 1 clients not on the new root"))
				g.Expect(d.State.Annotations()).NotTo(HaveKey(bundle.AnnotationPromote), "consumed in the write that switches")
				g.Expect(d.Renew).To(Equal([]string{"ns/a"}), "the client left behind is still renewed")
			},
		},
		"promote in phase Bundle waits for the gateway to load the root, and says when": {
			gw: operated(bundling.gateway(), bundle.AnnotationPromote, r2), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r1))
				g.Expect(d.State.Promote).To(Equal(r2), "pending")
				g.Expect(d.Events).To(BeEmpty())
				g.Expect(d.NextCheck).To(Equal(bundling.addedAt.Add(testTimings.TrustPropagationDelay)))
				g.Expect(hasStep(d, bundle.StepSwitchPromoted)).To(BeTrue())
			},
		},
		"a promote naming another root than the current one is dropped with a Warning": {
			gw: operated(renewing.gateway(), bundle.AnnotationPromote, r1), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r1), "never a switch for a stale promote")
				g.Expect(event(d, bundle.ReasonPromoteIgnored)).To(HaveValue(HaveField("Warning", true)))
				g.Expect(d.State.Promote).To(BeEmpty())
			},
		},
		"a promote once the server presents the root is dropped": {
			gw: operated(switched.gateway(), bundle.AnnotationPromote, r2), clients: tracked(onR2),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(event(d, bundle.ReasonPromoteIgnored)).To(HaveValue(HaveField("Warning", false)))
				g.Expect(d.State.Promote).To(BeEmpty())
				g.Expect(event(d, bundle.ReasonServerSwitchForced)).To(BeNil())
			},
		},
		"promote while paused switches; renewals stay paused": {
			gw: operated(renewing.gateway(), bundle.AnnotationPaused, "true", bundle.AnnotationPausedAt, stamp, bundle.AnnotationPromote, r2), clients: tracked(onR1),
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r2))
				g.Expect(event(d, bundle.ReasonServerSwitchForced)).To(HaveValue(HaveField("Message", ContainSubstring("renewals stay paused"))))
				g.Expect(d.Renew).To(BeEmpty())
			},
		},
		"untracked clients: promote switches before the grace period ends": {
			gw: operated(renewing.gateway(), bundle.AnnotationPromote, r2), clients: bundle.Clients{},
			check: func(g *WithT, d bundle.Decision) {
				g.Expect(d.State.Server).To(Equal(r2))
				g.Expect(event(d, bundle.ReasonServerSwitchForced)).To(HaveValue(HaveField("Message", HaveSuffix("promoted by the operator (dualca promote)"))))
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			root := validRoot(t, f.r2, testNow)
			d := bundle.Plan(tc.gw, root, tc.clients, testTimings, testNow)
			expectConsistent(t, d, root, testNow)
			tc.check(g, d)
			// Told once: the Secret as written decides the same, silently.
			again := bundle.Plan(written(d), root, tc.clients, testTimings, testNow)
			g.Expect(again.Events).To(BeEmpty())
			g.Expect(again.State.Annotations()).To(Equal(d.State.Annotations()))
			if len(d.Upcoming) > 0 {
				g.Expect(d.Upcoming[0].At).To(Equal(d.NextCheck), "NextCheck is the first moment")
			}
		})
	}
}

func TestTimingsAreRecorded(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, f.r1, testNow), bundle.Clients{}, testTimings, testNow)
	g.Expect(d.State.Annotations()).To(HaveKeyWithValue(bundle.AnnotationTimings, "trust-propagation-delay=1m0s server-switch-grace=1h0m0s"))
	g.Expect(bundle.ParseState(d.State.Annotations()).Timings).To(Equal(testTimings))
	for _, bad := range []string{"trust-propagation-delay=soon", "grace=1h", "trust-propagation-delay"} {
		g.Expect(bundle.ParseState(map[string]string{bundle.AnnotationTimings: bad}).Timings).To(BeZero(), "%q is read as absent", bad)
	}
}
