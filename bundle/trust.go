package bundle

import "crypto/x509"

// The trust set: which roots of the gateway's ca.crt may stay, and how a
// change of it is reported. Retirement (retire.go) then decides which of
// them, with the current root and the server's, are written.

// trustedRoots returns the CA certificates of the gateway's ca.crt that may
// stay. A Secret dualca wrote and nobody edited is taken as is. An edited
// one is repaired (repairedRoots): only the roots dualca recorded stay, with
// a Warning. An adopted one (new, legacy, or stripped of dualca's
// annotations) seeds the bundle (adoptedRoots). Whichever it is, a root
// dualca never read from the root Secret does not stay (provenance.go): a
// matching hash or a recorded fingerprint only says what dualca wrote, and
// whoever wrote the Secret could have written those too.
func (p *planning) trustedRoots() []*x509.Certificate {
	switch {
	case p.adopting:
		return p.adoptedRoots()
	case p.gw.Parsed.hash(p.gw.CAPEM) == p.gw.State.BundleHash:
		return p.readFromRoot(p.gw.Parsed.casIn(p.gw.CAPEM), "ca.crt")
	}
	p.edited = true
	p.emit(Event{Warning: true, Reason: ReasonGatewayRepaired,
		Message: "ca.crt was changed outside dualca; restoring the roots dualca recorded"})
	return p.readFromRoot(repairedRoots(p.gw, p.clients), "ca.crt")
}

// reportBundle reports a gateway Secret created, or a trust bundle that
// changed. A repaired one was reported already (trustedRoots).
func (p *planning) reportBundle(caPEM []byte, kept []*x509.Certificate) {
	switch {
	case !p.gw.Exists:
		p.emit(created(p.root, kept))
	case string(caPEM) != string(p.gw.CAPEM) && !p.edited:
		p.emit(Event{Reason: ReasonBundleUpdated,
			Message: "trust bundle now holds " + plural(len(kept), "root") + ": " + describeAll(kept)})
	}
}

// casIn reads every CA certificate from PEM, skipping what is not one. The
// gateway Secret is dualca's own, so a damaged one is repaired, not rejected.
func casIn(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certsIn(data) {
		if isCA(c) {
			out = append(out, c)
		}
	}
	return out
}
