// Package flags holds dualca's command lines: the Options of the main
// command and those of the operator's commands (control.go), each
// registering its flags and validating them before anything talks to the
// cluster, so a typo in a Deployment fails the pod at once instead of
// half-rotating a CA.
package flags

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/syncer"
)

// Options is everything dualca can be told on its command line.
type Options struct {
	// Objects are the root and gateway Secrets and the client Certificates.
	Objects
	// Targets are the shapes the rotation is written in.
	Targets
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
	// RenewalQPS and RenewalBurst pace client renewals: a token bucket
	// refilled at RenewalQPS per second, holding at most RenewalBurst.
	RenewalQPS   float64
	RenewalBurst int
	// MetricsBindAddress is where the Prometheus metrics are served ("0" disables).
	MetricsBindAddress string
	// HealthProbeBindAddress is where /healthz and /readyz are served ("0" disables).
	HealthProbeBindAddress string
	// LeaderElect turns on leader election: needed by a Deployment with
	// several replicas, and by a sidecar, whose replicas are the gateway's.
	LeaderElect bool
	// LeaderElectionNamespace is where the election Lease lives (default: the
	// gateway Secret's namespace).
	LeaderElectionNamespace string
	// Server is the server leaf profile (server.go).
	Server Server
	// Zap holds controller-runtime's logging flags (--zap-log-level and friends).
	Zap ctrlzap.Options
}

// Defaults returns Options with the documented defaults.
func Defaults() Options {
	return Options{
		Targets:                defaultTargets(),
		PollInterval:           5 * time.Minute,
		TrustPropagationDelay:  2 * time.Minute,
		ServerSwitchGrace:      7 * 24 * time.Hour,
		RenewalQPS:             5,
		RenewalBurst:           10,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		Server:                 DefaultServer(),
		Zap:                    ctrlzap.Options{Development: false},
	}
}

// AddFlags registers every option on fs; Parse turns what the string flags
// hold into the typed fields. The kubeconfig flag is controller-runtime's
// own, registered through its config package, which binds it to a
// package-level variable: parse one FlagSet at a time.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	o.addOwnFlags(fs)
	config.RegisterFlags(fs)
	o.Zap.BindFlags(fs)
}

// addOwnFlags registers the flags that are dualca's, not its libraries'.
func (o *Options) addOwnFlags(fs *flag.FlagSet) {
	o.addSecretFlags(fs, "The cert-manager root CA Secret to follow, as NAMESPACE/NAME. Required.",
		"The Secret the gateway reads (server pair + trust bundle), as NAMESPACE/NAME. Required unless --bundle-targets are given.")
	o.addTargetFlags(fs)
	fs.BoolVar(&o.Legacy, "cert-management-legacy", o.Legacy,
		"Use the legacy strategy: the gateway Secret is a plain copy of the root (rotations cause downtime). The revert path.")
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval,
		"How often root and gateway are re-read uncached (jittered), bounding how long a lost watch event can leave the gateway behind.")
	fs.DurationVar(&o.TrustPropagationDelay, "trust-propagation-delay", o.TrustPropagationDelay,
		"Time given to the gateway to load a bundle holding a new root before clients are moved to it.")
	fs.DurationVar(&o.ServerSwitchGrace, "server-switch-grace", o.ServerSwitchGrace,
		"Time after a new root entered the bundle when the server credential is switched to it even if clients are not ready.")
	o.addStateFlags(fs)
	o.addClientFlags(fs, "Label selector of the client Certificates whose renewal dualca tracks and triggers (e.g. dualca.io/client=agent). "+
		"With --client-secret-selector or --client-issuer, all must match; none given: clients are not tracked, old roots stay until they expire.")
	fs.Float64Var(&o.RenewalQPS, "renewal-qps", o.RenewalQPS,
		"Client renewals triggered per second at most (token bucket, jittered).")
	fs.IntVar(&o.RenewalBurst, "renewal-burst", o.RenewalBurst,
		"Client renewals that may be triggered at once before --renewal-qps paces them.")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress,
		`Address of the Prometheus metrics endpoint; "0" disables it.`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress,
		`Address of the /healthz and /readyz endpoints; "0" disables them.`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Enable leader election, for more than one replica; a sidecar needs it too (its replicas are the gateway's).")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace,
		"Namespace of the leader election Lease (default: the gateway Secret's namespace).")
	o.Server.addFlags(fs)
}

// Parse registers the flags on a fresh FlagSet, parses args, turns the
// string flags into typed options and validates the result, reporting every
// problem at once. It never touches the cluster, and prints nothing: the
// command prints the error, then its usage.
func Parse(name string, args []string) (Options, error) {
	o := Defaults()
	fs := newFlagSet(name)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	malformed, err := o.parse()
	serverMalformed, serverErr := o.Server.parse()
	maps.Copy(malformed, serverMalformed)
	return o, errors.Join(err, serverErr, o.validate(malformed))
}

