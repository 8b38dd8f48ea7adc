package memo

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
)

// Digest is what is hashed of a certificate to answer questions about it:
// the SHA-256 of its Raw (its identity), of its RawSubjectPublicKeyInfo
// (the key it signs with) and of its RawSubject (what it is named as an
// issuer).
type Digest struct {
	Raw, Key, Subject [sha256.Size]byte
	fp                string // Raw in hex, once asked for
}

// DigestOf hashes c.
func DigestOf(c *x509.Certificate) Digest {
	return Digest{Raw: sha256.Sum256(c.Raw), Key: sha256.Sum256(c.RawSubjectPublicKeyInfo), Subject: sha256.Sum256(c.RawSubject)}
}

// Fingerprint is Raw in lowercase hex, encoded once.
func (d *Digest) Fingerprint() string {
	if d.fp == "" {
		d.fp = hex.EncodeToString(d.Raw[:])
	}
	return d.fp
}

// maxDigests bounds the certificates whose digests Digests keeps (and
// keeps alive) within one generation: the clients' leaves and a bundle's
// roots several times over.
const maxDigests = 1 << 17

// Digests remembers each certificate's Digest by its address: the
// gateway's roots and cross-certificates are the same values from one
// reconcile to the next, and hashing each again for every question was
// most of what a reconcile at rest cost once the signatures were
// remembered.
type Digests struct {
	m Recent[*x509.Certificate, Digest]
}

// Of returns c's Digest, hashed the first time c is asked about.
func (d *Digests) Of(c *x509.Certificate, gen uint64) *Digest {
	if v := d.m.Get(c, gen); v != nil {
		return v
	}
	return d.m.Put(c, DigestOf(c), gen, maxDigests)
}

// Sweep forgets the certificates not asked about since the generation
// before gen (see Recent), once there are more than minSweepCertificates.
func (d *Digests) Sweep(gen uint64) { d.m.sweepAbove(gen, minSweepCertificates) }

// minSweepCertificates is the size under which Digests is not swept. Its
// entries keep their certificates alive, a few kilobytes each once
// parsed. Above MinSweep, a dualca whose decisions ask about a few roots
// kept up to 256 certificates no longer used (each a root a rotation
// retired, or a ca.crt parsed again), gained at about one per rotation:
// an hour-long soak, rotating every minute or so, saw that as growth of
// the heap, bounded only hours later. Sixteen holds a bundle's roots and
// cross-certificates twice over; sweeping so few costs nothing.
const minSweepCertificates = 16

// Len is how many certificates d remembers.
func (d *Digests) Len() int { return d.m.Len() }
