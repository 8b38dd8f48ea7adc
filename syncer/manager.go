// Package syncer is the only part of dualca that talks to the API server: it
// watches the root Secret, runs a strategy's decision and writes the gateway
// Secret.
package syncer

import (
	"errors"
	"fmt"
	"net/http"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
)

// Config is what the syncer runs with: the command-line options and the
// knobs only tests turn.
type Config struct {
	flags.Options
	// Clock is dualca's clock; tests replace it to jump time.
	Clock clock.PassiveClock
	// DisableWatches leaves only the start-up reconcile and the poll, to
	// prove the poll alone keeps the gateway in step.
	DisableWatches bool
	// Logger is the manager's logger.
	Logger logr.Logger
}

// Scheme knows the built-in types and cert-manager's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := cmapi.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager builds a manager running the reconciler with its health and
// metrics endpoints. Start it with mgr.Start(ctx).
func NewManager(restCfg *rest.Config, cfg Config) (ctrl.Manager, *Reconciler, error) {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, nil, fmt.Errorf("building scheme: %w", err)
	}
	electionNS := cfg.LeaderElectionNamespace
	if electionNS == "" {
		electionNS = cfg.GatewaySecret.Namespace
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        cfg.Logger,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsBindAddress},
		HealthProbeBindAddress:        cfg.HealthProbeBindAddress,
		LeaderElection:                cfg.LeaderElect,
		LeaderElectionID:              "dualca-" + cfg.GatewaySecret.Name,
		LeaderElectionNamespace:       electionNS,
		LeaderElectionReleaseOnCancel: true,
		// One controller per process in production; tests run several
		// managers in one process, which the name check would refuse.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		// Secrets are never read through the manager's cache: that would
		// start an informer on every Secret of the cluster. The two that
		// matter have single-object caches of their own.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	registerMetrics()
	strategyInfo.Reset()
	strategyInfo.WithLabelValues(strategyName(cfg.Legacy)).Set(1)
	r := &Reconciler{
		cfg:      cfg,
		reader:   mgr.GetAPIReader(),
		writer:   mgr.GetClient(),
		recorder: mgr.GetEventRecorder("dualca"),
	}
	if cfg.ClientSelector != nil {
		r.renewer = newRenewer(mgr.GetClient(), mgr.GetAPIReader(), cfg)
		if err := mgr.Add(r.renewer); err != nil {
			return nil, nil, fmt.Errorf("adding the renewer: %w", err)
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, nil, err
	}
	if cfg.LeaderElect {
		r.elected = mgr.Elected()
	}
	if err := mgr.AddReadyzCheck("synced", r.readyz); err != nil {
		return nil, nil, err
	}
	return mgr, r, nil
}

func strategyName(legacy bool) string {
	if legacy {
		return bundle.StrategyLegacy
	}
	return bundle.StrategyZeroDowntime
}

// readyz reports ready once the gateway has been brought in sync at least
// once. A standby replica (leader election on, not elected) is ready too:
// it has nothing to sync until it leads, and a rolling update must not wait
// for it.
func (r *Reconciler) readyz(*http.Request) error {
	if r.elected != nil {
		select {
		case <-r.elected:
		default:
			return nil
		}
	}
	if !r.synced.Load() {
		return errors.New("gateway secret not in sync yet")
	}
	return nil
}

// Reconciles counts the reconciles that completed without error.
func (r *Reconciler) Reconciles() int64 { return r.reconciles.Load() }

// Renewals returns the client renewals acted on so far, by result
// ("triggered", "skipped", "failed"); nil when clients are not tracked.
func (r *Reconciler) Renewals() map[string]int {
	if r.renewer == nil {
		return nil
	}
	return r.renewer.counts()
}

// Caches returns the single-object caches, so tests can show what they hold.
func (r *Reconciler) Caches() []cache.Cache { return r.caches }
