package syncer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// caches are the syncer's caches, each added to the manager: one per
// Secret it follows and one for the status ConfigMap, restricted by a
// field selector to that one object, so memory does not grow with the
// objects of the cluster, and the client cache (nil when clients are not
// tracked).
type caches struct {
	root, clients cache.Cache
	// targets are the targets' caches, in Options.targets' order; shadow
	// is that of the Secret that would shadow the gateway's bundle, nil
	// when there is none to watch.
	targets        []cache.Cache
	shadow, status cache.Cache
	// issuing is the issuing Secret's cache, nil when there is none.
	issuing cache.Cache
	// leaves holds what the client cache read of the requests'
	// certificates, for the tracker; nil without a client cache.
	leaves *requestLeaves
}

// newCaches creates the caches and adds them to mgr.
func newCaches(mgr ctrl.Manager, o Options) (caches, error) {
	var c caches
	keys := []types.NamespacedName{o.RootSecret}
	for _, t := range o.targets() {
		keys = append(keys, t.key)
	}
	if shadow := o.shadowKey(); shadow.Name != "" {
		keys = append(keys, shadow)
	}
	for i, key := range keys {
		sc, err := singleObjectCache(mgr, key)
		if err != nil {
			return c, err
		}
		if err := mgr.Add(sc); err != nil {
			return c, fmt.Errorf("adding cache for %s: %w", key, err)
		}
		switch {
		case i == 0:
			c.root = sc
		case i <= len(o.targets()):
			c.targets = append(c.targets, sc)
		default:
			c.shadow = sc
		}
	}
	if err := c.addStatus(mgr, o); err != nil {
		return c, err
	}
	if key := o.IssuingSecret; key.Name != "" {
		sc, err := singleObjectCache(mgr, key)
		if err != nil {
			return c, err
		}
		if err := mgr.Add(sc); err != nil {
			return c, fmt.Errorf("adding cache for %s: %w", key, err)
		}
		c.issuing = sc
	}
	if !o.Clients().Tracked() {
		return c, nil
	}
	c.leaves = &requestLeaves{}
	opts := clientCacheOptions(o, c.leaves)
	opts.HTTPClient, opts.Scheme, opts.Mapper = mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetRESTMapper()
	cc, err := cache.New(mgr.GetConfig(), opts)
	if err != nil {
		return c, fmt.Errorf("creating the client cache: %w", err)
	}
	if err := mgr.Add(cc); err != nil {
		return c, fmt.Errorf("adding the client cache: %w", err)
	}
	c.clients = cc
	return c, nil
}

// setupWithManager wires the reconciler into mgr: a reconcile at start, and
// with watch, one at every change of the root, of a target (but dualca's
// own writes, see targetState.ownWrite) or of a Secret that would shadow
// the gateway's bundle;
// and, when clients are tracked, at every change of a client. Every event
// maps to one work item, so bursts of events collapse into one reconcile.
func (r *reconciler) setupWithManager(mgr ctrl.Manager, c caches, watch bool) error {
	b := ctrl.NewControllerManagedBy(mgr).
		Named("dualca").
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 1,
			// An invalid root is retried with backoff, but never less often
			// than the poll would: fixing the root also arrives as an event.
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				100*time.Millisecond, r.poll),
		}).
		WatchesRawSource(kick{req: r.request()})
	if watch {
		b = b.WatchesRawSource(source.Kind(c.root, &corev1.Secret{}, oneWorkItem[*corev1.Secret](r.request()), named[*corev1.Secret](r.store.rootKey)))
		for i, t := range r.store.targets {
			b = b.WatchesRawSource(targetSource(c.targets[i], t, r.request()))
		}
		if c.shadow != nil {
			b = b.WatchesRawSource(source.Kind(c.shadow, &corev1.Secret{}, oneWorkItem[*corev1.Secret](r.request()), named[*corev1.Secret](r.store.shadow)))
		}
		if c.issuing != nil && r.store.issuing != nil {
			b = b.WatchesRawSource(targetSource(c.issuing, r.store.issuing, r.request()))
		}
	}
	if watch {
		b = r.watchStatus(b, c.status)
	}
	if c.clients != nil {
		// Every client change may move a rotation on: one work item again,
		// after a wait that lets a burst of changes share a reconcile.
		// The tracker hears of each object first, so that reconcile reads
		// it. The controller does not wait for these sources (see
		// clientLoad): until each source's handler has had every object
		// the cache held at start, reconciles decide with the clients
		// unread, and the load's end queues the one that reads them.
		load := newClientLoad(r.request(), r.report.metrics, 2)
		if err := mgr.Add(load); err != nil {
			return fmt.Errorf("adding the client load: %w", err)
		}
		r.clients.loaded = &load.loaded
		b = b.WatchesRawSource(load.source(source.Kind(c.clients, &cmapi.Certificate{}, waitingWorkItem[*cmapi.Certificate](r.request(), r.pace.changed, r.clients.changed, load.loaded.Load)))).
			WatchesRawSource(load.source(source.Kind(c.clients, &cmapi.CertificateRequest{}, waitingWorkItem[*cmapi.CertificateRequest](r.request(), r.pace.changed, r.clients.changed, load.loaded.Load))))
	}
	return b.Complete(r)
}

