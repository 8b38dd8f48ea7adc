package bundle

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"time"
)

// Client is one selected client Certificate, with the certificates its
// Secret holds (as its CertificateRequest of the current revision tells
// them: dualca reads no client Secret).
type Client struct {
	// Name identifies the client in messages, as NAMESPACE/NAME.
	Name string
	// Leaf is what dualca keeps of the certificate in the client's
	// tls.crt; nil when the Secret is missing or unreadable.
	Leaf *ClientLeaf
	// CA is the client's ca.crt: the roots it verifies the server with.
	CA []*x509.Certificate
	// Failed says the last renewal of this client failed.
	Failed bool
	// Unknown says dualca cannot see the credential this client loads: the
	// CertificateRequest of its current revision is gone (cert-manager
	// garbage-collects it while the next one is in flight) and dualca has
	// no memory of it (a restart, or the CR deleted by hand). Leaf and CA
	// are nil. Every decision treats it fail-safe, whatever a stale Leaf
	// might say: it uses every root, so none is retired for want of users
	// while it is unknown (an expired root still leaves), and it is on no
	// root, so it counts as pending, holds the switch until the grace
	// period forces it, and is due for renewal, which brings it back into
	// view. The legacy strategy never deletes its Secret: it cannot see
	// what it would delete.
	Unknown bool
}

// On reports whether the client has moved to root: its leaf chains to it
// and it trusts it, so it will accept a server credential from it. An
// Unknown client is on no root.
func (c Client) On(root *x509.Certificate, now time.Time) bool {
	return c.on(nil, root, now)
}

// Uses reports whether the client still depends on root being trusted by
// the gateway: its unexpired leaf chains to it. An Unknown client may
// depend on any root, so it uses every one.
func (c Client) Uses(root *x509.Certificate, now time.Time) bool {
	return c.uses(nil, root, now)
}

func (c Client) on(sigs *Memory, root *x509.Certificate, now time.Time) bool {
	return root != nil && bondOf(sigs, &c, root).on(&c, now)
}

func (c Client) uses(sigs *Memory, root *x509.Certificate, now time.Time) bool {
	return root != nil && bondOf(sigs, &c, root).uses(&c, now)
}

// Clients is what dualca knows of the selected client Certificates.
type Clients struct {
	// Tracked is false when no client selector is configured: then nothing
	// is known of the clients, roots are kept until they expire and the
	// server switches only when the grace period ends.
	Tracked bool
	// Unread says the clients are tracked but not read yet: dualca has
	// just started and its cache of them is still loading, which at tens
	// of thousands of clients takes longer than bringing the gateway in
	// sync. Items is then empty and means nothing; every decision treats
	// the clients fail-safe, as one Unknown client: no root is retired but
	// by expiry, the server switches only when it must (the grace period
	// over, an expiry, a full chain, a promote), no client is renewed, and
	// the progress and the readiness stamp recorded before stay as they
	// were, neither acted on nor overwritten, until the clients are read.
	// An adoption (Adopts) needs the clients' ca.crt: it is not decided
	// with them unread.
	Unread bool
	Items  []Client
	// Memory remembers the signature checks of the decisions made over
	// these clients. The syncer keeps one for as long as it runs, so that a
	// reconcile at rest checks no signature again; nil, a decision checks
	// afresh, remembering only within itself.
	Memory *Memory
}

// Using counts the selected clients whose unexpired leaf chains to root,
// and the Unknown ones: those that still need, or may need, the gateway to
// trust it.
func (c Clients) Using(root *x509.Certificate, now time.Time) int {
	n := 0
	c.Memory.eachBond(c.Items, root, func(cl *Client, b bond) {
		if b.uses(cl, now) {
			n++
		}
	})
	return n
}

