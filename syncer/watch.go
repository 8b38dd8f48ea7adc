package syncer

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// SetupWithManager wires the reconciler into mgr. The root and the gateway
// Secret each get a cache of their own, restricted by a field selector to
// that one object, so memory does not grow with the Secrets of the cluster;
// a name predicate guards the same boundary on the event side. Every event
// maps to one work item, so bursts of events collapse into one reconcile.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("dualca").
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// An invalid root is retried with backoff, but never less often
			// than the poll would: fixing the root also arrives as an event.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				100*time.Millisecond, r.cfg.PollInterval),
		}).
		WatchesRawSource(kick{req: r.request()})

	for i, key := range []types.NamespacedName{r.cfg.RootSecret, r.cfg.GatewaySecret} {
		c, err := singleObjectCache(mgr, key)
		if err != nil {
			return err
		}
		r.caches = append(r.caches, c)
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding cache for secret %s: %w", key, err)
		}
		if r.cfg.DisableWatches {
			continue
		}
		// Reconciles between polls read these caches (Reconciler.source).
		if i == 0 {
			r.rootCache = c
		} else {
			r.gatewayCache = c
		}
		b = b.WatchesRawSource(source.Kind(c, &corev1.Secret{},
			handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *corev1.Secret) []reconcile.Request {
				return []reconcile.Request{r.request()}
			}),
			predicate.NewTypedPredicateFuncs(func(o *corev1.Secret) bool {
				return o.GetNamespace() == key.Namespace && o.GetName() == key.Name
			})))
	}
	if r.cfg.ClientSelector != nil {
		c, err := newClientCache(mgr, r.cfg)
		if err != nil {
			return err
		}
		r.caches = append(r.caches, c)
		r.clients = &clientTracker{reader: c, cfg: r.cfg}
		if r.renewer != nil {
			r.renewer.cache = c
		}
		if err := mgr.Add(c); err != nil {
			return fmt.Errorf("adding the client cache: %w", err)
		}
		// Every client change may move a rotation on: one work item again.
		b = b.WatchesRawSource(source.Kind(c, &cmapi.Certificate{},
			handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *cmapi.Certificate) []reconcile.Request {
				return []reconcile.Request{r.request()}
			}))).
			WatchesRawSource(source.Kind(c, &corev1.Secret{},
				handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, *corev1.Secret) []reconcile.Request {
					return []reconcile.Request{r.request()}
				})))
	}
	return b.Complete(r)
}

// singleObjectCache returns a cache that lists and watches exactly one Secret.
func singleObjectCache(mgr ctrl.Manager, key types.NamespacedName) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultNamespaces:    map[string]cache.Config{key.Namespace: {}},
		DefaultFieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("creating cache for secret %s: %w", key, err)
	}
	return c, nil
}

// kick enqueues one reconcile at start, so the gateway is brought in sync
// (and polling begins) even when neither Secret exists to produce an event.
type kick struct{ req reconcile.Request }

func (k kick) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	q.Add(k.req)
	return nil
}
