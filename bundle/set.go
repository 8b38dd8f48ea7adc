package bundle

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dualca/dualca/bundle/internal/memo"
)

// Fingerprint is the lowercase hex SHA-256 of c.Raw, the identity of a
// certificate throughout dualca: two certificates with the same subject (a
// re-issued root) are different roots, the same bytes are the same root. It
// returns "" for a nil certificate.
func Fingerprint(c *x509.Certificate) string {
	if c == nil {
		return ""
	}
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// Normalize returns the trust set to publish: deduplicated by fingerprint,
// certificates that expired before now dropped, ordered newest first
// (NotBefore descending, then NotAfter descending, then fingerprint
// ascending). The order is total, so the same set always encodes to the same
// bytes and the gateway reloads only on real changes. Nil entries are
// dropped. It does not modify its input slice.
func Normalize(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
	var none *Memory
	return none.trustSet(certs, now)
}

// trustSet is Normalize, the fingerprints remembered.
func (s *Memory) trustSet(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
	type entry struct {
		cert *x509.Certificate
		fp   string
	}
	seen := make(map[string]bool, len(certs))
	entries := make([]entry, 0, len(certs))
	for _, c := range certs {
		if c == nil || c.NotAfter.Before(now) {
			continue
		}
		fp := s.fingerprint(c)
		if seen[fp] {
			continue
		}
		seen[fp] = true
		entries = append(entries, entry{cert: c, fp: fp})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		if n := b.cert.NotBefore.Compare(a.cert.NotBefore); n != 0 {
			return n
		}
		if n := b.cert.NotAfter.Compare(a.cert.NotAfter); n != 0 {
			return n
		}
		return strings.Compare(a.fp, b.fp)
	})
	out := make([]*x509.Certificate, len(entries))
	for i, e := range entries {
		out[i] = e.cert
	}
	return out
}

// ChainsTo reports whether leaf is root itself (same fingerprint) or was
// signed directly by root: its issuer name equals root's subject name and the
// signature verifies with root's key. Checking the signature, not just the
// name, matters because a re-issued root usually keeps its subject name.
// It remembers nothing: a caller that asks about the same certificates
// again and again keeps a Memory and asks it instead.
func ChainsTo(leaf, root *x509.Certificate) bool {
	var none *Memory
	return none.ChainsTo(leaf, root)
}

// Memory is what decisions remember about certificates from one
// reconcile to the next: each question a decision asks of it is a pure
// function of the certificates' bytes, so an answer never goes stale (see
// package memo for the identity of each key). Whoever decides repeatedly
// (the syncer, for as long as it runs) keeps one, hands it to the decisions
// in Clients and calls Advance before each, so that what the decisions
// stopped asking about (a leaf replaced by a renewal, a retired root) is
// forgotten. It is safe for concurrent use; a nil *Memory checks every
// time and remembers nothing.
//
// It remembers five things, one part each:
//
//   - verdicts: whether a certificate's signature verifies with a root's
//     key. A decision asks whether each client's leaf chains to each root
//     in the bundle, at every reconcile, and roots of one CA share a
//     subject name, so without it thousands of clients would cost
//     thousands of public-key operations per reconcile.
//   - signers: the key that verified each certificate. A signature
//     verified by one key is not checked again against a root with another
//     key (each rotation brings one), since only whoever chooses that other
//     key, knowing the signature, could make it verify too, and a root
//     crafted that way is one dualca should not keep for the client anyway.
//     A root renewed with the same key is still checked.
//   - digests: the hashes of the certificates asked about, by address: the
//     gateway's roots and cross-certificates (see Parsed) are the same
//     values from one reconcile to the next. A client's leaf (ClientLeaf)
//     carries its own digests, and one verified as it was read needs no
//     check at all (LeafChainsTo).
//   - answers: this generation's answers by the addresses asked about,
//     which spares a decision and its metrics, asking again, the hashing
//     of the verdicts' keys.
//   - bonds: each client's bond to each root asked about (bonds.go), what
//     survives from one reconcile to the next.
type Memory struct {
	mu       sync.Mutex // guards all but what a bond table guards itself
	gen      uint64     // the generation (see Advance)
	verdicts memo.Verdicts
	signers  memo.Signers
	digests  memo.Digests
	answers  memo.Answers
	bonds    memo.Bonds[bondCerts, bond]
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{}
}