// CountProgress counts the clients on root (renewed), those whose last
// renewal failed, and the others (pending). A nil root counts none renewed,
// and an Unknown client is never renewed.
func CountProgress(clients Clients, root *x509.Certificate, now time.Time) Progress {
	var p Progress
	clients.Memory.eachBond(clients.Items, root, func(c *Client, b bond) {
		switch {
		case b.on(c, now):
			p.Renewed++
		case c.Failed:
			p.Failed++
		default:
			p.Pending++
		}
	})
	return p
}

// ReasonClientInvalid is the event reason for a selected client whose
// Secret dualca cannot read: it counts as on no root until cert-manager
// writes it again.
const ReasonClientInvalid = "ClientInvalid"

// ParseClient reads a client Secret's tls.crt and ca.crt as cert-manager
// writes them: a leaf (and maybe its chain), and the root it trusts the
// server with. leaf is nil when tls.crt is unusable and ca nil when ca.crt
// is; problem says what is wrong, for an event, or is "" when nothing is.
// A client with a problem is never a reason to trust anything: the leaf
// and roots returned are only what parsed cleanly. It is ParseClientCA
// then ParseClientLeaf, for a caller that parses each client on its own.
func ParseClient(tlsCrt, caCrt []byte) (leaf *ClientLeaf, ca []*x509.Certificate, problem string) {
	ca, caProblem := ParseClientCA(caCrt)
	leaf, leafProblem := ParseClientLeaf(tlsCrt, ca)
	if leaf == nil || caProblem == "" {
		return leaf, ca, leafProblem // tls.crt's own problem comes first
	}
	return leaf, ca, caProblem
}

// ParseClientCA reads a client's ca.crt: the roots it verifies the server
// with, and what is wrong with them ("" when nothing is). Thousands of
// clients share one ca.crt, so a caller that keeps many parses each
// distinct one once and hands the same roots to each client's leaf.
func ParseClientCA(caCrt []byte) (ca []*x509.Certificate, problem string) {
	certs, err := ParseCertificates("ca.crt", caCrt)
	if err != nil {
		return nil, err.Error()
	}
	for i, c := range certs {
		if !c.BasicConstraintsValid || !c.IsCA {
			return certs, fmt.Sprintf("ca.crt: block %d is not a CA certificate", i+1)
		}
	}
	return certs, ""
}

// ParseClientLeaf reads a client's tls.crt against its parsed ca.crt (nil
// when unusable): the leaf, its signature checked against ca, and what is
// wrong with it. It is ReadClientLeaf then VerifiedBy.
func ParseClientLeaf(tlsCrt []byte, ca []*x509.Certificate) (*ClientLeaf, string) {
	leaf, problem := ReadClientLeaf(tlsCrt)
	if leaf == nil {
		return nil, problem
	}
	return leaf.VerifiedBy(ca)
}

// ReadClientLeaf reads a client's tls.crt alone: the leaf, its signature
// still to check (VerifiedBy), and what is wrong with it; nil when tls.crt
// is unusable.
func ReadClientLeaf(tlsCrt []byte) (*ClientLeaf, string) {
	certs, err := ParseCertificates("tls.crt", tlsCrt)
	switch {
	case err != nil:
		return nil, err.Error()
	case certs[0].IsCA:
		return nil, "tls.crt: holds a CA certificate, not a client certificate"
	}
	return NewClientLeaf(certs[0], nil), ""
}

// VerifiedBy returns l read against a client's parsed ca.crt (nil when
// unusable): verified by the first root of ca that, naming it as its
// issuer, verifies its signature (a new ClientLeaf, keeping no signed
// bytes; l itself is not modified), and what is wrong with it: "" when ca
// holds such a root, or l itself, or is nil.
func (l *ClientLeaf) VerifiedBy(ca []*x509.Certificate) (*ClientLeaf, string) {
	issued := false
	for _, c := range ca {
		switch {
		case c == nil:
		case l.sum == sha256.Sum256(c.Raw):
			issued = true
		case l.issuer != sha256.Sum256(c.RawSubject):
		case l.unverified == nil:
			if l.verifier == sha256.Sum256(c.RawSubjectPublicKeyInfo) && canSign(c) {
				return l, ""
			}
		case l.unverified.verifiedBy(c):
			v := *l
			v.verifier, v.unverified = sha256.Sum256(c.RawSubjectPublicKeyInfo), nil
			return &v, ""
		}
	}
	if issued || ca == nil {
		return l, ""
	}
	return l, "tls.crt: not issued by any certificate of ca.crt"
}

