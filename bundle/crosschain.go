package bundle

import (
	"bytes"
	"crypto/x509"
	"slices"
)

// The cross-chain: what lets clients of newer roots verify a server that
// has not switched yet (see server.go for why it is a chain).

// crossChain returns the cross-certificates to send after a leaf of
// server, from those found and, where missing, new ones signed by the
// current root:
//
//   - first the longest path from the server root to the current root, each
//     root certified by one that was current after it (R1 by R2, R2 by R3):
//     OpenSSL follows the first certificate that fits and never backtracks,
//     so a single path must serve every client population; a path that
//     stops short is completed by the current root certifying where it ends;
//   - then a cross-certificate of the server root by each root that has
//     been current since (R1 by R3), for verifiers that backtrack, and for
//     a path to start again from should a root along it expire.
//
// Only certificates signed by a root still in kept stay. The order depends
// only on the certificates, never on when they were made, so the same
// credential is written again byte for byte.
func (p *planning) crossChain(server *x509.Certificate, found, kept []*x509.Certificate) []*x509.Certificate {
	if Fingerprint(server) == p.root.Fingerprint {
		return nil
	}
	x := &crossing{p: p, found: found, kept: kept, age: map[string]int{}}
	for i, k := range kept {
		x.age[Fingerprint(k)] = i // position in kept, newest first: larger is older
	}
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

// crossing is the work of one crossChain: the cross-certificates found, the
// roots kept and their age.
type crossing struct {
	p           *planning
	found, kept []*x509.Certificate
	age         map[string]int
}

// path is the longest path of links from server to the current root among
// those found; if none reaches it, the longest partial one, completed by
// the current root certifying where it ends.
func (x *crossing) path(server *x509.Certificate) []link {
	s := &pathSearch{x: x, end: server, visited: map[string]bool{Fingerprint(server): true}}
	s.walk(server, nil)
	if s.complete != nil {
		return s.complete
	}
	return append(s.partial, x.sign(s.end)...)
}

// direct is the cross-certificates of server by each root current since,
// the current root's included (the path's first link, if it is one),
// oldest signer first.
func (x *crossing) direct(server *x509.Certificate, path []link) []link {
	byCurrent := func(l link) bool { return Fingerprint(l.signer) == x.p.root.Fingerprint }
	direct := x.certifying(server)
	if len(path) > 0 && byCurrent(path[0]) {
		direct = append(direct, path[0]) // the path is the direct cross-certificate
	}
	if !slices.ContainsFunc(direct, byCurrent) {
		direct = append(direct, x.sign(server)...)
	}
	return x.oldestFirst(direct)
}

// certifying is the links found that certify node, oldest signer first.
func (x *crossing) certifying(node *x509.Certificate) []link {
	var links []link
	for _, c := range x.found {
		if signer := crossSigner(c, node, x.kept, x.p.clients.Signatures); signer != nil {
			links = append(links, link{c, signer})
		}
	}
	return x.oldestFirst(links)
}

func (x *crossing) oldestFirst(links []link) []link {
	slices.SortStableFunc(links, func(a, b link) int { return x.age[Fingerprint(b.signer)] - x.age[Fingerprint(a.signer)] })
	return links
}

// sign is a new link: c certified by the current root. A failure is
// reported, and leaves the link out.
func (x *crossing) sign(c *x509.Certificate) []link {
	root := x.p.root
	cross, err := crossSign(c, root.Cert, root.KeyPEM)
	if err != nil {
		x.p.emit(Event{Warning: true, Reason: ReasonCrossSignFailed,
			Message: "clients of the new root may not verify the server until it switches: " + err.Error()})
		return nil
	}
	return []link{{cross, root.Cert}}
}

// pathSearch walks the links from the server root, depth first, to find the
// longest path to the current root (complete) and the longest that stops
// short (partial, ending at end).
type pathSearch struct {
	x                 *crossing
	complete, partial []link
	end               *x509.Certificate
	visited           map[string]bool
}

func (s *pathSearch) walk(node *x509.Certificate, path []link) {
	if Fingerprint(node) == s.x.p.root.Fingerprint {
		if len(path) > len(s.complete) {
			s.complete = slices.Clone(path)
		}
		return
	}
	if len(path) > len(s.partial) {
		s.partial, s.end = slices.Clone(path), node
	}
	for _, l := range s.x.certifying(node) {
		if fp := Fingerprint(l.signer); !s.visited[fp] {
			s.visited[fp] = true
			s.walk(l.signer, append(path, l))
			s.visited[fp] = false
		}
	}
}