// clientLoad follows the client cache's first load. The controller waits
// for a source that says when it has synced before it starts any
// reconcile; at fifty thousand clients the client cache takes half a
// minute to load, and the gateway, the root's new trust included, would
// wait as long for a decision that does not need the clients. So the
// controller is not told of the client sources' sync: reconciles start as
// soon as the root, the targets and the status are read, with the clients
// unread (bundle.Clients.Unread: treated fail-safe, as an unknown client),
// and when every client source's handler has had every object the cache
// held at start, the clients count as read and a reconcile is queued that
// reads them. A load that does not end within clientSyncTimeout (the
// controller's own wait: RBAC missing, say) stops dualca with an error,
// as the controller's wait did.
type clientLoad struct {
	req     reconcile.Request
	metrics *Metrics
	loaded  atomic.Bool
	pending atomic.Int32
	failed  chan error
}

// clientSyncTimeout is how long the client cache may take to load:
// controller-runtime's default wait for a controller's caches.
const clientSyncTimeout = 2 * time.Minute

func newClientLoad(req reconcile.Request, m *Metrics, sources int32) *clientLoad {
	l := &clientLoad{req: req, metrics: m, failed: make(chan error, sources)}
	l.pending.Store(sources)
	m.clientsRead.Set(0)
	return l
}

// source is src, the controller not told when it has synced: src's sync
// is waited for here.
func (l *clientLoad) source(src source.TypedSyncingSource[reconcile.Request]) source.TypedSource[reconcile.Request] {
	return loadingSource{src: src, load: l}
}

// Start waits for a client source's load to fail, and returns that
// error, which stops the manager; nil when the manager stops first.
func (l *clientLoad) Start(ctx context.Context) error {
	select {
	case err := <-l.failed:
		return fmt.Errorf("reading the clients: %w", err)
	case <-ctx.Done():
		return nil
	}
}

// synced says a source has loaded (err nil) or failed to.
func (l *clientLoad) synced(err error, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if err != nil {
		l.failed <- err
		return
	}
	if l.pending.Add(-1) == 0 {
		l.loaded.Store(true)
		l.metrics.clientsRead.Set(1)
		q.Add(l.req)
	}
}

// loadingSource starts src and waits for its sync apart from the
// controller (see clientLoad): it is no TypedSyncingSource itself.
type loadingSource struct {
	src  source.TypedSyncingSource[reconcile.Request]
	load *clientLoad
}

func (s loadingSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	if err := s.src.Start(ctx, q); err != nil {
		return err
	}
	go func() {
		wait, cancel := context.WithTimeout(ctx, clientSyncTimeout)
		defer cancel()
		err := s.src.WaitForSync(wait)
		if ctx.Err() != nil {
			return // stopping: WaitForSync says nothing of the load
		}
		s.load.synced(err, q)
	}()
	return nil
}

func (s loadingSource) String() string { return fmt.Sprint(s.src) }

// targetSource is the watch of target t through its cache c: every event
// but dualca's own writes (see targetState.ownWrite).
func targetSource(c cache.Cache, t *targetState, req reconcile.Request) source.TypedSource[reconcile.Request] {
	if t.kind == KindConfigMap {
		return source.Kind(c, &corev1.ConfigMap{}, targetWorkItem[*corev1.ConfigMap](req, t), named[*corev1.ConfigMap](t.key), notOwnWrite[*corev1.ConfigMap](t))
	}
	return source.Kind(c, &corev1.Secret{}, targetWorkItem[*corev1.Secret](req, t), named[*corev1.Secret](t.key), notOwnWrite[*corev1.Secret](t))
}

