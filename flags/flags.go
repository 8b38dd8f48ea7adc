// Package flags holds dualca's command-line options: one Options struct that
// registers its flags and validates them before anything talks to the cluster,
// so a typo in a Deployment fails the pod at once instead of half-rotating a CA.
package flags

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Options is everything dualca can be told on its command line.
type Options struct {
	// RootSecret is the cert-manager CA Secret that dualca follows (read only).
	RootSecret types.NamespacedName
	// GatewaySecret is the Secret dualca owns and the gateway reads.
	GatewaySecret types.NamespacedName
	// Legacy selects the old behaviour: the gateway Secret is a plain copy of
	// the root. It exists so that a rollout can be reverted with one flag.
	Legacy bool
	// PollInterval is how often root and gateway are re-read from the API
	// server, uncached, so a lost watch event is repaired within one interval.
	PollInterval time.Duration
	// TrustPropagationDelay is how long the gateway is given to load a bundle
	// that holds a new root before anything starts depending on it.
	TrustPropagationDelay time.Duration
	// ServerSwitchGrace is how long after a new root entered the bundle the
	// server credential is switched to it even if clients are not ready.
	ServerSwitchGrace time.Duration
	// ClientSelector selects the client Certificates whose renewal dualca
	// tracks and triggers; empty means clients are not tracked.
	ClientSelector labels.Selector
	// ClientNamespaces are where the client Certificates live (default: the
	// gateway Secret's namespace).
	ClientNamespaces []string
	// RenewalQPS and RenewalBurst pace client renewals: a token bucket
	// refilled at RenewalQPS per second, holding at most RenewalBurst.
	RenewalQPS   float64
	RenewalBurst int
	// MetricsBindAddress is where the Prometheus metrics are served ("0" disables).
	MetricsBindAddress string
	// HealthProbeBindAddress is where /healthz and /readyz are served ("0" disables).
	HealthProbeBindAddress string
	// LeaderElect turns on leader election; a sidecar next to a single gateway
	// does not need it, a Deployment with several replicas does.
	LeaderElect bool
	// LeaderElectionNamespace is where the election Lease lives (default: the
	// gateway Secret's namespace).
	LeaderElectionNamespace string
	// Zap holds controller-runtime's logging flags (--zap-log-level and friends).
	Zap ctrlzap.Options

	rootSecret, gatewaySecret string
	clientSelector            string
	clientNamespaces          string
}

// Defaults returns Options with the documented defaults.
func Defaults() Options {
	return Options{
		PollInterval:           5 * time.Minute,
		TrustPropagationDelay:  2 * time.Minute,
		ServerSwitchGrace:      7 * 24 * time.Hour,
		RenewalQPS:             5,
		RenewalBurst:           10,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		Zap:                    ctrlzap.Options{Development: false},
	}
}

