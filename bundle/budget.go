package bundle

import (
	"crypto/x509"
	"slices"
)

// Rule: budget.
//
// What dualca writes must be what it, and the API server, accept back:
// ca.crt within MaxPEMBytes, the parse limit dualca applies to every PEM
// field it reads (its record, the split form's -cacert, a bundle target);
// tls.crt, tls.key and ca.crt together within MaxDataBytes, half the API
// server's 1 MiB for a Secret's data, because the record holds them beside
// roots.pem (the bundle's roots and up to MaxKnown more, itself read within
// MaxPEMBytes) and a target may hold keys of others. Roots pile up when
// rotations come faster than clients move, and without client tracking
// until they expire, so a plan can exceed it.
//
// A plan over the budget is trimmed: roots that no selected client uses
// leave the bundle before their retirement, oldest first, with a
// RootTrimmed Warning, until it fits. Expired roots have left already
// (retire.go). Never trimmed: the current root, the server's root, a root
// a selected client's unexpired leaf chains to, and, while a client is
// unknown (it may use any root) or clients are not tracked (nobody is
// known not to use one), any root at all.
//
// A plan that still does not fit, and is larger than the gateway found
// (writing one no larger makes nothing worse, and lets retirements and
// switches go on), is refused as a whole: the decision is
// the gateway as found, byte for byte, state included (nothing is
// half-written: no target, no record), with a BundleTooLarge Warning and
// no renewal; its new root is not trusted, so clients cert-manager issues
// from it are refused by the gateway until the plan fits (an issuing
// Secret, issuing.go, does not move to it meanwhile). Every reconcile
// plans again, so the refusal ends by itself once clients leave old
// roots or those expire; the moments at which that can happen by time
// alone are the refusal's Upcoming. A new gateway, holding the current
// root alone, is never refused: no smaller bundle exists, and the root
// Secret's own validation bounds that root.

// MaxDataBytes bounds what a decision writes into one object: tls.crt,
// tls.key and ca.crt together.
const MaxDataBytes = 512 << 10

// Budget bounds what a decision writes, in bytes; zero fields are the
// defaults (MaxPEMBytes for ca.crt, MaxDataBytes for the data).
type Budget struct {
	Bundle, Data int
}

func (b Budget) withDefaults() Budget {
	if b.Bundle <= 0 {
		b.Bundle = MaxPEMBytes
	}
	if b.Data <= 0 {
		b.Data = MaxDataBytes
	}
	return b
}

// over says why a bundle of bundleBytes beside a credential of credBytes
// exceeds b; "" when it fits.
func (b Budget) over(bundleBytes, credBytes int) string {
	switch {
	case bundleBytes > b.Bundle:
		return "ca.crt would be " + itoa(bundleBytes) + " bytes, over its budget of " + itoa(b.Bundle)
	case bundleBytes+credBytes > b.Data:
		return "tls.crt, tls.key and ca.crt would be " + itoa(bundleBytes+credBytes) + " bytes, over their budget of " + itoa(b.Data)
	}
	return ""
}

// fit trims kept (newest first) until it fits the budget beside cred, and
// reports why it cannot when it still does not ("" when it fits). cred's
// cross-chain follows the roots trimmed.
func (p *planning) fit(kept []*x509.Certificate, cred *server) ([]*x509.Certificate, string) {
	b := p.t.Budget.withDefaults()
	credBytes := EncodedLen(cred.chain()) + len(cred.keyPEM)
	size := EncodedLen(kept)
	why := b.over(size, credBytes)
	if why == "" || !p.gw.Exists {
		return kept, ""
	}
	sigs := p.clients.Signatures
	var trimmed []*x509.Certificate
	for i := len(kept) - 1; i >= 0 && why != ""; i-- {
		if !p.trimmable(kept[i], cred.root) {
			continue
		}
		size -= EncodedLen(kept[i : i+1])
		trimmed = append(trimmed, kept[i])
		why = b.over(size, credBytes)
	}
	if why != "" && p.grows(size, credBytes) {
		return kept, why + ", keeping every root the current root, the server or a client may need (" + plural(len(kept)-len(trimmed), "root") + ")"
	}
	kept = slices.DeleteFunc(slices.Clone(kept), func(c *x509.Certificate) bool {
		return slices.ContainsFunc(trimmed, func(t *x509.Certificate) bool { return sigs.fingerprint(t) == sigs.fingerprint(c) })
	})
	for _, r := range trimmed {
		p.emit(Event{Warning: true, Reason: ReasonRootTrimmed, Message: "root " + describe(r) +
			" left the bundle before its retirement, no selected client using it, to keep the gateway within its budget: " + b.over(size+EncodedLen(trimmed), credBytes)})
	}
	cred.crosses = p.crossChain(cred.root, cred.crosses, kept)
	return kept, ""
}

// grows reports whether a bundle of bundleBytes beside a credential of
// credBytes is over the budget where the gateway found was not, or is
// larger there than it.
func (p *planning) grows(bundleBytes, credBytes int) bool {
	b, found := p.t.Budget.withDefaults(), len(p.gw.CAPEM)
	foundData := found + len(p.gw.CertPEM) + len(p.gw.KeyPEM)
	return bundleBytes > b.Bundle && bundleBytes > found || bundleBytes+credBytes > b.Data && bundleBytes+credBytes > foundData
}

// trimmable reports whether root may leave the bundle to keep it within
// the budget: clients are tracked, none uses it (an unknown one uses every
// root), and it is neither the current root nor the server's.
func (p *planning) trimmable(root, server *x509.Certificate) bool {
	sigs := p.clients.Signatures
	fp := sigs.fingerprint(root)
	return p.clients.Tracked && fp != p.root.Fingerprint && fp != sigs.fingerprint(server) && !usedByAny(p.clients, root, p.now)
}

// refuse is the decision that keeps the gateway as found, because the
// plan does not fit: why says so. Its moments are those of the plan at
// which time alone can make it fit: a root or a client's leaf expiring,
// the retirement after a switch.
func (p *planning) refuse(why string, planned []Moment) Decision {
	var upcoming []Moment
	for _, m := range planned {
		if m.Step == StepRootExpiry || m.Step == StepLeafExpiry || m.Step == StepRetire {
			upcoming = append(upcoming, m)
		}
	}
	return Decision{CertPEM: p.gw.CertPEM, KeyPEM: p.gw.KeyPEM, CAPEM: p.gw.CAPEM, State: p.gw.State, Known: p.gw.Known,
		Roots: p.gw.Parsed.casIn(p.gw.CAPEM), Refused: why, Upcoming: upcoming, NextCheck: nextCheck(upcoming),
		Events: []Event{{Warning: true, Reason: ReasonBundleTooLarge, Message: "the gateway is left as it is, root " + describe(p.root.Cert) +
			" not trusted: " + why + "; it fits once clients leave older roots (renewed) or those expire"}}}
}