// Advance starts a generation: what was not asked about in it or in the one
// before leaves at the next sweep, so a Memory holds what the decisions
// use now (the leaves clients present, the roots and cross-certificates the
// gateway holds), not every certificate it ever saw. Whoever decides
// repeatedly calls it once per decision: the syncer, at each reconcile.
func (s *Memory) Advance() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.answers.Reset()
	s.verdicts.Sweep(s.gen)
	s.signers.Sweep(s.gen)
	s.digests.Sweep(s.gen)
	s.bonds.Sweep(s.gen)
}

// ChainsTo is the package's ChainsTo, with the signature check remembered.
func (s *Memory) ChainsTo(leaf, root *x509.Certificate) bool {
	if leaf == nil || root == nil {
		return false
	}
	if bytes.Equal(leaf.Raw, root.Raw) {
		return true
	}
	if !bytes.Equal(leaf.RawIssuer, root.RawSubject) {
		return false
	}
	if s == nil {
		return leaf.CheckSignatureFrom(root) == nil
	}
	return s.verify(leaf, root)
}

// LeafChainsTo is ChainsTo for a client's leaf: it is root itself, or root
// named it as its issuer and root's key verifies its signature. A leaf
// verified as it was read is answered from the key that verified it, with
// no signature check; an unverified one is checked, and remembered as
// ChainsTo remembers.
func (s *Memory) LeafChainsTo(leaf *ClientLeaf, root *x509.Certificate) bool {
	if leaf == nil || root == nil {
		return false
	}
	var d memo.Digest
	if s == nil {
		d = memo.DigestOf(root)
	} else {
		s.mu.Lock()
		d = *s.digests.Of(root, s.gen)
		s.mu.Unlock()
	}
	switch {
	case leaf.sum == d.Raw:
		return true
	case leaf.issuer != d.Subject:
		return false
	case leaf.unverified == nil:
		return leaf.verifier == d.Key && canSign(root)
	}
	if s == nil {
		return leaf.unverified.verifiedBy(root)
	}
	return s.check(memo.Pair{leaf.sum, d.Raw}, d.Key, func() bool { return leaf.unverified.verifiedBy(root) })
}

// check returns the verdict on pair, whose signer's key has the digest
// key, calling verify only when neither the verdicts nor the signers
// answer it, and remembers what it found.
func (s *Memory) check(pair memo.Pair, key [sha256.Size]byte, verify func() bool) bool {
	s.mu.Lock()
	if ok, found := s.verdicts.Get(pair, s.gen); found {
		s.mu.Unlock()
		return ok
	}
	signer, signed := s.signers.Get(pair[0], s.gen)
	s.mu.Unlock()
	ok := (!signed || signer == key) && verify()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.verdicts.Put(pair, ok, s.gen)
	if ok {
		s.signers.Put(pair[0], key, s.gen)
	}
	return ok
}

// fingerprint is Fingerprint, remembered by address; a nil s remembers
// nothing.
func (s *Memory) fingerprint(c *x509.Certificate) string {
	if s == nil || c == nil {
		return Fingerprint(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.digests.Of(c, s.gen).Fingerprint()
}

// verify is ChainsTo's signature check, answered from this generation's
// answers, then from the verdicts and signers.
func (s *Memory) verify(leaf, root *x509.Certificate) bool {
	s.mu.Lock()
	if ok, found := s.answers.Get(leaf, root); found {
		s.mu.Unlock()
		return ok
	}
	rootDigest := s.digests.Of(root, s.gen)
	pair, key := memo.Pair{s.digests.Of(leaf, s.gen).Raw, rootDigest.Raw}, rootDigest.Key
	s.mu.Unlock()
	ok := s.check(pair, key, func() bool { return leaf.CheckSignatureFrom(root) == nil })
	s.mu.Lock()
	s.answers.Put(leaf, root, ok)
	s.mu.Unlock()
	return ok
}

// size is how many pairs and certificates s remembers.
func (s *Memory) size() (pairs, certificates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.verdicts.Len(), s.digests.Len()
}

// Contains reports whether set holds a certificate with c's fingerprint.
func Contains(set []*x509.Certificate, c *x509.Certificate) bool {
	if c == nil {
		return false
	}
	return Find(set, Fingerprint(c)) != nil
}

// Find returns the certificate in set with fingerprint fp, or nil.
func Find(set []*x509.Certificate, fp string) *x509.Certificate {
	if fp == "" {
		return nil
	}
	for _, c := range set {
		if c != nil && Fingerprint(c) == fp {
			return c
		}
	}
	return nil
}
