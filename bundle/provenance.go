package bundle

import (
	"crypto/x509"
	"slices"
	"time"
)

// Rule: provenance.
//
// dualca trusts, and signs for, only roots it read from the root Secret
// itself. Everything else it reads can be written by someone with less
// power than the root Secret's key: the gateway Secret by whoever may patch
// it, a client's ca.crt by whoever may create an Issuer in its namespace
// (subjects are public, so "a CA with the root's subject" proves nothing).
// So every root that reaches ca.crt, every root whose key signed the server
// leaf, and every root a cross-certificate certifies is one of Known: the
// roots dualca read from the root Secret, as its own record (a Secret only
// its account writes) remembers them, and the current root. A certificate
// found anywhere else that is not one of them is dropped with a Warning,
// however it got there; no annotation, hash or client can vouch for it.
//
// A gateway with no record (first install, or an upgrade from a version
// that kept none) starts from the current root alone: it fails closed.

// MaxKnown bounds the roots remembered beyond those in the bundle: enough
// for every rotation of a year at a rotation a week, so that a client left
// on an old root can still be adopted back, and a record that stays small.
const MaxKnown = 64

// provenance is the set of roots read from the root Secret, by fingerprint.
type provenance map[string]bool

func newProvenance(known []*x509.Certificate, root *Root, sigs *Memory) provenance {
	p := make(provenance, len(known)+1)
	for _, c := range known {
		p[sigs.fingerprint(c)] = true
	}
	p[root.Fingerprint] = true
	return p
}

// from reports whether c was read from the root Secret.
func (p *planning) fromRootSecret(c *x509.Certificate) bool {
	return p.known[p.clients.Memory.fingerprint(c)]
}

// readFromRoot keeps the roots of found that were read from the root
// Secret and reports the others, once each, with a Warning: a root there
// that dualca never read was put there by someone else.
func (p *planning) readFromRoot(found []*x509.Certificate, where string) []*x509.Certificate {
	var kept, foreign []*x509.Certificate
	for _, c := range found {
		switch {
		case p.fromRootSecret(c):
			kept = append(kept, c)
		case !slices.ContainsFunc(foreign, func(f *x509.Certificate) bool { return sameRaw(f, c) }):
			foreign = append(foreign, c)
		}
	}
	if len(foreign) > 0 {
		p.emit(Event{Warning: true, Reason: ReasonUntrustedRoot,
			Message: where + " held " + plural(len(foreign), "CA") + " dualca never read from the root Secret, not trusted: " + describeAll(foreign)})
	}
	return kept
}

// Provenance is what a decision's record remembers of the roots read from
// the root Secret: the current root and those of the bundle (a subset of
// known and the current root) always, then the other roots of known that
// are unexpired at now, newest first, up to MaxKnown in all. The same
// inputs give the same record.
func Provenance(known []*x509.Certificate, root *Root, bundle []*x509.Certificate, now time.Time) []*x509.Certificate {
	seen := map[string]bool{}
	var out, rest []*x509.Certificate
	add := func(to *[]*x509.Certificate, c *x509.Certificate) {
		if fp := Fingerprint(c); !seen[fp] {
			seen[fp] = true
			*to = append(*to, c)
		}
	}
	add(&out, root.Cert)
	for _, c := range bundle {
		add(&out, c) // whatever its dates: the bundle decided it stays
	}
	for _, c := range known {
		if !now.After(c.NotAfter) {
			add(&rest, c)
		}
	}
	slices.SortStableFunc(rest, func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })
	for _, c := range rest {
		if len(out) >= MaxKnown {
			break
		}
		out = append(out, c)
	}
	return out
}

func sameRaw(a, b *x509.Certificate) bool { return string(a.Raw) == string(b.Raw) }
