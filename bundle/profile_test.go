package bundle_test

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// testProfile is a server profile of names, an address and a lifetime
// short enough for the roots of the tests (a third of it, 4h, exceeds
// testTimings' grace and delay, as the flags require).
var testProfile = bundle.ServerProfile{DNSNames: []string{"gw.agents.example.com", "*.gw.agents.example.com"},
	IPAddresses: []net.IP{net.ParseIP("10.0.0.10")}, KeyAlgorithm: bundle.KeyECDSAP256, Lifetime: 12 * time.Hour}

// withProfile is testTimings with profile.
func withProfile(profile bundle.ServerProfile) bundle.Timings {
	t := testTimings
	t.Server = &profile
	return t
}

// hasEvent reports whether d raised an event of reason.
func hasEvent(d bundle.Decision, reason string) bool {
	return slices.ContainsFunc(d.Events, func(e bundle.Event) bool { return e.Reason == reason })
}

func TestTheServerLeafFollowsTheProfile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	long := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(100*time.Hour), certs.Options{IsCA: true, DNSNames: []string{"root.example.com"}}, nil)
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, long, testNow), bundle.Clients{}, withProfile(testProfile), testNow)
	leaf := d.Leaf
	g.Expect(leaf.DNSNames).To(ConsistOf(testProfile.DNSNames), "the gateway's names, not the root's")
	g.Expect(leaf.IPAddresses).To(HaveLen(1))
	g.Expect(leaf.IPAddresses[0].Equal(testProfile.IPAddresses[0])).To(BeTrue())
	g.Expect(leaf.NotAfter).To(Equal(testNow.Add(12*time.Hour)), "the profile's lifetime from now")
	g.Expect(leaf.NotBefore).To(Equal(testNow.Add(-bundle.ClockSkew)), "backdated by the clock skew accepted")
	g.Expect(testProfile.Mismatch(leaf, long.Cert)).To(BeEmpty())
	g.Expect(verifyServer(d.CertPEM, long.Cert, testNow)).To(Succeed())

	short := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(5*time.Hour), certs.Options{IsCA: true}, nil)
	d = bundle.Plan(bundle.Gateway{}, validRoot(t, short, testNow), bundle.Clients{}, withProfile(testProfile), testNow)
	g.Expect(d.Leaf.NotAfter).To(Equal(short.Cert.NotAfter), "never beyond the root")
	g.Expect(testProfile.Mismatch(d.Leaf, short.Cert)).To(BeEmpty(), "a leaf cut at its root's expiry matches the lifetime")
	for _, at := range []time.Duration{time.Hour, 4 * time.Hour, 5*time.Hour - time.Minute} {
		again := bundle.Plan(written(d), validRoot(t, short, testNow.Add(at)), bundle.Clients{}, withProfile(testProfile), testNow.Add(at))
		g.Expect(again.CertPEM).To(Equal(d.CertPEM), "a leaf ending with its root is not issued again (%s later): a new one would end there too", at)
		g.Expect(again.Events).To(BeEmpty())
	}
}

// TestTheServerLeafIsIssuedAgainWhenAThirdRemains: the threshold, to the
// second, and what NextCheck says of it.
func TestTheServerLeafIsIssuedAgainWhenAThirdRemains(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(100*time.Hour), certs.Options{IsCA: true}, nil)
	timings := withProfile(testProfile)
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, r, testNow), bundle.Clients{}, timings, testNow)
	gw := written(d)
	margin := d.Leaf.NotAfter.Add(-testProfile.Lifetime / 3)
	g.Expect(d.Upcoming).To(ContainElement(bundle.Moment{At: margin, Step: bundle.StepServerReissue, Root: bundle.Fingerprint(r.Cert)}))
	settled := bundle.Plan(gw, validRoot(t, r, testNow.Add(time.Hour)), bundle.Clients{}, timings, testNow.Add(time.Hour))
	g.Expect(settled.NextCheck).To(Equal(margin), "dualca reconciles when the leaf reaches its margin")

	before := bundle.Plan(gw, validRoot(t, r, margin.Add(-time.Second)), bundle.Clients{}, timings, margin.Add(-time.Second))
	g.Expect(before.CertPEM).To(Equal(d.CertPEM), "a second before the margin, the leaf stays")
	g.Expect(before.Events).To(BeEmpty())

	at := bundle.Plan(gw, validRoot(t, r, margin), bundle.Clients{}, timings, margin)
	g.Expect(at.CertPEM).NotTo(Equal(d.CertPEM), "at the margin, it is issued again")
	g.Expect(at.Leaf.NotAfter).To(Equal(margin.Add(testProfile.Lifetime)))
	g.Expect(at.State.Server).To(Equal(bundle.Fingerprint(r.Cert)), "from the same root")
	g.Expect(at.State.SwitchedAt).To(Equal(gw.State.SwitchedAt), "a re-issue is not a switch")
	g.Expect(eventKeys(reasons(at.Events))).To(Equal([]string{"Normal " + bundle.ReasonServerLeafReissued}))
	g.Expect(at.Events[0].Message).To(ContainSubstring("less than a third of its lifetime remains"))
	again := bundle.Plan(written(at), validRoot(t, r, margin), bundle.Clients{}, timings, margin)
	g.Expect(again.CertPEM).To(Equal(at.CertPEM), "the fresh leaf is kept")
	g.Expect(again.Events).To(BeEmpty())

	late := margin.Add(3 * time.Hour)
	expired := bundle.Plan(gw, validRoot(t, r, d.Leaf.NotAfter.Add(time.Minute)), bundle.Clients{}, timings, d.Leaf.NotAfter.Add(time.Minute))
	g.Expect(verifyServer(expired.CertPEM, r.Cert, d.Leaf.NotAfter.Add(time.Minute))).To(Succeed(), "an expired leaf is never served when one can be made")
	g.Expect(expired.Events[0].Message).To(ContainSubstring("it expired at"))
	g.Expect(bundle.Plan(gw, validRoot(t, r, late), bundle.Clients{}, timings, late).Leaf.NotAfter).To(Equal(late.Add(testProfile.Lifetime)))
}

