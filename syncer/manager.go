// Package syncer is dualca's controller: it watches the root Secret, runs
// a strategy's decision, writes the gateway Secret and publishes its status.
// Its public reads (the status report's types and parse, Status) are what
// package operator, the operator's command line, builds on.
package syncer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dualca/dualca/bundle"
)

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
// metrics endpoints, and logs what it will run. Start it with mgr.Start(ctx).
func NewManager(restCfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.complete(); err != nil {
		return nil, err
	}
	mgr, err := newControllerManager(uncompressed(restCfg), o)
	if err != nil {
		return nil, err
	}
	if o.ClientIssuer != nil {
		// Uncached, before anything runs: a wrong issuer fails the start.
		ctx, cancel := context.WithTimeout(context.Background(), issuerCheckTimeout)
		defer cancel()
		if err := checkIssuer(ctx, mgr.GetAPIReader(), *o.ClientIssuer, o.RootSecret, o.IssuingSecret, o.Logger); err != nil {
			return nil, err
		}
	}
	c, err := newCaches(mgr, o)
	if err != nil {
		return nil, err
	}
	r := newReconciler(mgr, o, c)
	if err := mgr.Add(r.publisher); err != nil {
		return nil, fmt.Errorf("adding the status publisher: %w", err)
	}
	if r.renewer != nil {
		if err := mgr.Add(r.renewer); err != nil {
			return nil, fmt.Errorf("adding the renewer: %w", err)
		}
	}
	if err := r.setupWithManager(mgr, c, !o.DisableWatches); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if o.LeaderElect {
		r.ready.elected = mgr.Elected()
	}
	if err := mgr.AddReadyzCheck("synced", r.ready.check); err != nil {
		return nil, err
	}
	o.Logger.Info("starting", "root", o.RootSecret, "targets", targetIDs(o.targets()),
		"strategy", r.strategy.Name(), "pollInterval", o.PollInterval, "clients", o.Clients().String())
	return mgr, nil
}

