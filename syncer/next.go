package syncer

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dualca/dualca/bundle"
)

// What `dualca status` says comes next. It is never worked out apart: it
// is the Upcoming moments of the very decision dualca acted on, which
// dualca publishes with the rest of its status (statusmap.go). Status,
// which reads the Secrets instead, runs bundle.Plan on them with the
// timings dualca recorded (AnnotationTimings), so it needs what Plan
// needs: the root Secret and, when dualca tracks clients, the clients.

// Next is what comes next in a rotation, and when.
type Next struct {
	// Summary is one line for people, e.g. "renewing: 19 clients pending;
	// server switch when they are on R2 for 2m0s, or at T (grace)".
	Summary string `json:"summary,omitempty"`
	// DueNow are the events the decision would raise now: dualca has not
	// acted on them yet (it will at its next reconcile).
	DueNow []string `json:"dueNow,omitempty"`
	// Upcoming are the moments Plan's decision changes by time alone,
	// earliest first; the first is when dualca reconciles next at the latest.
	Upcoming []Upcoming `json:"upcoming,omitempty"`
	// Unknown says why what comes next cannot be told; "" when it can.
	Unknown string `json:"unknown,omitempty"`
}

// Upcoming is one moment of the decision, with what happens then.
type Upcoming struct {
	At   time.Time   `json:"at"`
	Step bundle.Step `json:"step"`
	// Root is the 12-character prefix of the root the step is about.
	Root string `json:"root,omitempty"`
	What string `json:"what"`
}

// next decides, as dualca would now, what comes next for the gateway gw.
// root is nil when it was not read or is not usable; clients nil when they
// were not read.
func next(gw bundle.Gateway, root *bundle.Root, clients *bundle.Clients, now time.Time) *Next {
	st := gw.State
	switch {
	case st.Strategy == bundle.StrategyLegacy:
		return &Next{Summary: "legacy strategy: the gateway copies the root Secret as soon as it changes; nothing is scheduled"}
	case st.Strategy == "":
		return &Next{Unknown: "dualca has not written the gateway secret yet"}
	case st.Timings == (bundle.Timings{}):
		return &Next{Unknown: "the gateway secret records no timings (written by an older dualca): what comes next is known once dualca writes it again"}
	case root == nil:
		return &Next{Unknown: "needs a usable root: give --root-secret as dualca runs with"}
	case st.Clients != nil && clients == nil:
		return &Next{Unknown: "dualca tracks clients: give its client selection (--client-selector, --client-secret-selector, --client-issuer, --client-namespaces) as dualca runs with"}
	}
	cs := bundle.Clients{}
	if clients != nil && st.Clients != nil {
		cs = *clients
	}
	d := bundle.Plan(gw, root, cs, st.Timings, now)
	n := nextOf(d, root.Fingerprint)
	for _, e := range d.Events {
		n.DueNow = append(n.DueNow, e.Reason+": "+e.Message)
	}
	return n
}

// nextOf is what comes next after the decision d, made with the usable
// root of fingerprint rootFP: its Upcoming moments and the summary line. Not its events: dualca
// publishes a decision once it has acted on it, so only a report made
// without dualca (Status) shows them as due now.
func nextOf(d bundle.Decision, rootFP string) *Next {
	if d.State.Strategy == bundle.StrategyLegacy {
		return &Next{Summary: "legacy strategy: the gateway copies the root Secret as soon as it changes; nothing is scheduled"}
	}
	n := &Next{}
	for _, m := range d.Upcoming {
		n.Upcoming = append(n.Upcoming, Upcoming{At: m.At, Step: m.Step, Root: bundle.Short(m.Root), What: describeStep(m, d.State)})
	}
	n.Summary = summary(d, rootFP)
	return n
}

// describeStep says what happens at m, for people.
func describeStep(m bundle.Moment, st bundle.State) string {
	paused, _ := bundle.PauseRequested(st.Paused)
	switch m.Step {
	case bundle.StepRenewalsStart:
		if paused {
			return "propagation delay over: phase Renewing, renewals held (paused)"
		}
		return "propagation delay over: client renewals start"
	case bundle.StepSwitchClientsReady:
		return "server switch: every client on the root for the propagation delay"
	case bundle.StepSwitchGrace:
		return "server switch, forced if clients are pending: grace period " + st.Timings.ServerSwitchGrace.String() + " over"
	case bundle.StepSwitchPromoted:
		return "server switch promoted by the operator, once the gateway trusts the root"
	case bundle.StepSwitchServerExpiry:
		return "server switch forced, paused or not: the server root or its leaf enters its expiry margin"
	case bundle.StepServerReissue:
		return "server certificate issued again from the same root: a third of its lifetime remains"
	case bundle.StepRetire:
		return "roots no selected client uses leave the bundle"
	case bundle.StepRootValid:
		return "root becomes valid"
	case bundle.StepRootExpiry:
		return "root expires and leaves the bundle"
	case bundle.StepLeafExpiry:
		return "first client leaf expires: a root kept for it may leave"
	}
	return string(m.Step)
}

