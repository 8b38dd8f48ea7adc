package bundle

import (
	"crypto/x509"
	"slices"
	"time"
)

// Step names what happens at a Moment, stable for scripts reading
// `dualca status -o json`.
type Step string

// The moments at which time alone changes what Plan decides.
const (
	// StepRenewalsStart: the propagation delay after the root entered the
	// bundle ends; clients are renewed from then (held while paused).
	StepRenewalsStart Step = "renewals-start"
	// StepSwitchClientsReady: every client has been on the root for the
	// propagation delay; the server switches.
	StepSwitchClientsReady Step = "switch-clients-ready"
	// StepSwitchGrace: the grace period ends; the server switches, forced
	// if clients are pending.
	StepSwitchGrace Step = "switch-grace"
	// StepSwitchPromoted: the operator's promote takes effect.
	StepSwitchPromoted Step = "switch-promoted"
	// StepSwitchServerExpiry: the server root enters its expiry margin; the
	// server switches, paused or not.
	StepSwitchServerExpiry Step = "switch-server-expiry"
	// StepServerReissue: the server leaf enters its re-issue margin (a
	// third of its lifetime) and is issued again from the same root.
	StepServerReissue Step = "server-reissue"
	// StepRetire: the propagation delay after the switch ends; roots no
	// client uses leave the bundle.
	StepRetire Step = "retire"
	// StepRootValid: a root of the bundle becomes valid (an issuer whose
	// clock runs ahead).
	StepRootValid Step = "root-valid"
	// StepRootExpiry: a root of the bundle expires and leaves it.
	StepRootExpiry Step = "root-expiry"
	// StepLeafExpiry: the first client leaf expires; a root kept for it
	// may leave the bundle.
	StepLeafExpiry Step = "leaf-expiry"
)

// Moment is a time at which Plan's decision can change by time alone, and
// what happens then.
type Moment struct {
	At   time.Time `json:"at"`
	Step Step      `json:"step"`
	// Root is the fingerprint of the root the step is about, if one.
	Root string `json:"root,omitempty"`
}

// upcoming lists the moments after now at which time alone changes what
// Plan decides, earliest first: the end of the propagation delay or of the
// grace period, the server root entering its expiry margin, a root in the
// bundle becoming valid or expiring, the first client leaf expiring. While
// paused, the readiness and grace switches are not among them: they wait
// for a resume. Certificates are valid through NotAfter (whole seconds),
// hence the second added to the expiry moments. Its first moment is
// Decision.NextCheck.
func upcoming(st State, server *x509.Certificate, cred *serverCredential, kept []*x509.Certificate, clients Clients, t Timings, now time.Time, paused bool) []Moment {
	serverFP, rootFP := clients.Memory.fingerprint(server), st.Root
	moments := []Moment{{st.RootAddedAt.Add(t.TrustPropagationDelay), StepRenewalsStart, rootFP}}
	if st.Server != st.Root {
		// A server on the current root has nowhere to switch to.
		until := server.NotAfter
		if leaf := cred.leafUntil(); !leaf.IsZero() {
			until = earlier(until, leaf)
		}
		moments = append(moments, Moment{until.Add(-(t.TrustPropagationDelay + ClockSkew) + time.Second), StepSwitchServerExpiry, serverFP})
	} else if at := cred.reissueAt(server, t.Server); !at.IsZero() {
		moments = append(moments, Moment{at, StepServerReissue, serverFP})
	}
	if st.Server != st.Root && st.Promote == st.Root {
		moments = append(moments, Moment{st.RootAddedAt.Add(t.TrustPropagationDelay), StepSwitchPromoted, rootFP})
	}
	if st.Server != st.Root && !paused {
		moments = append(moments, Moment{st.RootAddedAt.Add(t.ServerSwitchGrace), StepSwitchGrace, rootFP})
	}
	if !st.ClientsReadyAt.IsZero() && !paused {
		moments = append(moments, Moment{st.ClientsReadyAt.Add(t.TrustPropagationDelay), StepSwitchClientsReady, rootFP})
	}
	if clients.Tracked {
		moments = append(moments, Moment{st.SwitchedAt.Add(t.TrustPropagationDelay), StepRetire, serverFP})
		var first time.Time
		for _, c := range clients.Items {
			if c.Leaf != nil {
				if at := c.Leaf.NotAfter().Add(time.Second); at.After(now) && (first.IsZero() || at.Before(first)) {
					first = at
				}
			}
		}
		moments = append(moments, Moment{first, StepLeafExpiry, ""})
	}
	for _, c := range kept {
		fp := clients.Memory.fingerprint(c)
		moments = append(moments, Moment{c.NotBefore, StepRootValid, fp}, Moment{c.NotAfter.Add(time.Second), StepRootExpiry, fp})
	}
	moments = slices.DeleteFunc(moments, func(m Moment) bool { return !m.At.After(now) })
	// Stable: equal moments keep the order above, the more telling first.
	slices.SortStableFunc(moments, func(a, b Moment) int { return a.At.Compare(b.At) })
	return moments
}

// nextCheck is the first of moments; zero if none.
func nextCheck(moments []Moment) time.Time {
	if len(moments) == 0 {
		return time.Time{}
	}
	return moments[0].At
}
