package bundle_test

import (
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// The cross-certificates grant no more than the roots they certify, and
// the server credential verifies whatever the roots' and leaf's keys, with
// Go's verifier and OpenSSL's.

// verifiers checks a chain (leaf first, then what is sent after it) as a
// client trusting only one root does, with Go and with OpenSSL.
type verifiers struct {
	t       *testing.T
	openssl string
	dir     string
	at      time.Time
}

func newVerifiers(t *testing.T, at time.Time) *verifiers {
	return &verifiers{t: t, openssl: lookOpenSSL(t), dir: t.TempDir(), at: at}
}

// both is the error of each verifier, "" when it accepts.
func (v *verifiers) both(chain []*x509.Certificate, trust *x509.Certificate) (goErr, sslErr string) {
	return v.goVerify(chain, trust), v.sslVerify(chain, trust)
}

func (v *verifiers) goVerify(chain []*x509.Certificate, trust *x509.Certificate) string {
	opts := x509.VerifyOptions{Roots: x509.NewCertPool(), Intermediates: x509.NewCertPool(), CurrentTime: v.at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	opts.Roots.AddCert(trust)
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return err.Error()
	}
	return ""
}

func (v *verifiers) sslVerify(chain []*x509.Certificate, trust *x509.Certificate) string {
	write := func(name string, certs []*x509.Certificate) string {
		p := filepath.Join(v.dir, name)
		if err := os.WriteFile(p, bundle.Encode(certs), 0o600); err != nil {
			v.t.Fatal(err)
		}
		return p
	}
	args := []string{"verify", "-purpose", "sslserver", "-attime", itoa(v.at.Unix()), "-CAfile", write("trust.pem", []*x509.Certificate{trust})}
	if len(chain) > 1 {
		args = append(args, "-untrusted", write("untrusted.pem", chain[1:]))
	}
	out, err := exec.Command(v.openssl, append(args, write("leaf.pem", chain[:1]))...).CombinedOutput() //nolint:gosec // G204: the test's own openssl
	if err != nil {
		return strings.TrimSpace(string(out))
	}
	return ""
}

// accepted expects both verifiers to accept chain for a client trusting trust.
func (v *verifiers) accepted(g Gomega, chain []*x509.Certificate, trust *x509.Certificate, what string) {
	goErr, sslErr := v.both(chain, trust)
	g.Expect(goErr).To(BeEmpty(), "Go: %s", what)
	g.Expect(sslErr).To(BeEmpty(), "OpenSSL: %s", what)
}

// refused expects both verifiers to refuse chain, OpenSSL saying goErr.
func (v *verifiers) refused(g Gomega, chain []*x509.Certificate, trust *x509.Certificate, sslSays, what string) {
	goErr, sslErr := v.both(chain, trust)
	g.Expect(goErr).NotTo(BeEmpty(), "Go: %s", what)
	g.Expect(sslErr).To(ContainSubstring(sslSays), "OpenSSL: %s", what)
}

// rotations plans a steady gateway on roots[0], then a rotation to each
// next root at the same moment, the server staying on roots[0]: the
// chain is the leaf and one link per root after the first.
func rotations(t *testing.T, timings bundle.Timings, roots ...*certs.CA) bundle.Decision {
	d := bundle.Plan(bundle.Gateway{}, validRoot(t, roots[0], testNow), bundle.Clients{}, timings, testNow)
	for _, r := range roots[1:] {
		d = bundle.Plan(written(d), validRoot(t, r, testNow), bundle.Clients{}, timings, testNow)
	}
	return d
}

func sameSubjectRoot(t *testing.T, i int, opts certs.Options) *certs.CA {
	opts.IsCA = true
	return certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Duration(10-i)*time.Hour), testNow.Add(100*time.Hour), opts, nil)
}