// targetWorkItem maps the events of target t to req, as oneWorkItem does,
// but for one that comes while dualca's own write of t is under way: the
// watch and the write's reply travel apart, so the event of the write can
// come before the reply is read and ownWrite knows its version. Such an
// event is queued once the write has ended, and not at all when it was
// that write. In the propagation benchmark a third of the rotations'
// writes came back that way, each a reconcile that decided nothing and
// that a root arriving meanwhile waited for. A creation or update that is
// not the write is queued as late as the write's end, when the reconcile
// making it ends too. Deletions are queued at once.
func targetWorkItem[T client.Object](req reconcile.Request, t *targetState) handler.TypedEventHandler[T, reconcile.Request] {
	add := func(obj T, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		w := t.writing.Load()
		if w == nil {
			if !t.ownWrite(obj) {
				q.Add(req)
			}
			return
		}
		go func() {
			<-*w
			if !t.ownWrite(obj) {
				q.Add(req)
			}
		}()
	}
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(e.ObjectNew, q)
		},
		DeleteFunc: func(_ context.Context, _ event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(req)
		},
		GenericFunc: func(_ context.Context, _ event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(req)
		},
	}
}

// named lets through the events of the object key alone: it guards the
// single-object caches' boundary on the event side.
func named[T client.Object](key types.NamespacedName) predicate.TypedPredicate[T] {
	return predicate.NewTypedPredicateFuncs(func(o T) bool {
		return o.GetNamespace() == key.Namespace && o.GetName() == key.Name
	})
}

// oneWorkItem maps every event to req.
func oneWorkItem[T client.Object](req reconcile.Request) handler.TypedEventHandler[T, reconcile.Request] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(context.Context, T) []reconcile.Request {
		return []reconcile.Request{req}
	})
}

// waitingWorkItem maps every event to req, added to the queue after the
// wait pace gives, or not at all when pace leaves it to the reconcile
// under way: an event that comes while req already waits changes
// nothing, so a burst of events becomes one reconcile. Each event first
// tells changed of the object (gone: deleted), in the same handler, so
// the reconcile it queues reads the change. Before the client cache has loaded (loaded false), an
// event queues nothing: the reconciles then read no client.
func waitingWorkItem[T client.Object](req reconcile.Request, pace func() (time.Duration, bool), changed func(client.Object, bool), loaded func() bool) handler.TypedEventHandler[T, reconcile.Request] {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request], obj T, gone bool) {
		changed(obj, gone)
		if !loaded() {
			return // the load's end queues the reconcile that reads it
		}
		d, queue := pace()
		if !queue {
			return // the reconcile under way queues it as it ends
		}
		if d > 0 {
			q.AddAfter(req, d)
			return
		}
		q.Add(req)
	}
	return handler.TypedFuncs[T, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, false)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.ObjectNew, false)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, true)
		},
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q, e.Object, false)
		},
	}
}

func (r *reconciler) request() reconcile.Request {
	return reconcile.Request{NamespacedName: r.key}
}

// addStatus adds the status ConfigMap's single-object cache to mgr.
func (c *caches) addStatus(mgr ctrl.Manager, o Options) error {
	key := o.StatusConfigMap
	sc, err := singleObjectCache(mgr, key)
	if err != nil {
		return err
	}
	if err := mgr.Add(sc); err != nil {
		return fmt.Errorf("adding cache for configmap %s: %w", key, err)
	}
	c.status = sc
	return nil
}

// watchStatus reconciles when an operator changes a control on the status
// ConfigMap (controlsChanged), not when dualca publishes.
func (r *reconciler) watchStatus(b *builder.TypedBuilder[reconcile.Request], sc cache.Cache) *builder.TypedBuilder[reconcile.Request] {
	if r.status == nil || sc == nil {
		return b
	}
	key := r.status.key
	return b.WatchesRawSource(source.Kind(sc, &corev1.ConfigMap{}, oneWorkItem[*corev1.ConfigMap](r.request()),
		named[*corev1.ConfigMap](key), controlsChanged()))
}

// singleObjectCache returns a cache that lists and watches exactly one
// object of each kind read through it: a Secret, or the status ConfigMap.
func singleObjectCache(mgr ctrl.Manager, key types.NamespacedName) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient:           mgr.GetHTTPClient(),
		Scheme:               mgr.GetScheme(),
		Mapper:               mgr.GetRESTMapper(),
		DefaultNamespaces:    map[string]cache.Config{key.Namespace: {}},
		DefaultFieldSelector: fields.OneTermEqualSelector("metadata.name", key.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("creating cache for %s: %w", key, err)
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
