package bundle

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"
)

// The server leaf profile: what the gateway's own certificate says and how
// long it lives. The leaf is the gateway's, not the root's: it carries the
// names clients dial (a CA usually has none to copy) and a lifetime of its
// own, so that a leaked tls.key is worth weeks, not the root's years.
//
// Rule: re-issue. The leaf is issued again, from the same root, when less
// than a third of its lifetime remains, when it is not valid now, or when
// it does not match the profile (names, key algorithm, lifetime). Only
// while the server root is the current root: dualca holds only the current
// root's key, so a re-issue never moves the server to another root. A
// rotation in progress ends with the switch, which issues a fresh leaf; the
// flags require the re-issue margin (a third of the lifetime) to exceed
// the grace period and the propagation delay, so a rotation that starts
// just before the margin switches before the leaf expires. Should a leaf
// come near its end anyway (a paused rotation), the server switches as it
// does for a server root about to expire (switch.go).

// KeyAlgorithm is the server key's algorithm, as the flag names it.
type KeyAlgorithm string

// The server key algorithms dualca issues with.
const (
	KeyECDSAP256 KeyAlgorithm = "ecdsa-p256"
	KeyRSA2048   KeyAlgorithm = "rsa-2048"
	KeyRSA3072   KeyAlgorithm = "rsa-3072"
	KeyEd25519   KeyAlgorithm = "ed25519"
)

// KeyAlgorithms are the values --server-key-algorithm takes, the default first.
func KeyAlgorithms() []KeyAlgorithm {
	return []KeyAlgorithm{KeyECDSAP256, KeyRSA2048, KeyRSA3072, KeyEd25519}
}

// DefaultServerLifetime is the server leaf's lifetime when not told: 90 days.
const DefaultServerLifetime = 90 * 24 * time.Hour

// serverBackdate is how long before its issuance a leaf is valid from: a
// client whose clock runs behind (within the skew accepted of roots)
// accepts it at once.
const serverBackdate = ClockSkew

// ServerProfile is what the server leaf is issued with.
type ServerProfile struct {
	// DNSNames and IPAddresses are the leaf's subject alternative names.
	// None is allowed (the operator asked for it with --server-without-names).
	DNSNames    []string
	IPAddresses []net.IP
	// KeyAlgorithm is the leaf key's algorithm ("": KeyECDSAP256).
	KeyAlgorithm KeyAlgorithm
	// Lifetime is how long a leaf is valid from its issuance, never beyond
	// its root's NotAfter (0: DefaultServerLifetime).
	Lifetime time.Duration
}

// DefaultServerProfile is the profile of a leaf with no names, the
// default algorithm and lifetime.
func DefaultServerProfile() ServerProfile {
	return ServerProfile{KeyAlgorithm: KeyECDSAP256, Lifetime: DefaultServerLifetime}
}

// withDefaults fills in the algorithm and lifetime when not given.
func (s ServerProfile) withDefaults() ServerProfile {
	if s.KeyAlgorithm == "" {
		s.KeyAlgorithm = KeyECDSAP256
	}
	if s.Lifetime <= 0 {
		s.Lifetime = DefaultServerLifetime
	}
	return s
}

// ReissueMargin is the remaining validity under which the leaf is issued
// again: a third of its lifetime.
func (s ServerProfile) ReissueMargin() time.Duration { return s.withDefaults().Lifetime / 3 }

// Mismatch says how leaf, signed by root, differs from the profile: its
// names, its key's algorithm or its lifetime; "" when it matches. The
// lifetime matches when the leaf is valid for exactly the lifetime from
// its issuance (after the backdate), or for less when its NotAfter is its
// root's.
func (s ServerProfile) Mismatch(leaf, root *x509.Certificate) string {
	s = s.withDefaults()
	var why []string
	if !sameSet(leaf.DNSNames, s.DNSNames) {
		why = append(why, fmt.Sprintf("DNS names %v, want %v", leaf.DNSNames, s.DNSNames))
	}
	if !sameSet(ipStrings(leaf.IPAddresses), ipStrings(s.IPAddresses)) {
		why = append(why, fmt.Sprintf("IP addresses %v, want %v", leaf.IPAddresses, s.IPAddresses))
	}
	if len(leaf.URIs)+len(leaf.EmailAddresses) > 0 {
		why = append(why, "names the profile does not give (URIs or e-mail addresses)")
	}
	if alg := KeyAlgorithmOf(leaf.PublicKey); alg != s.KeyAlgorithm {
		why = append(why, fmt.Sprintf("key algorithm %s, want %s", orUnknown(alg), s.KeyAlgorithm))
	}
	span, want := leaf.NotAfter.Sub(leaf.NotBefore), s.Lifetime+serverBackdate
	if span > want || (span < want && !leaf.NotAfter.Equal(root.NotAfter)) {
		why = append(why, fmt.Sprintf("lifetime %s, want %s", span-serverBackdate, s.Lifetime))
	}
	return strings.Join(why, ", ")
}

