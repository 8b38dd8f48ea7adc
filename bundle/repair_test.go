package bundle_test

import (
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestPlanRepairsHandEdits checks the rule repair (repair.go): what is
// edited by hand in the gateway Secret is undone, with a Warning.
func TestPlanRepairsHandEdits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := time.Hour
	inBundle := gatewaySecret{server: f.r1, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-10 * time.Second), switchedAt: testNow.Add(-2 * h)}
	edit := func(s gatewaySecret, ca, cert, key []byte) bundle.Gateway {
		s.caPEM, s.certPEM, s.keyPEM = ca, cert, key
		return s.gateway()
	}
	afterSwitch := gatewaySecret{server: f.r2, roots: list(f.r2, f.r1), root: f.r2, addedAt: testNow.Add(-h), switchedAt: testNow.Add(-50 * time.Minute)}
	steady := gatewaySecret{server: f.r1, roots: list(f.r1), root: f.r1, addedAt: testNow.Add(-2 * h), switchedAt: testNow.Add(-2 * h)}
	onR1 := newClient(t, "ns/a", f.r1, f.r1)
	restored := []wantEvent{{reason: bundle.ReasonGatewayRepaired, warning: true, contains: "changed outside dualca"}}
	serverReplaced := []wantEvent{{reason: bundle.ReasonServerSwitchForced, warning: true, contains: "changed outside dualca"}}

	runPlan(t, map[string]planCase{
		"garbage in ca.crt is replaced by the recorded roots, with a Warning": {
			gw:              edit(inBundle, []byte("garbage"), nil, nil),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"an emptied ca.crt is restored too": {
			gw:              edit(inBundle, []byte{}, nil, nil),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"a blank line added to ca.crt is undone byte for byte": {
			gw:              edit(inBundle, append(certs.Bundle(f.r2, f.r1), '\n'), nil, nil),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		"a foreign CA added to ca.crt is removed, with a Warning": {
			gw:              edit(inBundle, certs.Bundle(f.r2, f.r1, f.foreign), nil, nil),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseBundle,
			wantEvents:      restored,
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow.Add(-2 * h),
		},
		// Invariant 3: after a forced switch the old root is still needed by
		// the clients left behind; it is among the recorded roots, and the
		// clients' own ca.crt still holds it.
		"garbage in ca.crt after a forced switch restores the old root a client's leaf still chains to": {
			gw:              edit(afterSwitch, []byte("garbage"), nil, nil),
			root:            f.r2,
			clients:         tracked(newClient(t, "ns/a", f.r2, f.r2), newClient(t, "ns/b", f.r1, f.r1)),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      restored,
			wantRenew:       []string{"ns/b"},
			wantProgress:    &bundle.Progress{Renewed: 1, Pending: 1},
			wantRootAddedAt: testNow.Add(-h),
			wantSwitchedAt:  testNow.Add(-50 * time.Minute),
		},
		"tls.crt replaced by another CA switches the server to the current root, with a Warning": {
			gw:              edit(inBundle, nil, f.foreign.CertPEM, f.foreign.KeyPEM),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      append([]wantEvent{{reason: bundle.ReasonUntrustedRoot, warning: true, contains: `tls.crt held 1 CA`}}, serverReplaced...),
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow,
		},
		"a tls.key that does not match tls.crt switches the server to the current root, with a Warning": {
			gw:              edit(inBundle, nil, nil, f.foreign.KeyPEM),
			root:            f.r2,
			clients:         tracked(onR1),
			wantServer:      f.r2,
			wantBundle:      list(f.r2, f.r1),
			wantPhase:       bundle.PhaseRetiring,
			wantEvents:      serverReplaced,
			wantRenew:       []string{"ns/a"},
			wantProgress:    &bundle.Progress{Pending: 1},
			wantRootAddedAt: testNow.Add(-10 * time.Second),
			wantSwitchedAt:  testNow,
		},
		"an emptied tls.crt in steady state is restored from the root, with a Warning": {
			gw:              edit(steady, nil, []byte{}, nil),
			root:            f.r1,
			clients:         tracked(onR1),
			wantServer:      f.r1,
			wantBundle:      list(f.r1),
			wantPhase:       bundle.PhaseSteady,
			wantEvents:      serverReplaced,
			wantProgress:    &bundle.Progress{Renewed: 1},
			wantRootAddedAt: testNow.Add(-2 * h),
			wantSwitchedAt:  testNow,
		},
	})
}
