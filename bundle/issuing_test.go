package bundle_test

import (
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestIssuingMovesOnlyToARootTheGatewayTrusts checks the rule issuing
// (issuing.go): the issuing Secret a CA Issuer signs clients with moves to
// the current root only once the gateway has had the propagation delay to
// trust it, and what dualca never put there is written over at once.
func TestIssuingMovesOnlyToARootTheGatewayTrusts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	// bundling: r2 entered the bundle 10 s ago, the gateway is loading it.
	bundling := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}
	// renewing: r2 entered the bundle 10 min ago: the gateway trusts it.
	renewing := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Minute), switchedAt: testNow.Add(-2 * h)}
	// bundlingKnowsSoon: as bundling, and dualca once read root-1-soon,
	// which is no longer in the bundle.
	bundlingKnowsSoon := bundling
	bundlingKnowsSoon.known = list(f.r2, f.r1, f.soon)

	holding := func(ca *certs.CA) bundle.IssuingFound {
		return bundle.IssuingFound{Exists: true, Root: validRoot(t, ca, testNow)}
	}
	absent := bundle.IssuingFound{}
	zero := func(gw bundle.Gateway, root *certs.CA) bundle.Decision {
		return bundle.Plan(gw, validRoot(t, root, testNow), tracked(), testTimings, testNow)
	}
	// waiting: a pass that waits for the clients before adopting a legacy
	// copy of copyOf, both roots on record (bundle.Waiting). The objects
	// the gateway reads hold served, each; none given, the copy.
	waiting := func(copyOf *certs.CA, served ...[]byte) bundle.Decision {
		gw := legacyCopy(t, copyOf)
		gw.Known = []*x509.Certificate{f.r1.Cert, f.r2.Cert}
		if len(served) == 0 {
			served = [][]byte{gw.CAPEM}
		}
		return bundle.Waiting(gw, served, validRoot(t, f.r2, testNow), testNow)
	}
	r1, r2 := bundle.Fingerprint(f.r1.Cert), bundle.Fingerprint(f.r2.Cert)
	reencoded := validRoot(t, f.r2, testNow)
	reencoded.CAPEM = append([]byte("\n"), reencoded.CAPEM...)

	tests := map[string]struct {
		found    bundle.IssuingFound
		decision bundle.Decision
		root     *certs.CA
		now      time.Time // zero: testNow
		want     bundle.IssuingAction
		reason   string
	}{
		"on a first install it is created at once with the root: the gateway serves from it": {
			found: absent, decision: zero(bundle.Gateway{}, f.r1), root: f.r1,
			want: bundle.IssuingAction{Write: true, Holds: r1}, reason: "has trusted root",
		},
		"absent while the gateway loads a new root, it waits: no leaf the gateway does not trust": {
			found: absent, decision: zero(bundling.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{}, reason: "waiting for the gateway to trust root",
		},
		"it keeps the old root while the gateway loads the new one": {
			found: holding(f.r1), decision: zero(bundling.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Holds: r1}, reason: "keeps root",
		},
		"it moves to the new root once the gateway has had the propagation delay": {
			found: holding(f.r1), decision: zero(renewing.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "for the propagation delay",
		},
		"it does not move while the operator holds the rotation": {
			found: holding(f.r1), root: f.r2,
			decision: zero(operated(renewing.gateway(), bundle.AnnotationPaused, "true", bundle.AnnotationPausedAt, testNow.Format(time.RFC3339)), f.r2),
			want:     bundle.IssuingAction{Holds: r1}, reason: "paused",
		},
		"holding the current root in the root Secret's bytes, it is left alone": {
			found: holding(f.r2), decision: zero(renewing.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Holds: r2},
		},
		"holding the current root in other bytes, it is written again, not told as tampering": {
			found: bundle.IssuingFound{Exists: true, Root: reencoded}, decision: zero(renewing.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "in other bytes",
		},
		"a CA dualca never read from the root Secret is written over at once, even while the gateway loads the new root": {
			found: holding(f.foreign), decision: zero(bundling.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Tampered: true, Holds: r2}, reason: "never read from the root Secret",
		},
		"a credential that is no CA, or a key that is not its certificate's, is written over at once": {
			found:    bundle.IssuingFound{Exists: true, Invalid: &bundle.InvalidError{Field: "tls.key", Reason: "does not match the certificate"}},
			decision: zero(bundling.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Tampered: true, Holds: r2}, reason: "no usable CA",
		},
		"a root dualca read once but the gateway no longer trusts moves at once: it would issue leaves nobody accepts": {
			found: holding(f.soon), decision: zero(bundlingKnowsSoon.gateway(), f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "no longer trusted by the gateway",
		},
		"an expired root moves at once, and is no tampering": {
			found:    bundle.IssuingFound{Exists: true, Root: validRoot(t, f.soon, testNow)},
			decision: bundle.Plan(bundlingKnowsSoon.gateway(), validRoot(t, f.r2, testNow.Add(h)), tracked(), testTimings, testNow.Add(h)),
			root:     f.r2, now: testNow.Add(h),
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "has expired",
		},
		"while an adoption waits for the clients, it keeps the old root the gateway as found trusts": {
			found: holding(f.r1), decision: waiting(f.r1), root: f.r2,
			want: bundle.IssuingAction{Holds: r1}, reason: "keeps root",
		},
		"while an adoption waits for the clients, a root the gateway as found does not trust moves at once": {
			found: holding(f.r1), decision: waiting(f.r2), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "no longer trusted by the gateway",
		},
		"while an adoption waits for the clients, what the gateway serves counts, not the record it lags behind": {
			found: holding(f.r1), decision: waiting(f.r2, pemOf(f.r1.Cert)), root: f.r2,
			want: bundle.IssuingAction{Holds: r1}, reason: "keeps root",
		},
		"while an adoption waits for the clients, a root one of the objects the gateway reads lacks moves at once": {
			found: holding(f.r1), decision: waiting(f.r1, pemOf(f.r1.Cert), pemOf(f.r2.Cert)), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "no longer trusted by the gateway",
		},
		"while an adoption waits for the clients, an object the gateway reads gone trusts nothing": {
			found: holding(f.r1), decision: waiting(f.r1, pemOf(f.r1.Cert), nil), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "no longer trusted by the gateway",
		},
		"while an adoption waits for the clients, a foreign CA is written over at once": {
			found: holding(f.foreign), decision: waiting(f.r1), root: f.r2,
			want: bundle.IssuingAction{Write: true, Tampered: true, Holds: r2}, reason: "never read from the root Secret",
		},
		"the legacy strategy copies the root at once, as an Issuer reading the root Secret would sign": {
			found:    holding(f.r1),
			decision: legacy.Plan(legacyCopy(t, f.r1), validRoot(t, f.r2, testNow), bundle.Clients{}, testNow), root: f.r2,
			want: bundle.IssuingAction{Write: true, Holds: r2}, reason: "legacy strategy",
		},
		"the legacy strategy writes over a foreign CA too, told as tampering": {
			found:    holding(f.foreign),
			decision: legacy.Plan(legacyCopy(t, f.r1), validRoot(t, f.r2, testNow), bundle.Clients{}, testNow), root: f.r2,
			want: bundle.IssuingAction{Write: true, Tampered: true, Holds: r2}, reason: "never read from the root Secret",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			now := tc.now
			if now.IsZero() {
				now = testNow
			}
			got := bundle.Issuing(tc.found, tc.decision, validRoot(t, tc.root, now), now)
			g.Expect(got.Reason).To(ContainSubstring(tc.reason))
			expectNoKeyMaterial(g, got.Reason)
			got.Reason = ""
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestIssuingNeverWritesAheadOfTheGatewayOverARotation plays a whole
// rotation, a second one arriving during the first, minute by minute: at
// every step, whatever the issuing Secret holds after the rule is a root
// the gateway's bundle holds and, when it is the new root, one the bundle
// has held for the propagation delay.
func TestIssuingNeverWritesAheadOfTheGatewayOverARotation(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	gw := bundle.Gateway{}
	found := bundle.IssuingFound{}
	// bundledSince is when each root first reached the bundle written.
	bundledSince := map[string]time.Time{}
	step := 15 * time.Second
	rootAt := func(now time.Time) *certs.CA {
		switch {
		case now.Before(testNow.Add(2 * time.Minute)):
			return f.r1
		case now.Before(testNow.Add(150 * time.Second)):
			return f.r2
		default:
			return f.r3 // during r2's propagation delay
		}
	}
	moves := 0
	for now := testNow; now.Before(testNow.Add(10 * time.Minute)); now = now.Add(step) {
		root := validRoot(t, rootAt(now), now)
		d := bundle.Plan(gw, root, tracked(), testTimings, now)
		gw = written(d)
		for _, r := range d.Roots {
			if _, ok := bundledSince[bundle.Fingerprint(r)]; !ok {
				bundledSince[bundle.Fingerprint(r)] = now
			}
		}
		a := bundle.Issuing(found, d, root, now)
		if a.Write {
			moves++
			found = bundle.IssuingFound{Exists: true, Root: root}
		}
		if found.Root == nil {
			continue
		}
		held := found.Root.Fingerprint
		since, inBundle := bundledSince[held]
		g.Expect(inBundle).To(BeTrue(), "at %s the issuing root is in the bundle", now.Sub(testNow))
		g.Expect(bundle.Contains(d.Roots, found.Root.Cert)).To(BeTrue(), "at %s the issuing root is in the bundle written", now.Sub(testNow))
		if held != bundle.Fingerprint(f.r1.Cert) {
			g.Expect(now.Sub(since)).To(BeNumerically(">=", testTimings.TrustPropagationDelay),
				"at %s the issuing root has been trusted for the propagation delay", now.Sub(testNow))
		}
	}
	g.Expect(found.Root.Fingerprint).To(Equal(bundle.Fingerprint(f.r3.Cert)), "it ends on the newest root")
	g.Expect(moves).To(Equal(2), "created on r1, then moved once, straight to r3: r2 never signed anything")
}