// summary is the one line of Next: the phase, what holds it, and when the
// next step is due. rootFP is the current root's fingerprint.
func summary(d bundle.Decision, rootFP string) string {
	st := d.State
	at := func(step bundle.Step) string {
		if i := slices.IndexFunc(d.Upcoming, func(m bundle.Moment) bool { return m.Step == step }); i >= 0 {
			return d.Upcoming[i].At.UTC().Format(time.RFC3339)
		}
		return ""
	}
	rootName := bundle.Short(rootFP)
	var parts []string
	if paused, _ := bundle.PauseRequested(st.Paused); paused {
		parts = append(parts, "paused: no client is renewed and the server does not switch until dualca resume")
		if t := at(bundle.StepSwitchPromoted); t != "" {
			parts = append(parts, "promoted: server switch at "+t)
		}
		if t := at(bundle.StepSwitchServerExpiry); t != "" && st.Server != st.Root {
			parts = append(parts, "server switch forced at "+t+" (server root expiry margin)")
		}
		return strings.Join(parts, "; ")
	}
	switch st.Phase {
	case bundle.PhaseBundle:
		parts = append(parts, "bundle: the gateway loads root "+rootName+"; client renewals start at "+at(bundle.StepRenewalsStart))
	case bundle.PhaseRenewing:
		parts = append(parts, renewingSummary(st, rootName, at))
	case bundle.PhaseRetiring:
		line := "retiring: the server presents root " + rootName
		if t := at(bundle.StepRetire); t != "" {
			line += "; roots no client uses leave at " + t
		}
		parts = append(parts, line)
	case bundle.PhaseSteady:
		parts = append(parts, "steady: root "+rootName+" alone; nothing due")
	}
	if len(d.Upcoming) > 0 {
		parts = append(parts, "next check "+d.Upcoming[0].At.UTC().Format(time.RFC3339)+" ("+string(d.Upcoming[0].Step)+")")
	}
	return strings.Join(parts, "; ")
}

// renewingSummary is the summary of phase Renewing: who is pending, and
// the switches to come, earliest first.
func renewingSummary(st bundle.State, rootName string, at func(bundle.Step) string) string {
	line := "renewing: clients not tracked"
	if p := st.Clients; p != nil {
		line = fmt.Sprintf("renewing: %d clients pending", p.Pending)
		if p.Failed > 0 {
			line += fmt.Sprintf(", %d failed", p.Failed)
		}
		if t := at(bundle.StepSwitchClientsReady); t != "" {
			line += "; every client is on " + rootName + ": server switch at " + t
		} else {
			line += "; server switch when they are on " + rootName + " for " + st.Timings.TrustPropagationDelay.String()
		}
	}
	if t := at(bundle.StepSwitchPromoted); t != "" {
		line += ", or at " + t + " (promoted)"
	}
	if t := at(bundle.StepSwitchGrace); t != "" {
		line += ", or at " + t + " (grace)"
	}
	if t := at(bundle.StepSwitchServerExpiry); t != "" && t < at(bundle.StepSwitchGrace) {
		line += ", or at " + t + " (server root expiry)"
	}
	return line
}

// addControls reports the operator's controls as dualca obeys them.
func (r *Report) addControls(st bundle.State) {
	paused, valid := bundle.PauseRequested(st.Paused)
	r.Paused = paused
	if !st.PausedAt.IsZero() {
		at := st.PausedAt
		r.PausedAt = &at
	}
	r.Promote = bundle.Short(st.Promote)
	if !valid {
		r.Attention = append(r.Attention, fmt.Sprintf("annotation %s=%q is neither %q nor %q: dualca reads it as paused",
			bundle.AnnotationPaused, st.Paused, bundle.PausedTrue, bundle.PausedFalse))
	}
	if st.Held() {
		r.Attention = append(r.Attention, "rotation paused by an operator: dualca resume lets it go on")
	}
}
