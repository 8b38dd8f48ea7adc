package bundle

import (
	"crypto/x509"
	"time"
)

// nextCheck is the first moment after now at which time alone changes what
// Plan decides: the end of the propagation delay or of the grace period,
// the server root entering its expiry margin, a root in the bundle or a
// client's leaf expiring. Certificates are valid through NotAfter (whole
// seconds), hence the second added to the expiry moments.
func nextCheck(st State, server *x509.Certificate, kept []*x509.Certificate, clients Clients, t Timings, now time.Time) time.Time {
	var next time.Time
	// Each moment is weighed as it comes: one per client leaf, so a list
	// of them would be the decision's largest allocation.
	consider := func(m time.Time) {
		if m.After(now) && (next.IsZero() || m.Before(next)) {
			next = m
		}
	}
	consider(st.RootAddedAt.Add(t.TrustPropagationDelay))
	consider(server.NotAfter.Add(-(t.TrustPropagationDelay + ClockSkew) + time.Second))
	if st.Server != st.Root {
		consider(st.RootAddedAt.Add(t.ServerSwitchGrace))
	}
	if !st.ClientsReadyAt.IsZero() {
		consider(st.ClientsReadyAt.Add(t.TrustPropagationDelay))
	}
	if clients.Tracked {
		consider(st.SwitchedAt.Add(t.TrustPropagationDelay))
		for _, c := range clients.Items {
			if c.Leaf != nil {
				consider(c.Leaf.NotAfter.Add(time.Second))
			}
		}
	}
	for _, c := range kept {
		consider(c.NotBefore)
		consider(c.NotAfter.Add(time.Second))
	}
	return next
}
