package syncer

import (
	"errors"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/dualca/dualca/bundle"
)

// Options are what the syncer runs with. The command line gives most of
// them (flags.Options.Syncer builds them from it); the caller adds the
// metrics, the logger and, in tests, a clock or watches turned off.
type Options struct {
	// RootSecret is the cert-manager CA Secret followed (read only).
	RootSecret types.NamespacedName
	// GatewaySecret is the Secret dualca owns and the gateway reads: the
	// server credential, and in the combined form the bundle too. Empty
	// when the gateway serves a credential of its own and reads only the
	// bundle, from BundleTargets.
	GatewaySecret types.NamespacedName
	// GatewayForm is FormCombined (the default) or FormSplit (the bundle
	// in a Secret named after the gateway Secret with "-cacert").
	GatewayForm string
	// BundleTargets are objects that hold the trust bundle alone, under
	// BundleKey (default ca.crt); those that are Secrets have the type
	// BundleSecretType (default Opaque).
	BundleTargets    []BundleTarget
	BundleKey        string
	BundleSecretType corev1.SecretType
	// IssuingSecret, when set, is the Secret a CA Issuer signs the clients
	// with instead of the root Secret: the root's credential, moved to a
	// new root only once the gateway trusts it (issuing.go). It is in the
	// root Secret's namespace.
	IssuingSecret types.NamespacedName
	// StateSecret is dualca's record (see record.go): written only by
	// dualca's account, it is what every decision starts from.
	StateSecret types.NamespacedName
	// StatusConfigMap is the public status dualca publishes, and the
	// operator's controls it obeys.
	StatusConfigMap types.NamespacedName
	// Legacy chooses the legacy strategy over the zero-downtime one.
	Legacy bool
	// PollInterval is how often root and gateway are re-read uncached.
	PollInterval time.Duration
	// TrustPropagationDelay and ServerSwitchGrace time a rotation.
	TrustPropagationDelay, ServerSwitchGrace time.Duration
	// ClientSelector selects the client Certificates by their labels,
	// ClientSecretSelector by their spec.secretTemplate.labels, ClientIssuer
	// by their spec.issuerRef; every one given must match, none: clients
	// are not tracked (see ClientSelection).
	ClientSelector       labels.Selector
	ClientSecretSelector labels.Selector
	ClientIssuer         *IssuerRef
	// ClientNamespaces are where the client Certificates live.
	ClientNamespaces []string
	// RenewalQPS and RenewalBurst pace client renewals.
	RenewalQPS   float64
	RenewalBurst int
	// MetricsBindAddress and HealthProbeBindAddress are the manager's
	// endpoints ("0" disables one).
	MetricsBindAddress, HealthProbeBindAddress string
	// LeaderElect turns on leader election, with its Lease in
	// LeaderElectionNamespace (default: the gateway Secret's namespace).
	LeaderElect             bool
	LeaderElectionNamespace string
	// Server is the server leaf profile of the zero-downtime strategy; its
	// zero value is a leaf with no names and the default algorithm and
	// lifetime (flags.Options refuses that unless told).
	Server bundle.ServerProfile

	// Metrics receives what the syncer measures; the caller registers it
	// where it is served (see NewMetrics). Required.
	Metrics *Metrics
	// Logger is the manager's logger.
	Logger logr.Logger
	// Clock is dualca's clock, for every decision and measure; nil means
	// the real one. Tests replace it to jump time.
	Clock clock.PassiveClock
	// DisableWatches leaves only the start-up reconcile and the poll, to
	// prove the poll alone keeps the gateway in step.
	DisableWatches bool
}

// DefaultStateSecret is where dualca keeps its record when not told: in the
// gateway Secret's namespace, named after it.
func DefaultStateSecret(gateway types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: gateway.Namespace, Name: gateway.Name + "-dualca-state"}
}

// DefaultStatusConfigMap is where dualca publishes its status when not
// told: in the record's namespace, named after the gateway Secret.
func DefaultStatusConfigMap(gateway, state types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: state.Namespace, Name: gateway.Name + "-dualca-status"}
}

// Clients is the selection of client Certificates the options make.
func (o Options) Clients() ClientSelection {
	return ClientSelection{Labels: o.ClientSelector, SecretLabels: o.ClientSecretSelector, Issuer: o.ClientIssuer}
}

// complete fills in the defaults and refuses options the syncer cannot run with.
func (o *Options) complete() error {
	if o.Metrics == nil {
		return errors.New("syncer options: no Metrics to record into")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if len(o.targets()) == 0 {
		return errors.New("syncer options: no gateway Secret and no bundle target to write")
	}
	if o.StateSecret.Name == "" {
		o.StateSecret = DefaultStateSecret(o.Anchor())
	}
	if o.StatusConfigMap.Name == "" {
		o.StatusConfigMap = DefaultStatusConfigMap(o.Anchor(), o.StateSecret)
	}
	if is := o.ClientIssuer; is != nil && is.certManagers() && is.Kind == cmapi.IssuerKind && is.Namespace == "" {
		// An Issuer is the root Secret's namespace's (see IssuerRef).
		o.ClientIssuer = &IssuerRef{Group: is.Group, Kind: is.Kind, Name: is.Name, Namespace: o.RootSecret.Namespace}
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = o.Anchor().Namespace
	}
	return nil
}
