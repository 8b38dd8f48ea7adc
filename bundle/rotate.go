package bundle

import (
	"crypto/x509"
	"time"
)

// Rule: rotate.
//
// A current root whose fingerprint is not the recorded one starts a
// rotation: it enters the bundle next to every root still in use, its
// RootAddedAt is now by dualca's own clock (never a Certificate's status),
// and the wait for the clients starts again. A rotation that arrives during
// another simply restarts the clock: no root leaves the bundle for it.
//
// The clock: moments are recorded in whole seconds, rounded up, so that a
// recorded wait is never shorter than the one configured; a recorded moment
// found after now (a clock that went back) is brought back to now, so that
// it never stretches a wait into the far future; and one never recorded
// starts counting now.
//
// A late write: the record is written before the objects the gateway
// reads, so a write of those that fails (an outage, a policy, a Secret
// deleted) leaves the record ahead. Counted from the record, the delay
// would be spent before the gateway was even told, and clients would move
// to a root it has never loaded. So while the gateway lags behind the
// record on the current root, RootAddedAt is now: the delay counts from
// the write that reaches it.
//
// A lost record write, the other way round: the objects the gateway reads
// got the root (a write that was late as above, restamped), and the record
// beside them did not, so it still dates the root from before they had
// it. Their own write says when they got it (Gateway.ServedSince), and the
// later of the two is what the delay counts from.

// startRotation returns the state carried over from the gateway Secret
// (the operator's annotations as found among it), with the rotation the
// current root starts if it is a new one.
func (p *planning) startRotation(trusted []*x509.Certificate) State {
	prev := p.gw.State
	st := State{
		Strategy:       StrategyZeroDowntime,
		Root:           prev.Root,
		RootAddedAt:    prev.RootAddedAt,
		SwitchedAt:     prev.SwitchedAt,
		ClientsReadyAt: prev.ClientsReadyAt,
		Paused:         prev.Paused,
		Promote:        prev.Promote,
	}
	if prev.Root != p.root.Fingerprint {
		st.Root, st.RootAddedAt, st.ClientsReadyAt = p.root.Fingerprint, p.stamp, time.Time{}
		// An adopted Secret that already trusts the root is no rotation.
		if p.gw.Exists && (prev.Root != "" || !Contains(trusted, p.root.Cert)) {
			p.emit(Event{Reason: ReasonRootRotated,
				Message: "new root " + describe(p.root.Cert) + " is trusted next to the roots in use"})
		}
	}
	if st.RootAddedAt.IsZero() || st.RootAddedAt.After(p.stamp) || p.gw.Lagging {
		st.RootAddedAt = p.stamp
	}
	if since := p.gw.ServedSince; prev.Root == p.root.Fingerprint && since.After(st.RootAddedAt) {
		st.RootAddedAt = since
		if since.After(p.stamp) {
			st.RootAddedAt = p.stamp
		}
	}
	for _, at := range []*time.Time{&st.SwitchedAt, &st.ClientsReadyAt} {
		if at.After(p.stamp) {
			*at = p.stamp
		}
	}
	return st
}

// stamp is now as recorded: whole seconds, rounded up.
func stamp(now time.Time) time.Time {
	s := now.Truncate(time.Second)
	if s.Before(now) {
		s = s.Add(time.Second)
	}
	return s
}
