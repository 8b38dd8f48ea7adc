// Package mtls is a real mutual-TLS gateway and real TLS clients for
// end-to-end tests of dualca.
//
// The Gateway stands for an Istio-like ingress gateway that receives its
// credential through SDS: it serves the gateway Secret's tls.crt (the whole
// chain) and tls.key, requires client certificates and verifies them against
// the Secret's ca.crt, and reloads all of it whenever the Secret changes. A
// Client stands for a remote agent with a cert-manager issued Secret of its
// own: it handshakes with the gateway again and again, each time on a new
// connection with a full handshake, verifying the gateway's chain against its
// own ca.crt. Both count what happened, so a test can assert that nobody
// failed during a rotation, and which error it was when somebody did.
//
// Secrets reach both through watches (see Secrets), never through polling, so
// that a test can run tens of clients on a small machine.
package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"regexp"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	certutil "k8s.io/client-go/util/cert"
)

// caKey is the Secret key of the trusted roots, as cert-manager and Istio's
// SDS name it.
const caKey = "ca.crt"

// maxErrorKinds bounds the distinct error texts kept per counter, so that a
// run with an unexpected stream of different errors cannot grow without end.
const maxErrorKinds = 16

// otherErrors counts the errors beyond maxErrorKinds.
const otherErrors = "(other errors)"

// credential is what one version of a kubernetes.io/tls Secret gives a TLS
// endpoint: its own pair and the roots it trusts, always from the same
// version, so that a rotation is never seen half applied.
type credential struct {
	version string              // the Secret's resourceVersion
	pair    tls.Certificate     // tls.crt (all of it) and tls.key
	chain   []*x509.Certificate // tls.crt parsed, leaf first
	cas     []*x509.Certificate // ca.crt parsed
	pool    *x509.CertPool      // cas as a pool
}

// parseCredential reads a Secret's tls.crt, tls.key and ca.crt; it fails
// unless all three are usable.
func parseCredential(s *corev1.Secret) (*credential, error) {
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s and %s: %w", s.Namespace, s.Name, corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	chain := make([]*x509.Certificate, 0, len(pair.Certificate))
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, corev1.TLSCertKey, err)
		}
		chain = append(chain, c)
	}
	cas, err := certutil.ParseCertsPEM(s.Data[caKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", s.Namespace, s.Name, caKey, err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	return &credential{version: s.ResourceVersion, pair: pair, chain: chain, cas: cas, pool: pool}, nil
}

// Loads counts what became of the versions of a Secret that a gateway or a
// client follows.
type Loads struct {
	// Reloads counts the versions loaded (the first included).
	Reloads int
	// LoadErrors counts the versions that could not be used; the last good
	// credential stayed in use.
	LoadErrors int
	// LastLoadError is the reason the last unusable version was refused.
	LastLoadError string
	// Deletions counts the times the Secret was deleted; the last good
	// credential stayed in use.
	Deletions int
}

// load takes version s of a Secret into use through current, unless it is
// the version in use (as version tells): build makes the TLS config for its
// credential. A deleted or unusable version leaves the last good one in
// use. It counts into loads; the caller holds the lock guarding them.
func load[T any](s *corev1.Secret, current *atomic.Pointer[T], version func(*T) string, build func(*credential) *T, loads *Loads) {
	if s == nil {
		loads.Deletions++
		return
	}
	if c := current.Load(); c != nil && version(c) == s.ResourceVersion {
		return
	}
	cred, err := parseCredential(s)
	if err != nil {
		loads.LoadErrors++
		loads.LastLoadError = err.Error()
		return
	}
	current.Store(build(cred))
	loads.Reloads++
}

// addrPattern matches IPv4 socket addresses, which differ on every
// connection (the ephemeral port) and would make every error text unique.
var addrPattern = regexp.MustCompile(`\d{1,3}(\.\d{1,3}){3}:\d+`)

// countError adds err to counts under its text, with addresses blanked.
func countError(counts map[string]int, err error) string {
	text := addrPattern.ReplaceAllString(err.Error(), "ADDR")
	if _, ok := counts[text]; !ok && len(counts) >= maxErrorKinds {
		text = otherErrors
	}
	counts[text]++
	return text
}

// addCounts adds the counts of from to to.
func addCounts(to, from map[string]int) {
	for k, n := range from {
		to[k] += n
	}
}

// cloneCounts copies counts, never returning nil so that callers can index
// the result without checking.
func cloneCounts(counts map[string]int) map[string]int {
	if counts == nil {
		return map[string]int{}
	}
	return maps.Clone(counts)
}
