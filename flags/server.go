package flags

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dualca/dualca/bundle"
)

// Server is the server leaf profile as the command line gives it: the
// gateway's names, its key algorithm and the leaf's lifetime.
type Server struct {
	// DNSNames and IPAddresses are the names the leaf carries.
	DNSNames    []string
	IPAddresses []net.IP
	// KeyAlgorithm is the leaf key's algorithm.
	KeyAlgorithm bundle.KeyAlgorithm
	// Lifetime is the leaf's lifetime, never beyond its root's.
	Lifetime time.Duration
	// WithoutNames: the operator asked for a leaf with no names. Without
	// it, a zero-downtime dualca given no names refuses to start: a leaf
	// no client can check a host name against is a choice, not a default.
	WithoutNames bool

	// The flags as given, which parse turns into the fields above.
	dnsNames, ipAddresses, keyAlgorithm string
}

// The bounds of --server-lifetime: an hour at least, so that no reconcile
// pace re-issues it in a loop, and a year at most, as a leaked key should
// not be worth more.
const (
	MinServerLifetime = time.Hour
	MaxServerLifetime = 366 * 24 * time.Hour
)

// DefaultServer is the profile of the documented defaults.
func DefaultServer() Server {
	return Server{KeyAlgorithm: bundle.KeyECDSAP256, Lifetime: bundle.DefaultServerLifetime, keyAlgorithm: string(bundle.KeyECDSAP256)}
}

// addFlags registers the --server-* flags of the leaf profile.
func (s *Server) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.dnsNames, "server-dns-names", s.dnsNames,
		"Comma-separated DNS names of the gateway's server certificate (wildcards allowed, e.g. gw.example.com,*.gw.example.com).")
	fs.StringVar(&s.ipAddresses, "server-ip-addresses", s.ipAddresses,
		"Comma-separated IP addresses of the gateway's server certificate.")
	fs.StringVar(&s.keyAlgorithm, "server-key-algorithm", s.keyAlgorithm,
		"Key algorithm of the server certificate: "+strings.Join(algorithmNames(), ", ")+".")
	fs.DurationVar(&s.Lifetime, "server-lifetime", s.Lifetime,
		"Lifetime of the server certificate (never beyond its root's); it is issued again when a third remains.")
	fs.BoolVar(&s.WithoutNames, "server-without-names", s.WithoutNames,
		"Issue the server certificate with no DNS name or IP address; without it, one of --server-dns-names or --server-ip-addresses is required.")
}

// parse turns the flags as given into the typed fields. It returns the
// flags it could not parse, whose errors it returns too.
func (s *Server) parse() (map[string]bool, error) {
	malformed := map[string]bool{}
	var errs []error
	s.DNSNames, s.IPAddresses = nil, nil
	for _, name := range splitList(s.dnsNames) {
		msgs := validation.IsDNS1123Subdomain(name)
		if strings.HasPrefix(name, "*.") {
			msgs = validation.IsWildcardDNS1123Subdomain(name)
		}
		if len(msgs) > 0 {
			malformed["server-dns-names"] = true
			errs = append(errs, fmt.Errorf("--server-dns-names: %q is not a DNS name: %s", name, strings.Join(msgs, "; ")))
			continue
		}
		s.DNSNames = append(s.DNSNames, name)
	}
	for _, v := range splitList(s.ipAddresses) {
		ip := net.ParseIP(v)
		if ip == nil {
			malformed["server-ip-addresses"] = true
			errs = append(errs, fmt.Errorf("--server-ip-addresses: %q is not an IP address", v))
			continue
		}
		if !slices.ContainsFunc(s.IPAddresses, ip.Equal) {
			s.IPAddresses = append(s.IPAddresses, ip)
		}
	}
	s.KeyAlgorithm = bundle.KeyAlgorithm(strings.TrimSpace(s.keyAlgorithm))
	if !slices.Contains(bundle.KeyAlgorithms(), s.KeyAlgorithm) {
		malformed["server-key-algorithm"] = true
		errs = append(errs, fmt.Errorf("--server-key-algorithm=%q: want one of %s", s.keyAlgorithm, strings.Join(algorithmNames(), ", ")))
	}
	return malformed, errors.Join(errs...)
}

// validate checks the profile. credentialWritten says whether dualca
// writes a server credential at all (not in the legacy strategy, which
// copies the root's): only then are names required and the lifetime
// weighed against the rotation's timings.
func (s *Server) validate(credentialWritten bool, delay, grace time.Duration, malformed map[string]bool) error {
	var errs []error
	if !slices.Contains(bundle.KeyAlgorithms(), s.KeyAlgorithm) && !malformed["server-key-algorithm"] {
		errs = append(errs, fmt.Errorf("--server-key-algorithm=%q: want one of %s", s.KeyAlgorithm, strings.Join(algorithmNames(), ", ")))
	}
	if s.Lifetime < MinServerLifetime || s.Lifetime > MaxServerLifetime {
		errs = append(errs, fmt.Errorf("--server-lifetime must be between %s and %s, got %s", MinServerLifetime, MaxServerLifetime, s.Lifetime))
	}
	if !credentialWritten {
		return errors.Join(errs...)
	}
	named := len(s.DNSNames)+len(s.IPAddresses) > 0
	if !named && !s.WithoutNames && !malformed["server-dns-names"] && !malformed["server-ip-addresses"] {
		errs = append(errs, errors.New("--server-dns-names or --server-ip-addresses is required: they are the names clients check the gateway's certificate against "+
			"(give --server-without-names for a certificate with none)"))
	}
	if named && s.WithoutNames {
		errs = append(errs, errors.New("--server-without-names contradicts --server-dns-names and --server-ip-addresses: give one or the other"))
	}
	if margin := s.Lifetime / 3; margin <= grace+delay {
		errs = append(errs, fmt.Errorf("--server-lifetime %s is too short: a third of it (%s, when the certificate is issued again) must exceed --server-switch-grace plus --trust-propagation-delay (%s), "+
			"so that a rotation starting just before that moment switches the server, with a fresh certificate, before it expires (dualca holds only the current root's key and cannot issue it again from an older one)",
			s.Lifetime, margin, grace+delay))
	}
	return errors.Join(errs...)
}

// Profile is the bundle's view of the profile.
func (s Server) Profile() bundle.ServerProfile {
	return bundle.ServerProfile{DNSNames: slices.Clone(s.DNSNames), IPAddresses: slices.Clone(s.IPAddresses),
		KeyAlgorithm: s.KeyAlgorithm, Lifetime: s.Lifetime}
}

// syncRaw sets the string flags from the typed fields (see Args).
func (s *Server) syncRaw() {
	s.dnsNames = strings.Join(s.DNSNames, ",")
	s.ipAddresses = strings.Join(ipStrings(s.IPAddresses), ",")
	s.keyAlgorithm = string(s.KeyAlgorithm)
}

// splitList is a comma list without blanks.
func splitList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func algorithmNames() []string {
	var out []string
	for _, a := range bundle.KeyAlgorithms() {
		out = append(out, string(a))
	}
	return out
}
