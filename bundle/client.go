package bundle

import (
	"crypto/x509"
	"fmt"
	"time"
)

// Client is one selected client Certificate, with the certificates its
// Secret holds (as its CertificateRequest of the current revision tells
// them: dualca reads no client Secret).
type Client struct {
	// Name identifies the client in messages, as NAMESPACE/NAME.
	Name string
	// Leaf is the certificate in the client's tls.crt; nil when the Secret
	// is missing or unreadable.
	Leaf *x509.Certificate
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

func (c Client) on(sigs *Signatures, root *x509.Certificate, now time.Time) bool {
	return root != nil && bondOf(sigs, &c, root).on(&c, now)
}

func (c Client) uses(sigs *Signatures, root *x509.Certificate, now time.Time) bool {
	return root != nil && bondOf(sigs, &c, root).uses(&c, now)
}

// Clients is what dualca knows of the selected client Certificates.
type Clients struct {
	// Tracked is false when no client selector is configured: then nothing
	// is known of the clients, roots are kept until they expire and the
	// server switches only when the grace period ends.
	Tracked bool
	Items   []Client
	// Signatures remembers the signature checks of the decisions made over
	// these clients. The syncer keeps one for as long as it runs, so that a
	// reconcile at rest checks no signature again; nil, a decision checks
	// afresh, remembering only within itself.
	Signatures *Signatures
}

// Using counts the selected clients whose unexpired leaf chains to root,
// and the Unknown ones: those that still need, or may need, the gateway to
// trust it.
func (c Clients) Using(root *x509.Certificate, now time.Time) int {
	n := 0
	c.Signatures.eachBond(c.Items, root, func(cl *Client, b bond) {
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
	clients.Signatures.eachBond(clients.Items, root, func(c *Client, b bond) {
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
func ParseClient(tlsCrt, caCrt []byte) (leaf *x509.Certificate, ca []*x509.Certificate, problem string) {
	ca, caProblem := ParseClientCA(caCrt)
	leaf, leafProblem := ParseClientLeaf(nil, tlsCrt, ca)
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
// when unusable): the leaf, and what is wrong with it. The signature check
// against ca goes through sigs (nil: checked afresh), so that the
// decisions that ask the same of the same leaf later find it done.
//
// The leaf returned is not the whole parse: it holds what a decision reads
// of a client's leaf (its DER and the raw parts within it, its signature,
// its validity) and none of the parsed names, extensions and key, about
// half of a parsed certificate's memory, kept for every selected client.
func ParseClientLeaf(sigs *Signatures, tlsCrt []byte, ca []*x509.Certificate) (*x509.Certificate, string) {
	certs, err := ParseCertificates("tls.crt", tlsCrt)
	switch {
	case err != nil:
		return nil, err.Error()
	case certs[0].IsCA:
		return nil, "tls.crt: holds a CA certificate, not a client certificate"
	}
	leaf := clientLeaf(certs[0])
	for _, c := range ca {
		if sigs.ChainsTo(leaf, c) {
			return leaf, ""
		}
	}
	if ca != nil {
		return leaf, "tls.crt: not issued by any certificate of ca.crt"
	}
	return leaf, ""
}

// clientLeaf is what the decisions read of a client's leaf: its DER, the
// raw parts Signatures and bonds compare and hash (they share the DER's
// memory), the signature CheckSignatureFrom verifies, and its validity.
// Anything else a decision reads of a client's leaf must be added here.
func clientLeaf(c *x509.Certificate) *x509.Certificate {
	return &x509.Certificate{
		Raw:                     c.Raw,
		RawTBSCertificate:       c.RawTBSCertificate,
		RawSubjectPublicKeyInfo: c.RawSubjectPublicKeyInfo,
		RawSubject:              c.RawSubject,
		RawIssuer:               c.RawIssuer,
		Signature:               c.Signature,
		SignatureAlgorithm:      c.SignatureAlgorithm,
		PublicKeyAlgorithm:      c.PublicKeyAlgorithm,
		Version:                 c.Version,
		NotBefore:               c.NotBefore,
		NotAfter:                c.NotAfter,
		BasicConstraintsValid:   c.BasicConstraintsValid,
		IsCA:                    c.IsCA,
	}
}
