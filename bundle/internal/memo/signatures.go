package memo

import (
	"crypto/sha256"
	"crypto/x509"
)

// Pair names one signature check: the Raw digest of the certificate
// checked, then that of the certificate whose key checked it.
type Pair [2][sha256.Size]byte

// maxChecks bounds the pairs Verdicts, Signers and Answers each keep
// within one generation: about 150 bytes an entry, 40 MB when full. A
// decision asks about a client's leaf and a root only when the bonds have
// not seen them together, but after a restart or a rotation that is each
// client with each root of the bundle at once, so the bound must hold
// every pair: 2^18 holds 50,000 clients with five roots.
const maxChecks = 1 << 18

// Verdicts remembers whether each signature checked verified: without it,
// thousands of clients would cost thousands of public-key operations at
// every reconcile.
type Verdicts struct {
	m Recent[Pair, bool]
}

// Get returns the verdict on p, and whether there is one.
func (v *Verdicts) Get(p Pair, gen uint64) (ok, found bool) {
	if r := v.m.Get(p, gen); r != nil {
		return *r, true
	}
	return false, false
}

// Put remembers the verdict on p.
func (v *Verdicts) Put(p Pair, ok bool, gen uint64) { v.m.Put(p, ok, gen, maxChecks) }

// Sweep forgets the pairs not asked about since the generation before gen.
func (v *Verdicts) Sweep(gen uint64) { v.m.Sweep(gen) }

// Len is how many pairs v remembers.
func (v *Verdicts) Len() int { return v.m.Len() }

// Signers remembers, by a certificate's Raw digest, the digest of the key
// that verified its signature: a signature verified by one key need not
// be checked against another (see bundle.Memory for why that holds).
type Signers struct {
	m Recent[[sha256.Size]byte, [sha256.Size]byte]
}

// Get returns the key that verified cert, and whether one did.
func (s *Signers) Get(cert [sha256.Size]byte, gen uint64) (key [sha256.Size]byte, found bool) {
	if k := s.m.Get(cert, gen); k != nil {
		return *k, true
	}
	return key, false
}

// Put remembers that key verified cert.
func (s *Signers) Put(cert, key [sha256.Size]byte, gen uint64) { s.m.Put(cert, key, gen, maxChecks) }

// Sweep forgets the certificates not asked about since the generation
// before gen.
func (s *Signers) Sweep(gen uint64) { s.m.Sweep(gen) }

// Answers holds the answers given in one generation, by the addresses of
// the two certificates asked about: a decision and its metrics ask about
// each client's leaf and each root several times, and this spares the
// later asks the hashing that Verdicts' keys need. Its keys keep the
// certificates alive until Reset, so an address cannot be reused.
type Answers struct {
	m map[[2]*x509.Certificate]bool
}

// Get returns the answer given about leaf and signer, and whether there
// was one.
func (a *Answers) Get(leaf, signer *x509.Certificate) (ok, found bool) {
	ok, found = a.m[[2]*x509.Certificate{leaf, signer}]
	return ok, found
}

// Put keeps an answer for the rest of the generation, up to a bound.
func (a *Answers) Put(leaf, signer *x509.Certificate, ok bool) {
	if a.m == nil {
		a.m = map[[2]*x509.Certificate]bool{}
	}
	if len(a.m) < maxChecks {
		a.m[[2]*x509.Certificate{leaf, signer}] = ok
	}
}

// Reset forgets every answer: a generation starts.
func (a *Answers) Reset() { a.m = make(map[[2]*x509.Certificate]bool, len(a.m)) }

// Len is how many answers a holds.
func (a *Answers) Len() int { return len(a.m) }