// KeyAlgorithmOf names the algorithm of a public key; "" when it is none
// dualca issues with.
func KeyAlgorithmOf(pub any) KeyAlgorithm {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return KeyECDSAP256
		}
	case *rsa.PublicKey:
		switch k.N.BitLen() {
		case 2048:
			return KeyRSA2048
		case 3072:
			return KeyRSA3072
		}
	case ed25519.PublicKey:
		return KeyEd25519
	}
	return ""
}

// generate makes a fresh key of the algorithm.
func (a KeyAlgorithm) generate() (crypto.Signer, error) {
	switch a {
	case KeyECDSAP256, "":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case KeyRSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case KeyRSA3072:
		return rsa.GenerateKey(rand.Reader, 3072)
	case KeyEd25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("unknown server key algorithm %q", a)
}

// keyUsage is the leaf's key usage: an RSA key may also encipher a TLS 1.2
// key exchange.
func (a KeyAlgorithm) keyUsage() x509.KeyUsage {
	if a == KeyRSA2048 || a == KeyRSA3072 {
		return x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	}
	return x509.KeyUsageDigitalSignature
}

// leafWindow is when a leaf issued at now is valid: from the backdate to
// the lifetime, never beyond the root. Whole seconds, as x509 keeps them,
// so that Mismatch reads back the lifetime exactly.
func (s ServerProfile) leafWindow(root *x509.Certificate, now time.Time) (notBefore, notAfter time.Time) {
	now = now.UTC().Truncate(time.Second)
	return now.Add(-serverBackdate), earlier(now.Add(s.withDefaults().Lifetime), root.NotAfter)
}

// reissueAt is when a leaf of root reaches the re-issue margin; zero when
// a leaf issued then would not outlive it (its NotAfter is the root's:
// the root's expiry is the rotation's business).
func (s ServerProfile) reissueAt(leaf, root *x509.Certificate) time.Time {
	if !leaf.NotAfter.Before(root.NotAfter) {
		return time.Time{}
	}
	return leaf.NotAfter.Add(-s.ReissueMargin())
}

// reissueAt is when the leaf of a credential on root reaches its re-issue
// margin under profile (nil: measured on the leaf itself); zero when
// there is no leaf, or it would not be issued again then.
func (s *serverCredential) reissueAt(root *x509.Certificate, profile *ServerProfile) time.Time {
	if s == nil || s.leaf == nil || s.selfSigned {
		return time.Time{}
	}
	return leafProfile(s.leaf, profile).reissueAt(s.leaf, root)
}

// leafProfile is profile, or when it is not known, one whose lifetime is
// the leaf's own.
func leafProfile(leaf *x509.Certificate, profile *ServerProfile) ServerProfile {
	if profile != nil {
		return *profile
	}
	return ServerProfile{Lifetime: leaf.NotAfter.Sub(leaf.NotBefore) - serverBackdate}
}

// reissueWhy says why a leaf found on the current root must be issued
// again now; "" when it is kept. A profile of nil (`dualca status`
// replaying a decision, which knows only the recorded timings) keeps a
// leaf whatever its names, and measures its lifetime on the leaf itself.
func reissueWhy(leaf, root *x509.Certificate, profile *ServerProfile, now time.Time) string {
	switch {
	case now.Before(leaf.NotBefore):
		return "it is not valid yet (the clock went back)"
	case now.After(leaf.NotAfter):
		return "it expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	p := leafProfile(leaf, profile)
	if profile != nil {
		if why := p.Mismatch(leaf, root); why != "" {
			return "it does not match the profile: " + why
		}
	}
	if at := p.reissueAt(leaf, root); !at.IsZero() && !now.Before(at) {
		return fmt.Sprintf("less than a third of its lifetime remains (it expires at %s)", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return ""
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func orUnknown(a KeyAlgorithm) string {
	if a == "" {
		return "unknown"
	}
	return string(a)
}