func reasons(events []bundle.Event) ([]string, []bool) {
	var rs []string
	var ws []bool
	for _, e := range events {
		rs, ws = append(rs, e.Reason), append(ws, e.Warning)
	}
	return rs, ws
}

// TestTheServerLeafIsIssuedAgainWhenTheProfileChanges: each part of the
// profile, changed alone, makes a new leaf; the same profile keeps it.
func TestTheServerLeafIsIssuedAgainWhenTheProfileChanges(t *testing.T) {
	t.Parallel()
	r := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(100*time.Hour), certs.Options{IsCA: true}, nil)
	first := bundle.Plan(bundle.Gateway{}, validRoot(t, r, testNow), bundle.Clients{}, withProfile(testProfile), testNow)
	later := testNow.Add(time.Hour)
	change := func(f func(p *bundle.ServerProfile)) bundle.ServerProfile {
		p := testProfile
		p.DNSNames, p.IPAddresses = slices.Clone(p.DNSNames), slices.Clone(p.IPAddresses)
		f(&p)
		return p
	}
	tests := map[string]struct {
		profile bundle.ServerProfile
		why     string // "" : kept
	}{
		"the same profile":              {profile: testProfile},
		"the same names in other order": {profile: change(func(p *bundle.ServerProfile) { slices.Reverse(p.DNSNames) })},
		"a DNS name added":              {profile: change(func(p *bundle.ServerProfile) { p.DNSNames = append(p.DNSNames, "gw2.example.com") }), why: "DNS names"},
		"the DNS names removed":         {profile: change(func(p *bundle.ServerProfile) { p.DNSNames = nil }), why: "DNS names"},
		"another IP address":            {profile: change(func(p *bundle.ServerProfile) { p.IPAddresses = []net.IP{net.ParseIP("fd00::1")} }), why: "IP addresses"},
		"another key algorithm":         {profile: change(func(p *bundle.ServerProfile) { p.KeyAlgorithm = bundle.KeyEd25519 }), why: "key algorithm ecdsa-p256, want ed25519"},
		"a longer lifetime":             {profile: change(func(p *bundle.ServerProfile) { p.Lifetime = 24 * time.Hour }), why: "lifetime 12h0m0s, want 24h0m0s"},
		"a shorter lifetime":            {profile: change(func(p *bundle.ServerProfile) { p.Lifetime = 11 * time.Hour }), why: "lifetime 12h0m0s, want 11h0m0s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			d := bundle.Plan(written(first), validRoot(t, r, later), bundle.Clients{}, withProfile(tc.profile), later)
			if tc.why == "" {
				g.Expect(d.CertPEM).To(Equal(first.CertPEM))
				g.Expect(d.Events).To(BeEmpty())
				return
			}
			g.Expect(d.CertPEM).NotTo(Equal(first.CertPEM))
			g.Expect(d.Events).To(HaveLen(1))
			g.Expect(d.Events[0].Reason).To(Equal(bundle.ReasonServerLeafReissued))
			g.Expect(d.Events[0].Warning).To(BeFalse())
			g.Expect(d.Events[0].Message).To(ContainSubstring(tc.why))
			g.Expect(tc.profile.Mismatch(d.Leaf, r.Cert)).To(BeEmpty(), "the new leaf matches")
			g.Expect(bundle.KeyAlgorithmOf(d.Leaf.PublicKey)).To(Equal(tc.profile.KeyAlgorithm))
			again := bundle.Plan(written(d), validRoot(t, r, later), bundle.Clients{}, withProfile(tc.profile), later)
			g.Expect(again.CertPEM).To(Equal(d.CertPEM))
			g.Expect(again.Events).To(BeEmpty())
		})
	}
}

