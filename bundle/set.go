package bundle

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	var none *Signatures
	return none.trustSet(certs, now)
}

// trustSet is Normalize, the fingerprints remembered.
func (s *Signatures) trustSet(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
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
// again and again keeps a Signatures and asks it instead.
func ChainsTo(leaf, root *x509.Certificate) bool {
	var none *Signatures
	return none.ChainsTo(leaf, root)
}

// Signatures remembers signature checks. A decision asks whether each
// client's leaf chains to each root in the bundle, at every reconcile, and
// roots of one CA share a subject name, so without it thousands of clients
// would cost thousands of public-key operations per reconcile. A result is
// a pure function of the two certificates' bytes, so it never goes stale:
// whoever decides repeatedly (the syncer, for as long as it runs) keeps one,
// hands it to the decisions in Clients and calls Advance before each, so
// that what the decisions stopped asking about (a leaf replaced by a
// renewal, a retired root) is forgotten. It is safe for concurrent use; a
// nil *Signatures checks every time and remembers nothing.
//
// It also remembers the key that verified each certificate: a signature
// verified by one key is not checked again against a root with another key
// (each rotation brings one), since only whoever chooses that other key,
// knowing the signature, could make it verify too, and a root crafted that
// way is one dualca should not keep for the client anyway. A root renewed
// with the same key is still checked.
//
// And it remembers the digest of the certificates it was asked about, by
// address: the gateway's roots and cross-certificates (see Parsed) are the
// same values from one reconcile to the next, and hashing each again for
// every pair was most of what a reconcile at rest cost once the signatures
// were remembered. A client's leaf (ClientLeaf) carries its own digests,
// and one verified as it was read needs no check at all (LeafChainsTo).
type Signatures struct {
	mu      sync.Mutex
	gen     uint64 // the generation (see Advance)
	seen    aging[[2][sha256.Size]byte, bool]
	signer  aging[[sha256.Size]byte, [sha256.Size]byte] // certificate → the key that verified it
	digests aging[*x509.Certificate, certDigest]
	// asked holds the answers given in this generation, by the addresses
	// asked about: a decision and its metrics ask about each client's leaf
	// and each root several times, and this spares the later asks the
	// hashing of seen's keys. Advance empties it; its keys keep the
	// certificates alive until then, so an address cannot be reused.
	asked map[[2]*x509.Certificate]bool
	// bonds holds, for each root asked about, each client's bond to it
	// (bonds.go): what survives from one reconcile to the next.
	bonds []*bonds
	// computed counts the bonds computed, for the tests of their reuse.
	computed atomic.Uint64
}

// certDigest is what Signatures hashes of a certificate: the SHA-256 of
// its Raw, of its RawSubjectPublicKeyInfo and of its RawSubject.
type certDigest struct {
	raw, key, subject [sha256.Size]byte
	fp                string // Fingerprint, once asked for
}

func digestOf(c *x509.Certificate) certDigest {
	return certDigest{raw: sha256.Sum256(c.Raw), key: sha256.Sum256(c.RawSubjectPublicKeyInfo), subject: sha256.Sum256(c.RawSubject)}
}

// maxDigests bounds the certificates whose digests a Signatures keeps (and
// keeps alive) within one generation: the clients' leaves and a bundle's
// roots several times over. When full it starts again empty.
const maxDigests = 1 << 17

// maxSignatures bounds the pairs a Signatures remembers within one
// generation: about 150 bytes an entry, 40 MB when full. The bonds
// (bonds.go) ask about a client's leaf and a root only when they have not
// seen them together, but after a restart or a rotation that is each
// client with each root of the bundle at once, so the bound must hold every
// pair: 2^18 holds 50,000 clients with five roots.
const maxSignatures = 1 << 18

// NewSignatures returns an empty Signatures.
func NewSignatures() *Signatures {
	return &Signatures{}
}

// Advance starts a generation: what was not asked about in it or in the one
// before leaves at the next sweep, so a Signatures holds what the decisions
// use now (the leaves clients present, the roots and cross-certificates the
// gateway holds), not every certificate it ever saw. Whoever decides
// repeatedly calls it once per decision: the syncer, at each reconcile.
func (s *Signatures) Advance() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.asked = make(map[[2]*x509.Certificate]bool, len(s.asked))
	s.seen.sweep(s.gen)
	s.signer.sweep(s.gen)
	s.digests.sweep(s.gen)
	s.sweepBonds()
}