// AddFlags registers every option on fs. The kubeconfig flag is
// controller-runtime's own, registered through its config package, which
// binds it to a package-level variable: parse one FlagSet at a time.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.rootSecret, "root-secret", o.rootSecret,
		"The cert-manager root CA Secret to follow, as NAMESPACE/NAME. Required.")
	fs.StringVar(&o.gatewaySecret, "gateway-secret", o.gatewaySecret,
		"The Secret the gateway reads (server pair + trust bundle), as NAMESPACE/NAME. Required.")
	fs.BoolVar(&o.Legacy, "cert-management-legacy", o.Legacy,
		"Use the legacy strategy: the gateway Secret is a plain copy of the root (rotations cause downtime). The revert path.")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval,
		"How often root and gateway are re-read uncached (jittered), bounding how long a lost watch event can leave the gateway behind.")
	fs.DurationVar(&o.TrustPropagationDelay, "trust-propagation-delay", o.TrustPropagationDelay,
		"Time given to the gateway to load a bundle holding a new root before clients are moved to it.")
	fs.DurationVar(&o.ServerSwitchGrace, "server-switch-grace", o.ServerSwitchGrace,
		"Time after a new root entered the bundle when the server credential is switched to it even if clients are not ready.")
	fs.StringVar(&o.clientSelector, "client-selector", o.clientSelector,
		"Label selector of the client Certificates whose renewal dualca tracks and triggers (e.g. dualca.io/client=agent). Empty: clients are not tracked, old roots stay until they expire.")
	fs.StringVar(&o.clientNamespaces, "client-namespaces", o.clientNamespaces,
		"Comma-separated namespaces of the client Certificates (default: the gateway Secret's namespace).")
	fs.Float64Var(&o.RenewalQPS, "renewal-qps", o.RenewalQPS,
		"Client renewals triggered per second at most (token bucket, jittered).")
	fs.IntVar(&o.RenewalBurst, "renewal-burst", o.RenewalBurst,
		"Client renewals that may be triggered at once before --renewal-qps paces them.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress,
		`Address of the Prometheus metrics endpoint; "0" disables it.`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress,
		`Address of the /healthz and /readyz endpoints; "0" disables them.`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Enable leader election, for more than one replica. Off for a sidecar.")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"Namespace of the leader election Lease (default: the gateway Secret's namespace).")
	config.RegisterFlags(fs)
	o.Zap.BindFlags(fs)
}

// Parse registers the flags on a fresh FlagSet, parses args and validates
// the result. It never touches the cluster.
func Parse(name string, args []string) (Options, error) {
	o := Defaults()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return o, o.Validate()
}

// Validate checks every option and names the flag at fault. It also turns
// the NAMESPACE/NAME strings into keys, so it must run before the keys are used.
func (o *Options) Validate() error {
	var errs []error
	for _, k := range []struct {
		flag string
		raw  string
		key  *types.NamespacedName
	}{
		{"root-secret", o.rootSecret, &o.RootSecret},
		{"gateway-secret", o.gatewaySecret, &o.GatewaySecret},
	} {
		if k.raw == "" && k.key.Name != "" {
			continue // set in code, not from a flag
		}
		key, err := ParseKey(k.flag, k.raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*k.key = key
	}
	if o.RootSecret.Name != "" && o.RootSecret == o.GatewaySecret {
		errs = append(errs, errors.New("--gateway-secret must differ from --root-secret: dualca never writes the root"))
	}
	positive := []struct {
		flag string
		d    time.Duration
	}{
		{"poll-interval", o.PollInterval},
		{"server-switch-grace", o.ServerSwitchGrace},
	}
	for _, p := range positive {
		if p.d <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", p.flag, p.d))
		}
	}
	if o.TrustPropagationDelay < 0 {
		errs = append(errs, fmt.Errorf("--trust-propagation-delay must not be negative, got %s", o.TrustPropagationDelay))
	}
	if o.ServerSwitchGrace > 0 && o.ServerSwitchGrace <= o.TrustPropagationDelay {
		errs = append(errs, fmt.Errorf("--server-switch-grace (%s) must be longer than --trust-propagation-delay (%s): the gateway must trust a root before it serves from it",
			o.ServerSwitchGrace, o.TrustPropagationDelay))
	}
	if o.clientSelector != "" {
		sel, err := labels.Parse(o.clientSelector)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("--client-selector=%q: %w", o.clientSelector, err))
		case sel.Empty():
			errs = append(errs, fmt.Errorf("--client-selector=%q selects everything; name the label of the client Certificates", o.clientSelector))
		default:
			o.ClientSelector = sel
		}
	}
	if o.clientNamespaces != "" {
		o.ClientNamespaces = nil
		for ns := range strings.SplitSeq(o.clientNamespaces, ",") {
			ns = strings.TrimSpace(ns)
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("--client-namespaces: namespace %q: %s", ns, strings.Join(msgs, "; ")))
				continue
			}
			if !slices.Contains(o.ClientNamespaces, ns) {
				o.ClientNamespaces = append(o.ClientNamespaces, ns)
			}
		}
		if o.ClientSelector == nil && o.clientSelector == "" {
			errs = append(errs, errors.New("--client-namespaces needs --client-selector: without it no client is tracked"))
		}
	}
	if len(o.ClientNamespaces) == 0 && o.GatewaySecret.Namespace != "" {
		o.ClientNamespaces = []string{o.GatewaySecret.Namespace}
	}
	if !(o.RenewalQPS > 0) || math.IsInf(o.RenewalQPS, 0) {
		errs = append(errs, fmt.Errorf("--renewal-qps must be a positive number, got %v", o.RenewalQPS))
	}
	if o.RenewalBurst < 1 {
		errs = append(errs, fmt.Errorf("--renewal-burst must be at least 1, got %d", o.RenewalBurst))
	}
	if o.LeaderElectionNamespace != "" {
		if msgs := validation.IsDNS1123Label(o.LeaderElectionNamespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-election-namespace %q: %s", o.LeaderElectionNamespace, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// ParseKey turns NAMESPACE/NAME into a key, checking both parts the way the
// API server would, so that a typo fails here and not as a 404 later.
func ParseKey(flagName, s string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, fmt.Errorf("--%s is required, as NAMESPACE/NAME", flagName)
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: want NAMESPACE/NAME", flagName, s)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: namespace %q: %s", flagName, s, ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: name %q: %s", flagName, s, name, strings.Join(msgs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
