package bundle

import (
	"bytes"
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
// a selected client's unexpired leaf chains to, a root the server's chain
// runs through (a cross-certificate of tls.crt certifies it or is signed
// by it) while a client uses a root of that chain but the current one
// (such clients verify the server along the chain, through the roots
// before theirs, and dualca holds no older root's key to sign a shorter
// path),
// and, while a client is unknown (it may use any root) or clients are not
// tracked (nobody is known not to use one), any root at all.
//
// A plan that still does not fit is refused as a whole: the decision is
// the gateway as found, byte for byte, state included (nothing is
// half-written: no target, no record), with a BundleTooLarge Warning and
// no renewal. Its new root is not trusted, so clients cert-manager issues
// from it are refused by the gateway until the plan fits (an issuing
// Secret, issuing.go, does not move to it meanwhile, unless found
// tampered with or expired: the new root, the only key dualca holds, is
// then written over it, and what it signs is refused as what it replaced
// would have been). Every reconcile
// plans again, so the refusal ends by itself once clients leave old roots
// or those expire; the moments at which time alone can do that are the
// refusal's Upcoming.
//
// Not refused, and written trimmed as far as the rule allows: a plan no
// larger than the gateway found where it is over (nothing grows, and
// retirements and switches go on), and a gateway that is not as dualca
// wrote it (new, adopted, edited, holding a CA or a credential dualca did
// not write), since there is nothing of dualca's to keep there: the plan,
// made of what dualca trusts alone, replaces it. The syncer decides from
// dualca's own record, so the latter is a first or a legacy gateway
// adopted, holding the current root and those clients use, not hundreds.

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
// reports why it cannot when it still does not and the gateway found,
// intact, is to be kept ("" when it fits). cred's cross-chain follows the
// roots trimmed.
func (p *planning) fit(kept []*x509.Certificate, cred *serverCredential, intact bool) ([]*x509.Certificate, string) {
	b := p.t.Budget.withDefaults()
	credBytes := EncodedLen(cred.chain()) + len(cred.keyPEM)
	size := EncodedLen(kept)
	why := b.over(size, credBytes)
	if why == "" {
		return kept, ""
	}
	sigs := p.clients.Memory
	var trimmed []*x509.Certificate
	trimmable := p.trimmable(kept, cred)
	for i := len(kept) - 1; i >= 0 && why != ""; i-- {
		if !trimmable[i] {
			continue
		}
		size -= EncodedLen(kept[i : i+1])
		trimmed = append(trimmed, kept[i])
		why = b.over(size, credBytes)
	}
	if why != "" && intact && p.grows(size, credBytes) {
		return kept, why + ", keeping every root the current root, the server or a client may need (" + plural(len(kept)-len(trimmed), "root") + ")"
	}
	kept = slices.DeleteFunc(slices.Clone(kept), func(c *x509.Certificate) bool {
		return slices.ContainsFunc(trimmed, func(t *x509.Certificate) bool { return sigs.fingerprint(t) == sigs.fingerprint(c) })
	})
	for _, r := range trimmed {
		p.emit(Event{Warning: true, Reason: ReasonRootTrimmed, Message: "root " + describe(r) +
			" left the bundle before its retirement, no selected client using it, to keep the gateway within its budget: " + b.over(size+EncodedLen(trimmed), credBytes)})
	}
	if len(trimmed) > 0 {
		cred.crosses = p.crossChain(cred.root, cred.crosses, kept)
	}
	return kept, ""
}

// intact reports whether the gateway found is as dualca wrote it: its
// state, a ca.crt of roots read from the root Secret alone (trusted holds
// them all), the server credential recorded.
func (p *planning) intact(trusted []*x509.Certificate, found *serverCredential) bool {
	return p.gw.Exists && !p.adopting && !p.edited && found != nil &&
		len(trusted) == len(p.gw.Parsed.casIn(p.gw.CAPEM))
}

// grows reports whether a bundle of bundleBytes beside a credential of
// credBytes is over the budget where the gateway found was not, or is
// larger there than it.
func (p *planning) grows(bundleBytes, credBytes int) bool {
	b, found := p.t.Budget.withDefaults(), len(p.gw.CAPEM)
	foundData := found + len(p.gw.CertPEM) + len(p.gw.KeyPEM)
	return bundleBytes > b.Bundle && bundleBytes > found || bundleBytes+credBytes > b.Data && bundleBytes+credBytes > foundData
}

// trimmable reports which roots of kept may leave the bundle to keep it
// within the budget: clients are tracked, none uses it (an unknown one
// uses every root), it is neither the current root nor the server's, and
// if the server's chain runs through it, no client uses a root of the
// chain but the current one.
func (p *planning) trimmable(kept []*x509.Certificate, cred *serverCredential) []bool {
	sigs := p.clients.Memory
	used, onChain := make([]bool, len(kept)), make([]bool, len(kept))
	chainInUse := false
	for i, r := range kept {
		used[i], onChain[i] = usedByAny(p.clients, r, p.now), cred.runsThrough(r, sigs)
		chainInUse = chainInUse || onChain[i] && used[i] && sigs.fingerprint(r) != p.root.Fingerprint
	}
	out := make([]bool, len(kept))
	for i, r := range kept {
		fp := sigs.fingerprint(r)
		out[i] = p.clients.Tracked && fp != p.root.Fingerprint && fp != sigs.fingerprint(cred.root) && !used[i] && (!onChain[i] || !chainInUse)
	}
	return out
}

// runsThrough reports whether the server chain runs through root: one of
// its cross-certificates certifies root's key or was signed by root.
func (s *serverCredential) runsThrough(root *x509.Certificate, sigs *Memory) bool {
	return slices.ContainsFunc(s.crosses, func(c *x509.Certificate) bool {
		return bytes.Equal(c.RawSubjectPublicKeyInfo, root.RawSubjectPublicKeyInfo) || sigs.ChainsTo(c, root)
	})
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
	// The current root is read from the root Secret though it is kept
	// out of the bundle, and its record says so: the issuing Secret may
	// hold it meanwhile, and with no record of it, a later decision would
	// take it for a hostile writer's CA. The bundle's roots stay known
	// (those dualca knew: a CA of an adopted ca.crt proves nothing).
	roots := p.gw.Parsed.casIn(p.gw.CAPEM)
	kept := slices.DeleteFunc(slices.Clone(roots), func(c *x509.Certificate) bool { return !Contains(p.gw.Known, c) })
	return Decision{CertPEM: p.gw.CertPEM, KeyPEM: p.gw.KeyPEM, CAPEM: p.gw.CAPEM, State: p.gw.State, Known: Provenance(p.gw.Known, p.root, kept, p.now),
		Roots: roots, Refused: why, Upcoming: upcoming, NextCheck: nextCheck(upcoming),
		Events: []Event{{Warning: true, Reason: ReasonBundleTooLarge, Message: "the gateway is left as it is, root " + describe(p.root.Cert) +
			" not trusted: " + why + "; it fits once clients leave older roots (renewed) or those expire"}}}
}