// parse turns the flags as given into typed options. Without a gateway
// Secret, the first bundle target names the rotation: the defaults of the
// record, the status ConfigMap and the client namespaces derive from it.
func (o *Options) parse() (map[string]bool, error) {
	malformed, err := o.Objects.parse()
	err = errors.Join(err, o.Targets.parse(malformed))
	if o.GatewaySecret.Name == "" && len(o.BundleTargets) > 0 {
		o.gatewayOptional = true
		anchor := o.anchor()
		if o.StateSecret.Name == "" {
			o.StateSecret = DefaultStateSecret(anchor)
		}
		if o.StatusConfigMap.Name == "" {
			o.StatusConfigMap = DefaultStatusConfigMap(anchor, o.StateSecret)
		}
		if len(o.ClientNamespaces) == 0 {
			o.ClientNamespaces = []string{anchor.Namespace}
		}
	}
	return malformed, err
}

// Validate checks every option and names the flag at fault. It changes
// nothing: Parse has turned the strings of the command line into options.
func (o *Options) Validate() error {
	return o.validate(nil)
}

// validate is Validate, leaving out that a flag is missing when it was
// given but could not be parsed (that was said already).
func (o *Options) validate(malformed map[string]bool) error {
	o.gatewayOptional = o.GatewaySecret.Name == "" && len(o.BundleTargets) > 0
	// A server credential is written only by the zero-downtime strategy,
	// and only to a gateway Secret: bundle targets hold none.
	credential := !o.Legacy && o.GatewaySecret.Name != ""
	errs := []error{o.Objects.validate(true, malformed), o.Targets.validate(o.Objects),
		o.Server.validate(credential, o.TrustPropagationDelay, o.ServerSwitchGrace, malformed)}
	for _, p := range []struct {
		flag string
		d    time.Duration
	}{{"poll-interval", o.PollInterval}, {"server-switch-grace", o.ServerSwitchGrace}} {
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

// Syncer is what the syncer needs of the options. The caller adds what no
// flag sets: the metrics, the logger and, in tests, a clock.
func (o Options) Syncer() syncer.Options {
	return syncer.Options{
		RootSecret:              o.RootSecret,
		GatewaySecret:           o.GatewaySecret,
		GatewayForm:             o.GatewayForm,
		BundleTargets:           o.BundleTargets,
		BundleKey:               o.BundleKey,
		BundleSecretType:        o.BundleSecretType,
		IssuingSecret:           o.IssuingSecret,
		StateSecret:             o.StateSecret,
		StatusConfigMap:         o.StatusConfigMap,
		Legacy:                  o.Legacy,
		PollInterval:            o.PollInterval,
		TrustPropagationDelay:   o.TrustPropagationDelay,
		ServerSwitchGrace:       o.ServerSwitchGrace,
		ClientSelector:          o.ClientSelector,
		ClientSecretSelector:    o.ClientSecretSelector,
		ClientIssuer:            o.ClientIssuer,
		ClientNamespaces:        o.ClientNamespaces,
		RenewalQPS:              o.RenewalQPS,
		RenewalBurst:            o.RenewalBurst,
		MetricsBindAddress:      o.MetricsBindAddress,
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElect:             o.LeaderElect,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		Server:                  o.Server.Profile(),
	}
}

// Args is the command line that Parse turns back into o: every flag of
// dualca's own whose value differs from its default. The logging and
// kubeconfig flags are not dualca's options and are left to the caller.
// Client namespaces are given only with a client selection, as Parse wants.
func (o Options) Args() []string {
	given := o
	given.Objects.syncRaw()
	given.Targets.syncRaw()
	given.Server.syncRaw()
	fs := flag.NewFlagSet("args", flag.ContinueOnError)
	given.addOwnFlags(fs)
	defaults := Defaults()
	defaults.Targets.syncRaw()
	ds := flag.NewFlagSet("defaults", flag.ContinueOnError)
	defaults.addOwnFlags(ds)
	var args []string
	fs.VisitAll(func(f *flag.Flag) {
		if v := f.Value.String(); v != ds.Lookup(f.Name).Value.String() {
			if f.Name == "client-namespaces" && !o.Clients().Tracked() {
				return
			}
			args = append(args, "--"+f.Name+"="+v)
		}
	})
	return args
}

// syncRaw sets the string flags from the typed options, so that the flags
// registered on o show the options as they are now.
func (o *Objects) syncRaw() {
	o.rootSecret, o.gatewaySecret = keyString(o.RootSecret), keyString(o.GatewaySecret)
	o.stateSecret, o.statusConfigMap = "", ""
	if o.StateSecret != DefaultStateSecret(o.GatewaySecret) {
		o.stateSecret = keyString(o.StateSecret)
	}
	if o.StatusConfigMap != DefaultStatusConfigMap(o.GatewaySecret, o.StateSecret) {
		o.statusConfigMap = keyString(o.StatusConfigMap)
	}
	o.clientSelector, o.clientSecretSelector, o.clientIssuer = "", "", ""
	o.clientNamespaces = strings.Join(o.ClientNamespaces, ",")
	if o.ClientSelector != nil {
		o.clientSelector = o.ClientSelector.String()
	}
	if o.ClientSecretSelector != nil {
		o.clientSecretSelector = o.ClientSecretSelector.String()
	}
	if o.ClientIssuer != nil {
		o.clientIssuer = o.ClientIssuer.String()
	}
}