// LeaseName is the leader-election Lease of the dualcas of the gateway
// Secret gateway: "dualca-<namespace>-<name>". The namespace is part of it,
// so that two gateway Secrets of one name in two namespaces, whose dualcas
// elect in one namespace, never share a Lease (one would never lead, and a
// standby reports ready). A Lease name is a DNS-1123 subdomain of at most
// 253 characters: past that, the name is cut to leave room for a dash and
// the first 10 hex digits of the SHA-256 of the whole name, trailing dots
// and dashes dropped, so that long names stay distinct. The chart's
// dualca.leaseName helper computes the same (test/chart checks it).
func LeaseName(gateway types.NamespacedName) string {
	full := "dualca-" + gateway.Namespace + "-" + gateway.Name
	if len(full) <= validation.DNS1123SubdomainMaxLength {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "-" + hex.EncodeToString(sum[:])[:leaseHashLen]
	return strings.TrimRight(full[:validation.DNS1123SubdomainMaxLength-len(suffix)], "-.") + suffix
}

// issuerCheckTimeout bounds the start-up read of the client issuer.
const issuerCheckTimeout = 30 * time.Second

// leaseHashLen is how many hex digits of the hash a cut Lease name ends with.
const leaseHashLen = 10

// metricsOptions serves the metrics at addr uncompressed, whatever the
// scraper accepts. A scrape is about 75 kB (test/integration) on the
// cluster's network, and a gzip writer at its default level holds about
// 1.5 MB of compressor state, which promhttp keeps in a sync.Pool from
// one scrape to the next: a third of dualca's live heap at rest, there or
// not at each collection as scrapes and collections interleave. The heap
// the leak judge reads (test/soak) jumped by that much between samples.
func metricsOptions(addr string) metricsserver.Options {
	return metricsserver.Options{BindAddress: addr, HandlerOpts: []func(*promhttp.HandlerOpts){
		func(o *promhttp.HandlerOpts) { o.DisableCompression = true },
	}}
}

// uncompressed is restCfg asking the API server for uncompressed
// responses. A client that accepts gzip (client-go's default) has the API
// server compress its watch streams too, one flush per event: every
// change of the root reached dualca through a compressor on the API
// server and a decompressor here (a profile of the propagation benchmark
// found watch events read through gzip), and at 50,000 clients every
// trigger's event does too. dualca runs beside the API server, in its
// cluster, where the bytes cost less than compressing them.
func uncompressed(restCfg *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(restCfg)
	cfg.DisableCompression = true
	return cfg
}

func newControllerManager(restCfg *rest.Config, o Options) (ctrl.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, fmt.Errorf("building scheme: %w", err)
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        o.Logger,
		Metrics:                       metricsOptions(o.MetricsBindAddress),
		HealthProbeBindAddress:        o.HealthProbeBindAddress,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              LeaseName(o.Anchor()),
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
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
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	return mgr, nil
}

// newReconciler builds the reconciler and its collaborators, choosing the
// strategy once for the life of the process.
func newReconciler(mgr ctrl.Manager, o Options, c caches) *reconciler {
	var certs client.Reader // the client cache, when clients are tracked
	if c.clients != nil {
		certs = c.clients
	}
	strategy := newStrategy(o, mgr.GetAPIReader(), certs, mgr.GetClient())
	o.Metrics.strategy(strategy)
	store := &gatewayStore{rootKey: o.RootSecret, shadow: o.shadowKey(), api: mgr.GetAPIReader(),
		writer: mgr.GetClient(), clock: o.Clock, pollInterval: o.PollInterval, parsed: bundle.NewParsed(),
		record: &record{key: o.StateSecret, api: mgr.GetAPIReader(), writer: mgr.GetClient()}}
	for i, t := range o.targets() {
		ts := &targetState{target: t}
		if !o.DisableWatches {
			// Reconciles between polls read these caches (gatewayStore.source).
			ts.cache = c.targets[i]
		}
		store.targets = append(store.targets, ts)
	}
	if !o.DisableWatches {
		store.rootCache, store.shadowCache = c.root, c.shadow
	}
	if o.IssuingSecret.Name != "" {
		store.issuing = &targetState{target: issuingTarget(o.IssuingSecret)}
		if !o.DisableWatches {
			store.issuing.cache = c.issuing
		}
	}
	r := &reconciler{
		store:    store,
		strategy: strategy,
		report: &reporter{recorder: mgr.GetEventRecorder("dualca"), metrics: o.Metrics, strategy: strategy,
			rootKey: o.RootSecret, qps: o.RenewalQPS, gateway: store.current, roots: rootWatch{metrics: o.Metrics}},
		ready:      &readiness{},
		signatures: bundle.NewMemory(),
		clock:      o.Clock,
		poll:       o.PollInterval,
		key:        o.Anchor(),
	}
	r.status = newStatusMapOf(mgr, o, c)
	r.publisher = newStatusPublisher(r.status, o.Logger.WithName("status"))
	if c.clients != nil {
		r.clients = (&clientTracker{reader: c.clients, selection: o.Clients(), namespaces: o.ClientNamespaces, leaves: c.leaves, now: o.Clock.Now}).watched()
		r.renewer = newRenewer(strategy, o)
		r.renewer.reportTo(r.report.recorder, store.current)
	}
	return r
}

// readiness reports ready once the gateway has been brought in sync at
// least once. A standby replica (leader election on, not elected) is ready
// too: it has nothing to sync until it leads, and a rolling update must not
// wait for it.
type readiness struct {
	inSync atomic.Bool
	// elected is closed once this replica leads; nil without leader election.
	elected <-chan struct{}
}

func (r *readiness) synced() { r.inSync.Store(true) }

func (r *readiness) check(*http.Request) error {
	if r.elected != nil {
		select {
		case <-r.elected:
		default:
			return nil
		}
	}
	if !r.inSync.Load() {
		return errors.New("gateway secret not in sync yet")
	}
	return nil
}