// ChainsTo is the package's ChainsTo, with the signature check remembered.
func (s *Signatures) ChainsTo(leaf, root *x509.Certificate) bool {
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
func (s *Signatures) LeafChainsTo(leaf *ClientLeaf, root *x509.Certificate) bool {
	if leaf == nil || root == nil {
		return false
	}
	var d certDigest
	if s == nil {
		d = digestOf(root)
	} else {
		s.mu.Lock()
		d = *s.digest(root)
		s.mu.Unlock()
	}
	switch {
	case leaf.sum == d.raw:
		return true
	case leaf.issuer != d.subject:
		return false
	case leaf.unverified == nil:
		return leaf.verifier == d.key && canSign(root)
	}
	if s == nil {
		return leaf.unverified.verifiedBy(root)
	}
	key := [2][sha256.Size]byte{leaf.sum, d.raw}
	s.mu.Lock()
	if v := s.seen.get(key, s.gen); v != nil {
		s.mu.Unlock()
		return *v
	}
	signedBy := d.key
	if v := s.signer.get(leaf.sum, s.gen); v != nil {
		signedBy = *v
	}
	s.mu.Unlock()
	ok := signedBy == d.key && leaf.unverified.verifiedBy(root)
	s.mu.Lock()
	s.seen.put(key, ok, s.gen, maxSignatures)
	if ok {
		s.signer.put(leaf.sum, d.key, s.gen, maxSignatures)
	}
	s.mu.Unlock()
	return ok
}

// digest returns c's digests, computed once per address. The caller holds
// s.mu.
func (s *Signatures) digest(c *x509.Certificate) *certDigest {
	if d := s.digests.get(c, s.gen); d != nil {
		return d
	}
	return s.digests.put(c, digestOf(c), s.gen, maxDigests)
}

// fingerprint is Fingerprint, remembered by address; a nil s remembers
// nothing.
func (s *Signatures) fingerprint(c *x509.Certificate) string {
	if s == nil || c == nil {
		return Fingerprint(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.digest(c)
	if d.fp == "" {
		d.fp = hex.EncodeToString(d.raw[:])
	}
	return d.fp
}

func (s *Signatures) verify(leaf, root *x509.Certificate) bool {
	asked := [2]*x509.Certificate{leaf, root}
	s.mu.Lock()
	if ok, found := s.asked[asked]; found {
		s.mu.Unlock()
		return ok
	}
	rootDigest := s.digest(root)
	key := [2][sha256.Size]byte{s.digest(leaf).raw, rootDigest.raw}
	rootKey := rootDigest.key
	var found, ok, signed bool
	var signer [sha256.Size]byte
	if v := s.seen.get(key, s.gen); v != nil {
		found, ok = true, *v
	}
	if v := s.signer.get(key[0], s.gen); v != nil {
		signed, signer = true, *v
	}
	if found {
		s.remember(asked, ok)
		s.mu.Unlock()
		return ok
	}
	s.mu.Unlock()
	switch {
	case signed && signer != rootKey:
		ok = false
	default:
		ok = leaf.CheckSignatureFrom(root) == nil
	}
	s.mu.Lock()
	s.seen.put(key, ok, s.gen, maxSignatures)
	if ok {
		s.signer.put(key[0], rootKey, s.gen, maxSignatures)
	}
	s.remember(asked, ok)
	s.mu.Unlock()
	return ok
}

// remember keeps an answer for the rest of the generation, up to
// maxSignatures of them. The caller holds s.mu.
func (s *Signatures) remember(asked [2]*x509.Certificate, ok bool) {
	if s.asked == nil {
		s.asked = map[[2]*x509.Certificate]bool{}
	}
	if len(s.asked) < maxSignatures {
		s.asked[asked] = ok
	}
}

// size is how many pairs and certificates s remembers.
func (s *Signatures) size() (pairs, certificates int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen.len(), s.digests.len()
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
