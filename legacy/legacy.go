// Package legacy reproduces dualca's predecessor: the gateway Secret is a
// plain copy of the root CA Secret, replaced whole whenever cert-manager
// rotates the root. Every client signed by the old root is cut off at that
// moment; that downtime is the behaviour being reproduced.
//
// It exists only as the revert path of --cert-management-legacy, so that a
// problem with the zero-downtime strategy can be undone by flipping one flag.
// When no installation needs that revert any more, this package and the flag
// can be deleted; nothing else depends on its internals.
package legacy

import (
	"time"

	"github.com/dualca/dualca/bundle"
)

// Plan returns the gateway Secret of the legacy strategy: tls.crt, tls.key
// and ca.crt exactly as the root Secret has them. Only the strategy and the
// root fingerprint are recorded, so that switching back to zero-downtime
// adopts this Secret as a fresh start.
func Plan(gw bundle.Gateway, root *bundle.Root, _ time.Time) bundle.Decision {
	d := bundle.Decision{
		CertPEM: root.CertPEM,
		KeyPEM:  root.KeyPEM,
		CAPEM:   root.CAPEM,
		State: bundle.State{
			Strategy: bundle.StrategyLegacy,
			Root:     root.Fingerprint,
			Server:   root.Fingerprint,
		},
	}
	if !gw.Exists {
		return d
	}
	if gw.State.Root != root.Fingerprint {
		d.Events = append(d.Events, bundle.Event{Reason: bundle.ReasonRootRotated,
			Message: "legacy strategy: gateway now copies root " + bundle.Short(root.Fingerprint) + "; clients of the old root lose trust"})
	}
	if string(gw.CAPEM) != string(root.CAPEM) || string(gw.CertPEM) != string(root.CertPEM) || string(gw.KeyPEM) != string(root.KeyPEM) {
		d.Events = append(d.Events, bundle.Event{Reason: bundle.ReasonBundleUpdated,
			Message: "legacy strategy: gateway Secret replaced by a copy of the root"})
	}
	return d
}