// TestCrossCertificatesHaveThePathLengthOfTheLinksBelowThem: in chains of
// one to three links, each link allows as many intermediates below it as
// there are links below it, and clients trusting any root verify the
// server with Go and OpenSSL.
func TestCrossCertificatesHaveThePathLengthOfTheLinksBelowThem(t *testing.T) {
	t.Parallel()
	roots := []*certs.CA{}
	for i := range 4 {
		roots = append(roots, sameSubjectRoot(t, i, certs.Options{}))
	}
	v := newVerifiers(t, testNow.Add(time.Second))
	for links := 1; links <= 3; links++ {
		t.Run(fmt.Sprintf("%d links", links), func(t *testing.T) {
			g := NewWithT(t)
			d := rotations(t, withProfile(testProfile), roots[:links+1]...)
			chain := parsed(t, d.CertPEM)
			g.Expect(chain).To(HaveLen(links + 1))
			for i, c := range chain[1:] {
				g.Expect(c.MaxPathLen).To(Equal(i), "link %d certifies root %d: %d links below it", i+1, i+1, i)
				g.Expect(c.MaxPathLenZero).To(Equal(i == 0))
				g.Expect(c.CheckSignatureFrom(roots[i+1].Cert)).To(Succeed())
			}
			for i, r := range roots[:links+1] {
				v.accepted(g, chain, r.Cert, fmt.Sprintf("a client trusting only root %d of %d", i+1, links+1))
			}
		})
	}
}

// TestACrossCertificateCannotCarryFurtherIntermediates: whoever holds an
// older root's key (a key retired, less guarded) cannot hang an
// intermediate CA of their own under that root's cross-certificate and be
// believed by clients of the newer roots; the link above allows one
// intermediate below it, and refuses two.
func TestACrossCertificateCannotCarryFurtherIntermediates(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r1, r2, r3 := sameSubjectRoot(t, 0, certs.Options{}), sameSubjectRoot(t, 1, certs.Options{}), sameSubjectRoot(t, 2, certs.Options{})
	chain := parsed(t, rotations(t, withProfile(testProfile), r1, r2, r3).CertPEM)
	r1x2, r2x3 := chain[1], chain[2]
	v := newVerifiers(t, testNow.Add(time.Second))
	ca := func(cn string, parent *certs.CA) *certs.CA {
		return certs.MustNew(t, cn, testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true}, parent)
	}
	leaf := func(parent *certs.CA) *x509.Certificate {
		return certs.MustNew(t, "gw.agents.example.com", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{DNSNames: []string{"gw.agents.example.com"}}, parent).Cert
	}

	underR1 := ca("intermediate of r1", r1)
	forged := []*x509.Certificate{leaf(underR1), underR1.Cert, r1x2}
	v.accepted(g, forged[:2], r1.Cert, "r1's own clients: r1 itself allows intermediates (the contrast)")
	v.refused(g, forged, r2.Cert, "path length constraint exceeded", "r2's clients through r1's cross-certificate (path length 0)")

	underR2 := ca("intermediate of r2", r2)
	oneBelow := []*x509.Certificate{leaf(underR2), underR2.Cert, r2x3}
	v.accepted(g, oneBelow, r3.Cert, "one intermediate below r2's cross-certificate (path length 1): as many as links below it")
	deeper := ca("intermediate of the intermediate", underR2)
	twoBelow := []*x509.Certificate{leaf(deeper), deeper.Cert, underR2.Cert, r2x3}
	v.refused(g, twoBelow, r3.Cert, "path length constraint exceeded", "two intermediates below r2's cross-certificate")
}

// TestARootsPathLengthCapsItsCrossCertificates: a cross-certificate never
// allows more than the root it certifies.
func TestARootsPathLengthCapsItsCrossCertificates(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	zero := certs.Options{Edit: func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 0, true }}
	r1, r2, r3 := sameSubjectRoot(t, 0, certs.Options{}), sameSubjectRoot(t, 1, zero), sameSubjectRoot(t, 2, certs.Options{})
	chain := parsed(t, rotations(t, withProfile(testProfile), r1, r2, r3).CertPEM)
	g.Expect(chain).To(HaveLen(3))
	g.Expect(chain[2].MaxPathLen).To(Equal(0), "r2 allows no intermediate: its cross-certificate neither, though one link is below it")
	g.Expect(chain[2].MaxPathLenZero).To(BeTrue())
}

