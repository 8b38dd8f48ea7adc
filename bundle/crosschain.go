package bundle

import (
	"bytes"
	"crypto/x509"
	"slices"
	"time"
)

// The cross-chain: what lets clients of newer roots verify a server that
// has not switched yet (see server.go for why it is a chain).
//
// Its bound: tls.crt carries one cross-certificate per root in the bundle
// that has become current since the server root (the path), and a direct
// cross-certificate of the server root only where it is valid at a moment
// the part of the path it shortcuts is not. No other link is sent: every
// link of the path is the only one OpenSSL's first-fit search can take
// toward the roots after it, and a direct link valid only while the path it
// shortcuts is serves no client the path does not. Every rotation the server has not
// followed adds one link, so a chain of k roots costs k-1 certificates per
// handshake (about 450 bytes each for ECDSA P-256 roots), and never more
// than twice that.

// crossChain returns the cross-certificates to send after a leaf of
// server, from those found and, where missing, new ones signed by the
// current root:
//
//   - first the longest path from the server root to the current root, each
//     root certified by one that was current after it (R1 by R2, R2 by R3):
//     OpenSSL follows the first certificate that fits and never backtracks,
//     so a single path must serve every client population; a path that
//     stops short is completed by the current root certifying where it ends;
//   - then a cross-certificate of the server root by a root current since
//     (R1 by R3) where it is valid when the path up to that root is not:
//     should a root along the path expire sooner, the path starts again
//     from it, and while one is not valid yet (its issuer's clock runs
//     ahead), it serves the clients of the roots after it.
//
// Only certificates signed by a root still in kept stay. The order depends
// only on the certificates, never on when they were made, so the same
// credential is written again byte for byte.
func (p *planning) crossChain(server *x509.Certificate, found, kept []*x509.Certificate) []*x509.Certificate {
	if p.clients.Memory.fingerprint(server) == p.root.Fingerprint {
		return nil
	}
	x := newCrossing(p, found, kept)
	path := x.path(server)
	var out []*x509.Certificate
	for _, l := range append(path, x.direct(server, path)...) {
		if !slices.ContainsFunc(out, func(c *x509.Certificate) bool { return bytes.Equal(c.Raw, l.cert.Raw) }) {
			out = append(out, l.cert)
		}
	}
	return out
}

// link is a cross-certificate and the root that signed it.
type link struct{ cert, signer *x509.Certificate }

// crossing is the work of one crossChain: the roots kept, their
// fingerprints and age, and the links found, by the root they certify.
// The links are found once: roots of one CA share their subject, so every
// found certificate looks, by name, like a link of every root, and a search
// that asked again at each step would cost the square of the roots at each
// of the paths it walks.
type crossing struct {
	p    *planning
	kept []*x509.Certificate
	// fp and age (position in kept, newest first: larger is older) of
	// each root kept, computed once.
	fp  map[*x509.Certificate]string
	age map[string]int
	// links are the links found that certify each root (by fingerprint),
	// oldest signer first.
	links map[string][]link
}

func newCrossing(p *planning, found, kept []*x509.Certificate) *crossing {
	x := &crossing{p: p, kept: kept, fp: make(map[*x509.Certificate]string, len(kept)), age: make(map[string]int, len(kept)),
		links: make(map[string][]link, len(kept))}
	for i, k := range kept {
		x.fp[k] = p.clients.Memory.fingerprint(k)
		x.age[x.fp[k]] = i
	}
	for _, c := range found {
		for _, node := range kept {
			if signer := x.crossSigner(c, node); signer != nil {
				x.links[x.fp[node]] = append(x.links[x.fp[node]], link{c, signer})
			}
		}
	}
	for fp := range x.links {
		x.links[fp] = x.oldestFirst(x.links[fp])
	}
	return x
}

// crossSigner returns the root of kept, other than node itself, that
// signed c as a cross-certificate of node; nil if c is not one. A
// certificate whose authority key identifier names another key than a
// root's is not that root's link: OpenSSL would not follow it there, and
// the check spares a signature check per root of the same subject.
func (x *crossing) crossSigner(c, node *x509.Certificate) *x509.Certificate {
	if !isCA(c) || !bytes.Equal(c.RawSubject, node.RawSubject) || !bytes.Equal(c.RawSubjectPublicKeyInfo, node.RawSubjectPublicKeyInfo) {
		return nil
	}
	for _, r := range x.kept {
		if len(c.AuthorityKeyId) > 0 && len(r.SubjectKeyId) > 0 && !bytes.Equal(c.AuthorityKeyId, r.SubjectKeyId) {
			continue
		}
		if x.fp[r] != x.fp[node] && x.p.clients.Memory.ChainsTo(c, r) {
			return r
		}
	}
	return nil
}

// fingerprint is Fingerprint, computed once for the roots kept.
func (x *crossing) fingerprint(c *x509.Certificate) string {
	if fp, ok := x.fp[c]; ok {
		return fp
	}
	return x.p.clients.Memory.fingerprint(c)
}