// TestARotationNeverReissuesFromAnOlderRoot: during a rotation the leaf on
// the old root is kept, past its margin or with another profile (dualca
// holds only the new root's key); the switch issues a fresh one; and a
// leaf about to expire forces the switch even while paused.
func TestARotationNeverReissuesFromAnOlderRoot(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	profile := testProfile
	profile.Lifetime = 210 * time.Minute // a third (70m) exceeds the grace and the delay (61m), as the flags require
	timings := withProfile(profile)
	start := testNow.Add(-time.Hour)
	steady := bundle.Plan(bundle.Gateway{}, validRoot(t, f.r1, start), bundle.Clients{}, timings, start)
	leaf := steady.Leaf
	rotate := leaf.NotAfter.Add(-profile.Lifetime/3 - time.Minute) // just before the margin
	rotating := bundle.Plan(written(steady), validRoot(t, f.r2, rotate), bundle.Clients{}, timings, rotate)
	g.Expect(rotating.State.Server).To(Equal(bundle.Fingerprint(f.r1.Cert)))

	inMargin := rotate.Add(30 * time.Minute)
	changed := profile
	changed.DNSNames = []string{"other.example.com"}
	for _, tm := range []bundle.Timings{timings, withProfile(changed)} {
		d := bundle.Plan(written(rotating), validRoot(t, f.r2, inMargin), bundle.Clients{}, tm, inMargin)
		g.Expect(parsed(t, d.CertPEM)[0].Raw).To(Equal(leaf.Raw), "the old root's leaf is kept, its key out of reach")
		g.Expect(hasEvent(d, bundle.ReasonServerLeafReissued)).To(BeFalse())
		g.Expect(hasEvent(d, bundle.ReasonServerLeafExpiring)).To(BeFalse())
	}

	graceOver := rotating.State.RootAddedAt.Add(testTimings.ServerSwitchGrace)
	switched := bundle.Plan(written(rotating), validRoot(t, f.r2, graceOver), bundle.Clients{}, timings, graceOver)
	g.Expect(switched.State.Server).To(Equal(bundle.Fingerprint(f.r2.Cert)))
	g.Expect(leaf.NotAfter.After(graceOver)).To(BeTrue(), "the old leaf was still valid at the switch")
	g.Expect(switched.Leaf.NotAfter).To(Equal(graceOver.Add(profile.Lifetime)), "the switch issues a fresh leaf")
	g.Expect(profile.Mismatch(switched.Leaf, f.r2.Cert)).To(BeEmpty())

	// Paused, the grace does not move the server; the leaf's end does.
	paused := written(rotating)
	paused.State.Paused = bundle.PausedTrue
	held := bundle.Plan(paused, validRoot(t, f.r2, graceOver), bundle.Clients{}, timings, graceOver)
	g.Expect(held.State.Server).To(Equal(bundle.Fingerprint(f.r1.Cert)), "paused: no switch at the grace")
	forcedAt := leaf.NotAfter.Add(-(testTimings.TrustPropagationDelay + bundle.ClockSkew) + time.Second)
	g.Expect(held.Upcoming).To(ContainElement(bundle.Moment{At: forcedAt, Step: bundle.StepSwitchServerExpiry, Root: bundle.Fingerprint(f.r1.Cert)}),
		"the leaf's end, not its root's (%s), is when the server must move", f.r1.Cert.NotAfter)
	forced := bundle.Plan(written(held), validRoot(t, f.r2, forcedAt), bundle.Clients{}, timings, forcedAt)
	g.Expect(forced.State.Server).To(Equal(bundle.Fingerprint(f.r2.Cert)))
	g.Expect(forced.Events).To(ContainElement(And(
		HaveField("Reason", bundle.ReasonServerSwitchForced), HaveField("Warning", true),
		HaveField("Message", ContainSubstring("the server certificate expires at")), HaveField("Message", ContainSubstring("paused")))))
	g.Expect(verifyServer(forced.CertPEM, f.r2.Cert, forcedAt)).To(Succeed())
}

// TestAnUnknownProfileKeepsTheLeaf: `dualca status` replays a decision
// without the profile (nil): it neither re-issues a leaf for its names nor
// announces a re-issue other than at the leaf's own margin.
func TestAnUnknownProfileKeepsTheLeaf(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(100*time.Hour), certs.Options{IsCA: true}, nil)
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, r, testNow), bundle.Clients{}, withProfile(testProfile), testNow)
	replay := bundle.Plan(written(d), validRoot(t, r, testNow.Add(time.Hour)), bundle.Clients{}, testTimings, testNow.Add(time.Hour))
	g.Expect(replay.CertPEM).To(Equal(d.CertPEM))
	g.Expect(replay.Events).To(BeEmpty())
	g.Expect(replay.Upcoming).To(ContainElement(HaveField("At", d.Leaf.NotAfter.Add(-testProfile.Lifetime/3))))
	g.Expect(strings.Join(d.Leaf.DNSNames, ",")).To(Equal(strings.Join(testProfile.DNSNames, ",")))
}
