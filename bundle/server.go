package bundle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// The server credential.
//
// cert-manager's CA issuer gives each client a ca.crt holding only the root
// that signed its leaf. So while clients move from R1 to R2, some trust only
// R1 and some only R2, and the gateway must present one credential both
// accept. A self-signed R1 cannot be it: a client that trusts only R2 has no
// path to it, and Go's verifier refuses a cross-certificate with the same
// subject and key as the certificate it would extend. A leaf signed by R1,
// sent with a cross-certificate of R1 signed by R2, verifies for both:
//
//	leaf (signed by R1) -> R1 (trusted)                       clients of R1
//	leaf (signed by R1) -> R1 cross-signed by R2 -> R2        clients of R2
//
// So tls.crt is a leaf that dualca issues from the root it switches to (it
// reads that root's key anyway), followed by a chain of cross-certificates:
// each root that becomes current while the server has not moved certifies
// the root current before it (dualca holds the new root's key then):
//
//	leaf (R1) , R1 cross-signed by R2 , R2 cross-signed by R3
//
// A chain, not one cross-certificate per newer root all certifying R1:
// OpenSSL takes the first certificate that names the right issuer and key
// and never backtracks, so of several crosses of R1 it would try only one.
// Signatures are not deterministic, so what is issued is kept in tls.crt and
// reused; a decision issues only what is missing.
//
// The gateway Secret no longer carries a root's private key, only the
// leaf's: a gateway that leaks its Secret cannot sign client certificates.

// server is the credential found in, or decided for, tls.crt and tls.key.
type server struct {
	// root is the root the credential chains to: the "server root".
	root *x509.Certificate
	// leaf is the certificate presented; root itself in the legacy form.
	leaf *x509.Certificate
	// crosses are sent after the leaf: a chain of cross-certificates, the
	// first certifying root (same subject and key) signed by the root that
	// was current after it, and so on up to the current root.
	crosses []*x509.Certificate
	keyPEM  []byte
	// selfSigned is the legacy form, tls.crt being the root itself with the
	// root's key: kept only until a leaf can be issued from that key.
	selfSigned bool
}

// credential returns the server credential for serverRoot: the one found if
// it is usable, else a leaf issued now (from the current root's key, or from
// the server root's own key when tls.crt still holds the legacy self-signed
// form). It then carries a chain of cross-certificates from the server root
// to the current root, each root certified by the next one to have been
// current: clients that trust any root along it can verify the server.
func (p *planning) credential(found *server, serverRoot *x509.Certificate, kept []*x509.Certificate) *server {
	s := found
	if s == nil || s.selfSigned {
		keyPEM := p.root.KeyPEM // no usable credential: the server just moved to root
		if s != nil {
			keyPEM = s.keyPEM
		}
		issued, err := issueServer(serverRoot, keyPEM)
		if err != nil {
			// Fail closed: the root's key never goes where it was not. The
			// legacy form found stays (its key was there already); with
			// nothing found, no credential is written.
			p.emit(Event{Warning: true, Reason: ReasonServerCredentialFailed,
				Message: "could not issue a server certificate, keeping the credential found (none if none was): " + err.Error()})
			if s == nil {
				s = &server{root: serverRoot}
			}
			return s
		}
		s = issued
	}
	s.crosses = p.crossChain(s.root, s.crosses, kept)
	return s
}

// readServer returns the credential found in the gateway if it is usable:
// its first certificate matches tls.key and either is a CA (the legacy
// form) or is signed by one of roots, the recorded server root if it is one
// of them. Cross-certificates are kept when they certify the server root and
// are signed by one of roots. nil means there is no usable credential.
func readServer(gw Gateway, roots []*x509.Certificate, sigs *Signatures) *server {
	// As strict as KeyMatches, parsing tls.crt once: a chain of many links
	// is read at every reconcile.
	certs, err := gw.Parsed.certificates("tls.crt", gw.CertPEM)
	if err != nil {
		return nil
	}
	if key, err := gw.Parsed.privateKey("tls.key", gw.KeyPEM); err != nil || keyMismatch(certs[0], key) != "" {
		return nil
	}
	s := &server{leaf: certs[0], keyPEM: gw.KeyPEM}
	if isCA(s.leaf) {
		s.root, s.selfSigned = s.leaf, true
		return s
	}
	// CAs that share a subject and key (a root cert-manager re-issued with
	// the same key, a cross-certificate) all verify the leaf: the one dualca
	// recorded is the one it issued the leaf from.
	for _, r := range roots {
		if sigs.ChainsTo(s.leaf, r) && (s.root == nil || sigs.fingerprint(r) == gw.State.Server) {
			s.root = r
		}
	}
	if s.root == nil {
		return nil
	}
	for _, c := range certs[1:] {
		if isCA(c) {
			s.crosses = append(s.crosses, c) // credential() keeps those that link up
		}
	}
	return s
}