// path is the longest path of links from server to the current root among
// those found; if none reaches it, or one that stops short is longer, the
// longest partial one, completed by the current root certifying where it
// ends.
func (x *crossing) path(server *x509.Certificate) []link {
	s := &pathSearch{x: x, end: server, visited: map[string]bool{x.fingerprint(server): true}}
	s.walk(server, nil)
	// A complete path shorter than one that stops short skips roots whose
	// clients the longer one serves: a root along the old path expired and
	// only a direct link reaches the current root. Those clients keep their
	// path when the current root certifies where the longer one ends. (A
	// rotation the server does not follow for long, paused, meets this.)
	if s.complete != nil && len(s.complete) > len(s.partial) {
		return s.complete
	}
	return append(s.partial, x.sign(s.end, len(s.partial))...)
}

// direct is the cross-certificates of server by roots current since that
// are valid when the path up to their signer is not (the path's first link
// is one, and stays where it is), oldest signer first. The current root
// signs one when the path is not valid as long as that one would be, and
// it has none yet.
func (x *crossing) direct(server *x509.Certificate, path []link) []link {
	var direct []link
	for _, l := range x.links[x.fingerprint(server)] {
		if x.outlivesPath(l, path) {
			direct = append(direct, l)
		}
	}
	byCurrent := func(l link) bool { return x.fingerprint(l.signer) == x.p.root.Fingerprint }
	if !slices.ContainsFunc(path[:min(1, len(path))], byCurrent) && !slices.ContainsFunc(direct, byCurrent) {
		from, until := pathValidity(path, len(path))
		root := x.p.root.Cert
		if len(path) == 0 || from.After(later(server.NotBefore, root.NotBefore)) || until.Before(earlier(server.NotAfter, root.NotAfter)) {
			direct = append(direct, x.sign(server, 0)...)
		}
	}
	return x.oldestFirst(direct)
}

// outlivesPath reports whether the direct link l of the server root is
// valid at a moment the path from the server root to l's signer is not:
// it then serves the clients of that signer where the path cannot (a root
// along it expires sooner, or is not valid yet). A signer not on the path
// has no other link.
func (x *crossing) outlivesPath(l link, path []link) bool {
	for i, pl := range path {
		if bytes.Equal(pl.cert.Raw, l.cert.Raw) {
			return false // it is the path's first link
		}
		if x.fingerprint(pl.signer) == x.fingerprint(l.signer) {
			from, until := pathValidity(path, i+1)
			return l.cert.NotBefore.Before(from) || l.cert.NotAfter.After(until)
		}
	}
	return true
}

// pathValidity is when the first n links of path are all valid.
func pathValidity(path []link, n int) (from, until time.Time) {
	for i, l := range path[:n] {
		if i == 0 || l.cert.NotBefore.After(from) {
			from = l.cert.NotBefore
		}
		if i == 0 || l.cert.NotAfter.Before(until) {
			until = l.cert.NotAfter
		}
	}
	return from, until
}

func (x *crossing) oldestFirst(links []link) []link {
	slices.SortStableFunc(links, func(a, b link) int { return x.age[x.fingerprint(b.signer)] - x.age[x.fingerprint(a.signer)] })
	return links
}

// sign is a new link: c certified by the current root, with below links
// under it in the chain (its path length, see crossSign). A failure is
// reported, and leaves the link out.
func (x *crossing) sign(c *x509.Certificate, below int) []link {
	root := x.p.root
	cross, err := crossSign(c, root.Cert, root.KeyPEM, below)
	if err != nil {
		x.p.emit(Event{Warning: true, Reason: ReasonCrossSignFailed,
			Message: "clients of the new root may not verify the server until it switches: " + err.Error()})
		return nil
	}
	return []link{{cross, root.Cert}}
}

// pathSearch walks the links from the server root, depth first, to find the
// longest path to the current root (complete) and the longest that stops
// short (partial, ending at end). Each rotation adds at most two links
// (the path's next one and a direct one of the server root), so the paths
// walked number at most the square of the roots.
type pathSearch struct {
	x                 *crossing
	complete, partial []link
	end               *x509.Certificate
	visited           map[string]bool
}

func (s *pathSearch) walk(node *x509.Certificate, path []link) {
	nodeFP := s.x.fingerprint(node)
	if nodeFP == s.x.p.root.Fingerprint {
		if len(path) > len(s.complete) {
			s.complete = slices.Clone(path)
		}
		return
	}
	if len(path) > len(s.partial) {
		s.partial, s.end = slices.Clone(path), node
	}
	for _, l := range s.x.links[nodeFP] {
		if limit, ok := pathLen(l.cert); ok && limit < len(path) {
			continue // its path length does not reach this far from the leaf
		}
		if fp := s.x.fingerprint(l.signer); !s.visited[fp] {
			s.visited[fp] = true
			s.walk(l.signer, append(path, l))
			s.visited[fp] = false
		}
	}
}