// TestANameConstrainedRootStaysConstrainedThroughItsCross: the cross-
// certificate carries every name constraint of the root it certifies, so
// that clients of the newer root accept from the older root's key only
// the names the older root allows.
func TestANameConstrainedRootStaysConstrainedThroughItsCross(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	_, tenNet, _ := net.ParseCIDR("10.0.0.0/8")
	_, badNet, _ := net.ParseCIDR("10.66.0.0/16")
	constrained := certs.Options{Edit: func(c *x509.Certificate) {
		c.PermittedDNSDomainsCritical = true
		c.PermittedDNSDomains, c.ExcludedDNSDomains = []string{"agents.example.com"}, []string{"bad.agents.example.com"}
		c.PermittedIPRanges, c.ExcludedIPRanges = []*net.IPNet{tenNet}, []*net.IPNet{badNet}
		c.PermittedEmailAddresses, c.ExcludedEmailAddresses = []string{"agents.example.com"}, []string{"root@agents.example.com"}
		c.PermittedURIDomains, c.ExcludedURIDomains = []string{".agents.example.com"}, []string{"bad.agents.example.com"}
	}}
	r1, r2 := sameSubjectRoot(t, 0, constrained), sameSubjectRoot(t, 1, certs.Options{})
	d := rotations(t, withProfile(testProfile), r1, r2)
	chain := parsed(t, d.CertPEM)
	g.Expect(chain).To(HaveLen(2))
	cross := chain[1]
	g.Expect(cross.PermittedDNSDomainsCritical).To(BeTrue())
	g.Expect([][]string{cross.PermittedDNSDomains, cross.ExcludedDNSDomains, cross.PermittedEmailAddresses, cross.ExcludedEmailAddresses, cross.PermittedURIDomains, cross.ExcludedURIDomains}).
		To(Equal([][]string{r1.Cert.PermittedDNSDomains, r1.Cert.ExcludedDNSDomains, r1.Cert.PermittedEmailAddresses, r1.Cert.ExcludedEmailAddresses, r1.Cert.PermittedURIDomains, r1.Cert.ExcludedURIDomains}))
	g.Expect(fmt.Sprint(cross.PermittedIPRanges, cross.ExcludedIPRanges)).To(Equal(fmt.Sprint(r1.Cert.PermittedIPRanges, r1.Cert.ExcludedIPRanges)))

	v := newVerifiers(t, testNow.Add(time.Second))
	v.accepted(g, chain, r2.Cert, "the gateway's names are within r1's constraints")
	leafOf := func(opts certs.Options) *x509.Certificate {
		return certs.MustNew(t, "forged", testNow.Add(-time.Hour), testNow.Add(time.Hour), opts, r1).Cert
	}
	u, _ := url.Parse("https://bad.agents.example.com/")
	for what, opts := range map[string]certs.Options{
		"a DNS name outside the permitted domain": {DNSNames: []string{"evil.example.org"}},
		"an excluded DNS name":                    {DNSNames: []string{"x.bad.agents.example.com"}},
		"an IP address outside the permitted net": {Edit: func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("192.168.0.1")} }},
		"an excluded IP address":                  {Edit: func(c *x509.Certificate) { c.IPAddresses = []net.IP{net.ParseIP("10.66.0.1")} }},
		"an excluded URI":                         {Edit: func(c *x509.Certificate) { c.URIs = []*url.URL{u} }},
		"an excluded e-mail address":              {Edit: func(c *x509.Certificate) { c.EmailAddresses = []string{"root@agents.example.com"} }},
	} {
		forged := []*x509.Certificate{leafOf(opts), cross}
		v.refused(g, forged, r2.Cert, "", "r2's clients, a leaf of r1's key with "+what)
		g.Expect(v.sslVerify(forged, r2.Cert)).NotTo(BeEmpty(), "OpenSSL refuses %s", what)
	}
}