// certPEM is tls.crt: the leaf, then the cross-certificates.
func (s *server) certPEM(parsed *Parsed) []byte {
	return parsed.encode(s.chain())
}

// chain is the certificates of tls.crt; none when no credential could be made.
func (s *server) chain() []*x509.Certificate {
	if s.leaf == nil {
		return nil
	}
	return append([]*x509.Certificate{s.leaf}, s.crosses...)
}

// links is the number of cross-certificates of a credential found, 0 if
// none was.
func (s *server) links() int {
	if s == nil {
		return 0
	}
	return len(s.crosses)
}

// rootOrNil is the server root of a credential found, nil if none was.
func (s *server) rootOrNil() *x509.Certificate {
	if s == nil {
		return nil
	}
	return s.root
}

// issueServer makes a credential for root: a fresh ECDSA P-256 key and a
// leaf for it signed with rootKey, valid as long as the root. The leaf
// carries the root's names (SANs), so a client that checks them sees what
// the legacy plain copy showed, but not the root's subject: a leaf whose
// subject equals its issuer's is taken for self-signed by some verifiers
// (OpenSSL flags it from the names and key identifiers alone).
func issueServer(root *x509.Certificate, rootKeyPEM []byte) (*server, error) {
	signer, err := parsePrivateKey("tls.key", rootKeyPEM)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the server key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      serverSubject(root.Subject),
		DNSNames:     root.DNSNames,
		IPAddresses:  root.IPAddresses,
		URIs:         root.URIs,
		NotBefore:    root.NotBefore,
		NotAfter:     root.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, key.Public(), signer)
	if err != nil {
		return nil, fmt.Errorf("issuing the server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("reading the issued server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding the server key: %w", err)
	}
	return &server{root: root, leaf: leaf, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}, nil
}

// serverSubject is the root's subject with " server" added to its common
// name, or "dualca server" when it has none.
func serverSubject(root pkix.Name) pkix.Name {
	name := root
	name.ExtraNames = nil
	name.Names = nil
	if name.CommonName == "" {
		name.CommonName = "dualca server"
	} else {
		name.CommonName += " server"
	}
	return name
}

// crossSign certifies root's subject and key with signer, valid while both
// are. A client that trusts only signer can then verify a leaf of root, or
// a cross-certificate root signed. The authority key identifier is set by
// hand: Go leaves it out when subject and issuer names are equal, as they
// are for the successive roots of one cert-manager CA, and without it
// OpenSSL takes the cross-certificate for a self-signed one.
func crossSign(root, signer *x509.Certificate, signerKeyPEM []byte) (*x509.Certificate, error) {
	key, err := parsePrivateKey("tls.key", signerKeyPEM)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               root.Subject,
		SubjectKeyId:          root.SubjectKeyId,
		AuthorityKeyId:        signer.SubjectKeyId,
		NotBefore:             later(root.NotBefore, signer.NotBefore),
		NotAfter:              earlier(root.NotAfter, signer.NotAfter),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            -1, // a link may certify the next link
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, root.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("cross-signing root %s: %w", Short(Fingerprint(root)), err)
	}
	return x509.ParseCertificate(der)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

func isCA(c *x509.Certificate) bool { return c.BasicConstraintsValid && c.IsCA }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// certsIn reads every certificate of PEM, skipping blocks that are not one.
func certsIn(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for len(data) > 0 {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" || len(b.Headers) > 0 {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// VerifyServer checks a server credential the way a client that trusts
// only trust does: the first certificate of certPEM must be a leaf for
// server authentication that chains to trust, the rest of certPEM serving as
// intermediates, with no host name checked. now is the time of the check.
func VerifyServer(certPEM []byte, trust *x509.Certificate, now time.Time) error {
	chain, err := ParseCertificates("tls.crt", certPEM)
	if err != nil {
		return err
	}
	if isCA(chain[0]) {
		return fmt.Errorf("the server certificate %q is a CA, not a leaf", chain[0].Subject.CommonName)
	}
	opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	opts.Roots.AddCert(trust)
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err = chain[0].Verify(opts)
	return err
}
