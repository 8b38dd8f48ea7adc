package bundle

import (
	"crypto/x509"
	"fmt"
	"strings"
	"time"
)

// Rule: operator controls.
//
// An operator steers a rotation with two annotations on the gateway Secret,
// set by `dualca pause`, `dualca resume` and `dualca promote` (or kubectl):
// they are inputs of the decision like the rest of the Secret, so a restart
// obeys them as the process before it did, and the model test covers them.
//
// Paused (AnnotationPaused "true"): new roots are still trusted and old ones
// retired as usual (the bundle never loses what a client needs), but no
// client is renewed and the server does not switch for readiness or for the
// grace period. Safety still wins: a server whose root expires within the
// margin, or whose chain is full, switches anyway, with a Warning saying
// the rotation was paused. Any value other than "true" or "false" is read
// as paused, with a Warning: an operator who wrote something meant to hold
// the rotation, and holding is what can be undone. dualca records when it
// first obeyed the pause (AnnotationPausedAt), so the RotationPaused and
// RotationResumed events are told once, and a resume is seen even after a
// restart.
//
// Promote (AnnotationPromote, the fingerprint of the root to serve): the
// server switches to that root at once, clients pending or not, paused or
// not, with a ServerSwitchForced Warning naming the operator's promote
// (clients not on the root then lose trust in the server, as with a grace
// period over; with every client on it, the promote only cuts short the
// propagation delay dualca gives them to load their renewed Secret); a
// promote made in phase Bundle waits for the propagation delay to end, and
// one for a root not valid yet for its NotBefore. It is one-shot: dualca
// removes the annotation in the very update that switches the server, so
// the promote and its effect are written together or not at all. A promote
// naming a root that is not the current one (R3 came since), or made when
// the server already presents it, is removed with a PromoteIgnored event:
// it never carries over to another rotation.

// The annotations an operator sets. dualca keeps them as found, apart from
// consuming a promote.
const (
	// AnnotationPaused holds a rotation: "true" pauses, absent or "false" does not.
	AnnotationPaused = AnnotationPrefix + "paused"
	// AnnotationPromote asks for the server to switch to the root with this
	// fingerprint now.
	AnnotationPromote = AnnotationPrefix + "promote"
)

// AnnotationPausedAt is when dualca first obeyed a pause, by its own clock;
// absent while not paused.
const AnnotationPausedAt = AnnotationPrefix + "paused-at"

// Values of AnnotationPaused.
const (
	PausedTrue  = "true"
	PausedFalse = "false"
)

// PauseRequested reports whether an AnnotationPaused value holds the
// rotation, and whether the value is one dualca knows.
func PauseRequested(value string) (paused, valid bool) {
	switch value {
	case "", PausedFalse:
		return false, true
	case PausedTrue:
		return true, true
	}
	return true, false
}

// Held reports whether an operator's pause holds the rotation the Secret
// records: the zero-downtime strategy obeys it; the legacy strategy keeps
// it for later and does not.
func (s State) Held() bool {
	paused, _ := PauseRequested(s.Paused)
	return paused && s.Strategy == StrategyZeroDowntime
}

// control reads the pause annotation: whether it holds the rotation, and
// since when dualca obeys it (zero when it does not), to be recorded so
// that the pause and the resume are each told once.
func (p *planning) control() (pausedAt time.Time, paused bool) {
	value := p.gw.State.Paused
	paused, valid := PauseRequested(value)
	was := p.gw.State.PausedAt
	switch {
	case paused && was.IsZero():
		e := Event{Reason: ReasonRotationPaused,
			Message: "rotation paused by the operator: new roots are trusted, but no client is renewed and the server switches only if its root is about to expire"}
		if !valid {
			e.Warning = true
			e.Message = fmt.Sprintf("annotation %s=%q is neither %q nor %q: read as paused; ", AnnotationPaused, value, PausedTrue, PausedFalse) + e.Message
		}
		p.emit(e)
		return p.stamp, true
	case paused:
		if was.After(p.stamp) {
			return p.stamp, true
		}
		return was, true
	case !was.IsZero():
		p.emit(Event{Reason: ReasonRotationResumed, Message: "rotation resumed by the operator, paused since " + formatTime(was)})
	}
	return time.Time{}, false
}

// promoted reports whether the operator's promote names the current root
// and the server is not on it yet.
func (p *planning) promoted(st State, server *x509.Certificate) bool {
	return st.Promote != "" && st.Promote == p.root.Fingerprint && Fingerprint(server) != p.root.Fingerprint
}

// settlePromote returns the promote to record: none once the server
// presents the current root (it switched in this decision: consumed), or
// when it names another root; otherwise promote as found.
func (p *planning) settlePromote(promote string, serverRoot *x509.Certificate, switched bool) string {
	switch {
	case promote == "":
	case switched && promote == p.root.Fingerprint:
		return "" // consumed by the switch, in the same write
	case promote != p.root.Fingerprint:
		p.emit(Event{Warning: true, Reason: ReasonPromoteIgnored,
			Message: fmt.Sprintf("promote to root %s ignored: the current root is %s; promote again to switch to it", Short(promote), describe(p.root.Cert))})
		return ""
	case Fingerprint(serverRoot) == p.root.Fingerprint:
		p.emit(Event{Reason: ReasonPromoteIgnored, Message: "promote ignored: the server already presents root " + describe(p.root.Cert)})
		return ""
	}
	return promote
}

// promotedSwitch is the switch a promote makes: forced, with a Warning
// naming the promote, since it cuts short a wait dualca would have made
// (clients pending, or the propagation delay after they are all ready).
func (p *planning) promotedSwitch() switchDecision {
	why := "promoted by the operator (dualca promote)"
	if p.clients.Tracked {
		why += " with " + p.notOnRoot()
	}
	if p.paused {
		why += "; renewals stay paused"
	}
	return forced(why)
}

// formatTimings is the AnnotationTimings form of t.
func formatTimings(t Timings) string {
	if t == (Timings{}) {
		return ""
	}
	return fmt.Sprintf("trust-propagation-delay=%s server-switch-grace=%s", t.TrustPropagationDelay, t.ServerSwitchGrace)
}

// parseTimings reads AnnotationTimings; zero when absent or malformed.
func parseTimings(v string) Timings {
	var t Timings
	for _, f := range strings.Fields(v) {
		k, val, ok := strings.Cut(f, "=")
		d, err := time.ParseDuration(val)
		if !ok || err != nil {
			return Timings{}
		}
		switch k {
		case "trust-propagation-delay":
			t.TrustPropagationDelay = d
		case "server-switch-grace":
			t.ServerSwitchGrace = d
		default:
			return Timings{}
		}
	}
	return t
}