// TestEveryRootAndLeafKeyAlgorithmVerifies: roots of ECDSA P-256, RSA-2048,
// RSA-3072 and Ed25519 keys are accepted, issue leaves of every algorithm
// the profile offers and cross-sign one another, and Go and OpenSSL
// verify the result for clients of either root.
func TestEveryRootAndLeafKeyAlgorithmVerifies(t *testing.T) {
	t.Parallel()
	kinds := []string{certs.KeyECDSA, certs.KeyRSA, certs.KeyRSA3072, certs.KeyEd25519}
	roots := make([]*certs.CA, len(kinds))
	for i, k := range kinds {
		roots[i] = sameSubjectRoot(t, i, certs.Options{KeyType: k})
	}
	v := newVerifiers(t, testNow.Add(time.Second))
	for i, root := range roots {
		t.Run(kinds[i]+" root", func(t *testing.T) {
			g := NewWithT(t)
			_, err := bundle.ValidateRoot(root.CertPEM, root.KeyPEM, root.CertPEM, testNow)
			g.Expect(err).NotTo(HaveOccurred(), "a %s root is accepted", kinds[i])
			for _, alg := range bundle.KeyAlgorithms() {
				p := testProfile
				p.KeyAlgorithm = alg
				d := bundle.Plan(bundle.Gateway{}, validRoot(t, root, testNow), bundle.Clients{}, withProfile(p), testNow)
				g.Expect(bundle.KeyAlgorithmOf(d.Leaf.PublicKey)).To(Equal(alg))
				g.Expect(bundle.KeyMatches(d.CertPEM, d.KeyPEM)).To(BeTrue())
				v.accepted(g, parsed(t, d.CertPEM), root.Cert, fmt.Sprintf("a %s leaf of a %s root", alg, kinds[i]))
			}
			next := roots[(i+1)%len(roots)]
			p := testProfile
			p.KeyAlgorithm = bundle.KeyAlgorithms()[i]
			d := rotations(t, withProfile(p), root, next)
			chain := parsed(t, d.CertPEM)
			g.Expect(chain).To(HaveLen(2), "the leaf and the cross-certificate")
			for _, trust := range []*certs.CA{root, next} {
				v.accepted(g, chain, trust.Cert, fmt.Sprintf("a %s root cross-signed by a %s root, the client trusting %s",
					kinds[i], kinds[(i+1)%len(roots)], bundle.Short(bundle.Fingerprint(trust.Cert))))
			}
		})
	}
}

// TestALinkWithTooShortAPathLengthIsNotFollowed: a cross-certificate found
// in tls.crt whose path length does not reach its place in the path (made
// by hand with the current root's key) is left out, and the current root
// certifies that place again, so the chain still verifies.
func TestALinkWithTooShortAPathLengthIsNotFollowed(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r1, r2, r3 := sameSubjectRoot(t, 0, certs.Options{}), sameSubjectRoot(t, 1, certs.Options{}), sameSubjectRoot(t, 2, certs.Options{})
	d := rotations(t, withProfile(testProfile), r1, r2, r3)
	chain := parsed(t, d.CertPEM)
	g.Expect(chain).To(HaveLen(3))
	short := certs.MustNew(t, "agents-root-ca", testNow.Add(-time.Hour), testNow.Add(50*time.Hour), certs.Options{IsCA: true, Key: r2.Key,
		Edit: func(c *x509.Certificate) {
			c.Subject, c.SubjectKeyId, c.AuthorityKeyId = r2.Cert.Subject, r2.Cert.SubjectKeyId, r3.Cert.SubjectKeyId
			c.MaxPathLen, c.MaxPathLenZero = 0, true
		}}, r3).Cert
	g.Expect(short.CheckSignatureFrom(r3.Cert)).To(Succeed())
	gw := written(d)
	gw.CertPEM = bundle.Encode([]*x509.Certificate{chain[0], chain[1], short})
	again := bundle.Plan(gw, validRoot(t, r3, testNow), bundle.Clients{}, withProfile(testProfile), testNow)
	links := parsed(t, again.CertPEM)[1:]
	g.Expect(links).To(HaveLen(2))
	g.Expect(links[1].Raw).NotTo(Equal(short.Raw), "the link of path length 0 above another link is not followed")
	g.Expect(links[1].MaxPathLen).To(Equal(1))
	v := newVerifiers(t, testNow.Add(time.Second))
	for _, r := range []*certs.CA{r1, r2, r3} {
		v.accepted(g, parsed(t, again.CertPEM), r.Cert, "a client of "+bundle.Short(bundle.Fingerprint(r.Cert)))
	}
}