// ClientLeaf is what dualca keeps of a client's leaf: what the decisions
// read of it, a tenth of the memory of the parsed certificate (2 KB with
// its DER), kept for every selected client. Its identity and its issuer's
// are digests; of its signature it keeps only the key that verified it,
// when one did as it was read (its own ca.crt's root, for a client as
// cert-manager issues it): the signature then verifies under a root of
// the same key and no other (see Memory), so the signed bytes are of
// no more use. A leaf no key verified keeps them, to be checked against
// the roots asked about. Anything else a decision reads of a client's
// leaf must be added here. It is never modified once made, so it may be
// shared.
type ClientLeaf struct {
	sum    [sha256.Size]byte // of the DER: the leaf's identity
	issuer [sha256.Size]byte // of the raw issuer name
	// verifier is the digest of the SubjectPublicKeyInfo of the key that
	// verified the signature; unset while unverified is not nil.
	verifier   [sha256.Size]byte
	notAfter   time.Time
	unverified *signedPart
}

// signedPart is what CheckSignatureFrom reads of the certificate it checks.
type signedPart struct {
	tbs, signature []byte
	algorithm      x509.SignatureAlgorithm
}

// verifiedBy reports whether root's key verifies the signature, as
// CheckSignatureFrom does (root's constraints too).
func (p *signedPart) verifiedBy(root *x509.Certificate) bool {
	return (&x509.Certificate{RawTBSCertificate: p.tbs, Signature: p.signature, SignatureAlgorithm: p.algorithm}).CheckSignatureFrom(root) == nil
}

// NewClientLeaf returns what dualca keeps of leaf (nil for nil), its
// signature checked against verifiers in turn until one, naming it as the
// issuer, verifies it: a client's ca.crt, whose root normally issued its
// leaf.
func NewClientLeaf(leaf *x509.Certificate, verifiers []*x509.Certificate) *ClientLeaf {
	if leaf == nil {
		return nil
	}
	l := &ClientLeaf{sum: sha256.Sum256(leaf.Raw), issuer: sha256.Sum256(leaf.RawIssuer), notAfter: leaf.NotAfter,
		unverified: &signedPart{tbs: leaf.RawTBSCertificate, signature: leaf.Signature, algorithm: leaf.SignatureAlgorithm}}
	l, _ = l.VerifiedBy(verifiers)
	return l
}

// NotAfter is the end of the leaf's validity.
func (l *ClientLeaf) NotAfter() time.Time { return l.notAfter }

// Fingerprint is the leaf's Fingerprint.
func (l *ClientLeaf) Fingerprint() string { return hex.EncodeToString(l.sum[:]) }

// Is reports whether c is the certificate l was made from (same bytes).
func (l *ClientLeaf) Is(c *x509.Certificate) bool {
	return l != nil && c != nil && l.sum == sha256.Sum256(c.Raw)
}

// Verified reports whether a key verified the leaf's signature as it was
// read: it then keeps none of its signed bytes.
func (l *ClientLeaf) Verified() bool { return l.unverified == nil }

// canSign reports whether CheckSignatureFrom lets root's key verify a
// signature at all: its constraints (a CA, allowed to sign certificates)
// and a known key algorithm. A signature verified under a key verifies
// under a root of the same key exactly when this holds.
func canSign(root *x509.Certificate) bool {
	switch {
	case root.Version == 3 && !root.BasicConstraintsValid || root.BasicConstraintsValid && !root.IsCA:
		return false
	case root.KeyUsage != 0 && root.KeyUsage&x509.KeyUsageCertSign == 0:
		return false
	}
	return root.PublicKeyAlgorithm != x509.UnknownPublicKeyAlgorithm
}
