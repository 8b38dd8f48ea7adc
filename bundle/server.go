package bundle

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
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

// serverCredential is the credential found in, or decided for, tls.crt and tls.key.
type serverCredential struct {
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
// form). A leaf found on the current root is issued again when reissueWhy
// says so (profile.go); one on an older root is kept, its key being out of
// reach. It then carries a chain of cross-certificates from the server root
// to the current root, each root certified by the next one to have been
// current: clients that trust any root along it can verify the server.
func (p *planning) credential(found *serverCredential, serverRoot *x509.Certificate, kept []*x509.Certificate) *serverCredential {
	s := found
	switch {
	case s == nil || s.selfSigned:
		keyPEM := p.root.KeyPEM // no usable credential: the server just moved to root
		if s != nil {
			keyPEM = s.keyPEM
		}
		s = p.issue(s, serverRoot, keyPEM, "")
	case p.clients.Memory.fingerprint(serverRoot) == p.root.Fingerprint:
		if why := reissueWhy(s.leaf, serverRoot, p.t.Server, p.now); why != "" {
			s = p.issue(s, serverRoot, p.root.KeyPEM, why)
		}
	default:
		p.warnExpiring(s)
	}
	s.crosses = p.crossChain(s.root, s.crosses, kept)
	return s
}

// issue is a leaf of serverRoot signed with keyPEM, in place of found (nil
// if there was none). why, when not empty, is why a leaf found is issued
// again: that is told. A failure is told too, and keeps the credential found.
func (p *planning) issue(found *serverCredential, serverRoot *x509.Certificate, keyPEM []byte, why string) *serverCredential {
	profile := DefaultServerProfile()
	if p.t.Server != nil {
		profile = p.t.Server.withDefaults()
	}
	issued, err := issueServer(serverRoot, keyPEM, profile, p.now)
	if err != nil {
		// Fail closed: the root's key never goes where it was not. The
		// credential found stays (its key was there already); with
		// nothing found, no credential is written.
		p.emit(Event{Warning: true, Reason: ReasonServerCredentialFailed,
			Message: "could not issue a server certificate, keeping the credential found (none if none was): " + err.Error()})
		if found == nil {
			return &serverCredential{root: serverRoot}
		}
		return found
	}
	if why != "" {
		issued.crosses = found.crosses
		p.emit(Event{Reason: ReasonServerLeafReissued, Message: "server certificate issued again from root " + describe(serverRoot) + ": " + why})
	}
	return issued
}

// warnExpiring warns when the leaf found on an older root, whose key
// dualca does not hold, has expired. The switch rule (switch.go) moves the
// server to the current root, with a fresh leaf, before that: this is the
// alarm should it ever not.
func (p *planning) warnExpiring(s *serverCredential) {
	if s.leaf == nil || s.selfSigned || !p.now.After(s.leaf.NotAfter) {
		return
	}
	p.emit(Event{Warning: true, Reason: ReasonServerLeafExpiring,
		Message: "the server certificate expired at " + s.leaf.NotAfter.UTC().Format(time.RFC3339) + " and its root " + describe(s.root) +
			" is not the current one: dualca holds no key to issue it again, clients refuse the server until it switches"})
}

// readServer returns the credential found in the gateway if it is usable:
// its first certificate matches tls.key and either is a CA (the legacy
// form) or is signed by one of roots, the recorded server root if it is one
// of them. Cross-certificates are kept when they certify the server root and
// are signed by one of roots. nil means there is no usable credential.
func readServer(gw Gateway, roots []*x509.Certificate, sigs *Memory) *serverCredential {
	// As strict as KeyMatches, parsing tls.crt once: a chain of many links
	// is read at every reconcile.
	certs, err := gw.Parsed.certificates("tls.crt", gw.CertPEM)
	if err != nil {
		return nil
	}
	if key, err := gw.Parsed.privateKey("tls.key", gw.KeyPEM); err != nil || keyMismatch(certs[0], key) != "" {
		return nil
	}
	s := &serverCredential{leaf: certs[0], keyPEM: gw.KeyPEM}
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
func (s *serverCredential) certPEM(parsed *Parsed) []byte {
	return parsed.encode(s.chain())
}

// chain is the certificates of tls.crt; none when no credential could be made.
func (s *serverCredential) chain() []*x509.Certificate {
	if s.leaf == nil {
		return nil
	}
	return append([]*x509.Certificate{s.leaf}, s.crosses...)
}

// links is the number of cross-certificates of a credential found, 0 if
// none was.
func (s *serverCredential) links() int {
	if s == nil {
		return 0
	}
	return len(s.crosses)
}

// leafUntil is when the leaf of a credential found expires: zero if none
// was found, or it is the legacy form (the root itself, whose expiry is
// the server root's).
func (s *serverCredential) leafUntil() time.Time {
	if s == nil || s.leaf == nil || s.selfSigned {
		return time.Time{}
	}
	return s.leaf.NotAfter
}

// rootOrNil is the server root of a credential found, nil if none was.
func (s *serverCredential) rootOrNil() *x509.Certificate {
	if s == nil {
		return nil
	}
	return s.root
}

// issueServer makes a credential for root: a fresh key of the profile's
// algorithm and a leaf for it signed with rootKey, carrying the profile's
// names and valid for its lifetime from now, never beyond the root. Its
// subject is the root's with " server" added, not the root's own: a leaf
// whose subject equals its issuer's is taken for self-signed by some
// verifiers (OpenSSL flags it from the names and key identifiers alone).
func issueServer(root *x509.Certificate, rootKeyPEM []byte, profile ServerProfile, now time.Time) (*serverCredential, error) {
	signer, err := parsePrivateKey("tls.key", rootKeyPEM)
	if err != nil {
		return nil, err
	}
	profile = profile.withDefaults()
	key, err := profile.KeyAlgorithm.generate()
	if err != nil {
		return nil, fmt.Errorf("generating the server key: %w", err)
	}
	notBefore, notAfter := profile.leafWindow(root, now)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      serverSubject(root.Subject),
		DNSNames:     slices.Clone(profile.DNSNames),
		IPAddresses:  slices.Clone(profile.IPAddresses),
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     profile.KeyAlgorithm.keyUsage(),
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
	return &serverCredential{root: root, leaf: leaf, keyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}, nil
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
//
// The cross-certificate grants no more than root does: it carries root's
// name constraints and extended key usages, and a path length of below,
// the number of links under it in the server chain (0 for a link that
// certifies the server root, directly above the leaf), never more than
// root's own. A client that trusts signer can follow it to the server,
// and nowhere else: no CA root certified can hang further intermediates
// under it.
func crossSign(root, signer *x509.Certificate, signerKeyPEM []byte, below int) (*x509.Certificate, error) {
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
		ExtKeyUsage:           root.ExtKeyUsage,
		UnknownExtKeyUsage:    root.UnknownExtKeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            pathLenFor(root, below),
		MaxPathLenZero:        pathLenFor(root, below) == 0,
	}
	copyNameConstraints(tmpl, root)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, root.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("cross-signing root %s: %w", Short(Fingerprint(root)), err)
	}
	return x509.ParseCertificate(der)
}

// pathLenFor is the path length of a cross-certificate of root with below
// links under it: below, or root's own when that is smaller.
func pathLenFor(root *x509.Certificate, below int) int {
	if limit, ok := pathLen(root); ok && limit < below {
		return limit
	}
	return below
}

// pathLen is c's path length constraint, if it has one.
func pathLen(c *x509.Certificate) (int, bool) {
	if !c.BasicConstraintsValid || (c.MaxPathLen <= 0 && !c.MaxPathLenZero) {
		return 0, false
	}
	return max(c.MaxPathLen, 0), true
}

// copyNameConstraints gives tmpl every name constraint of root: a client
// that trusts the signer must not accept from root's key names that root
// itself could not certify.
func copyNameConstraints(tmpl, root *x509.Certificate) {
	tmpl.PermittedDNSDomainsCritical = root.PermittedDNSDomainsCritical
	tmpl.PermittedDNSDomains, tmpl.ExcludedDNSDomains = root.PermittedDNSDomains, root.ExcludedDNSDomains
	tmpl.PermittedIPRanges, tmpl.ExcludedIPRanges = root.PermittedIPRanges, root.ExcludedIPRanges
	tmpl.PermittedEmailAddresses, tmpl.ExcludedEmailAddresses = root.PermittedEmailAddresses, root.ExcludedEmailAddresses
	tmpl.PermittedURIDomains, tmpl.ExcludedURIDomains = root.PermittedURIDomains, root.ExcludedURIDomains
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
