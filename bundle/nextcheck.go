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
	moments := []time.Time{
		st.RootAddedAt.Add(t.TrustPropagationDelay),
		server.NotAfter.Add(-(t.TrustPropagationDelay + ClockSkew) + time.Second),
	}
	if st.Server != st.Root {
		moments = append(moments, st.RootAddedAt.Add(t.ServerSwitchGrace))
	}
	if !st.ClientsReadyAt.IsZero() {
		moments = append(moments, st.ClientsReadyAt.Add(t.TrustPropagationDelay))
	}
	if clients.Tracked {
		moments = append(moments, st.SwitchedAt.Add(t.TrustPropagationDelay))
		for _, c := range clients.Items {
			if c.Leaf != nil {
				moments = append(moments, c.Leaf.NotAfter.Add(time.Second))
			}
		}
	}
	for _, c := range kept {
		moments = append(moments, c.NotBefore, c.NotAfter.Add(time.Second))
	}
	var next time.Time
	for _, m := range moments {
		if m.After(now) && (next.IsZero() || m.Before(next)) {
			next = m
		}
	}
	return next
}
