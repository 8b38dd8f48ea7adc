package syncer

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/dualca/dualca/bundle"
)

// Renewal.
//
// The reconciler decides which clients are due; the renewer acts on them,
// each once at a time, at the pace of a token bucket (--renewal-qps,
// --renewal-burst) with jitter, so ten thousand clients do not stampede the
// API server or the issuer (several workers overlap the round trips,
// never the pace). A client that keeps failing is retried with
// exponential backoff, up to the poll interval. The action is the
// strategy's (strategy.Renew): zero-downtime sets cert-manager's Issuing
// condition (what `cmctl renew` does) and never deletes anything; legacy
// deletes the client's Secret, as the behaviour it reproduces did.
//
// Renewals are bounded: a client is triggered at most maxTriggersPerRoot
// times on one root and one version of its Certificate's spec (its
// metadata.generation). A client that cert-manager re-issues and that
// still does not land on the current root (its Issuer is another CA, say)
// would otherwise be triggered again at every reconcile for as long as the
// rotation lasts. Past the bound it is reported instead, once per client,
// root and spec: a Warning ClientRenewalAbandoned event and the
// dualca_clients_abandoned gauge. A new root starts every count afresh, and
// so does a change to the client's spec: the operator who points the
// Certificate back at the right Issuer expects it to move now, not at the
// next root (cert-manager does not re-issue it on its own then: the
// Secret's issuer is the right one again, and it backs off from the failed
// issuances for hours). A writer of a client namespace who keeps editing a
// Certificate gains at most maxTriggersPerRoot triggers of that
// Certificate per edit, no faster than one per actedFor, through the
// bucket every trigger shares: no more than cmctl renew on it would give
// them.

// reasonClientRenewalAbandoned is the Warning event of a client whose
// renewal dualca stopped triggering on the current root.
const reasonClientRenewalAbandoned = "ClientRenewalAbandoned"

// maxTriggersPerRoot is how many times one client is triggered on one root.
const maxTriggersPerRoot = 3

// Renewal results, for logs and metrics.
const (
	renewalTriggered = "triggered"
	renewalSkipped   = "skipped"
	renewalFailed    = "failed"
)

// renewer is a manager Runnable that works through the clients due for
// renewal, with RenewalWorkers(--renewal-qps) workers. Only the leader
// runs it.
type renewer struct {
	queue    workqueue.TypedRateLimitingInterface[types.NamespacedName]
	workers  int
	strategy strategy
	metrics  *Metrics
	now      func() time.Time
	logger   logr.Logger

	mu sync.Mutex
	// due is the latest decision: a client queued earlier that is no longer
	// due (cert-manager renewed it meanwhile) is skipped.
	due map[types.NamespacedName]dueClient
	// clients are what the renewer keeps of each client it queued, acted
	// on, counts or abandoned; a client of which it keeps nothing has no
	// entry. One entry per client, not a map for each of these: in a
	// fan-out over tens of thousands of clients, all of them in flight,
	// five maps cost 500 B a client.
	clients map[types.NamespacedName]*clientRenewal
	// peak is the most entries clients had since it was last built: a Go
	// map keeps the memory of the most it held.
	peak int
	// report tells of clients abandoned; nil reports nothing (tests).
	report func([]abandonedClient)
}

// clientRenewal is what the renewer keeps of one client.
type clientRenewal struct {
	// queued: the client is in the queue and not yet taken by a worker;
	// the reconciler, which runs at every client change, does not add it
	// again (each add would spend a token of the bucket).
	queued bool
	// backoff: the rate limiter counts the client's retries, until it is
	// no longer due.
	backoff bool
	// acted is when the client was acted on, zero when it was not or the
	// wait is over: until the cache shows cert-manager at work (or
	// actedFor has passed), the reconciler's view of it is older than the
	// action, and queueing it again would spend a token of the bucket on a
	// client that needs nothing.
	acted time.Time
	// triggers counts the renewals triggered of the client on one root
	// and spec; the count restarts at another root or spec.
	triggers triggerCount
	// abandoned is the root and spec the client was abandoned on (no
	// longer triggered), zero when it was not: it is reported once per
	// root and spec.
	abandoned attempt
}

// client is key's entry, made when there is none. The caller holds w.mu.
func (w *renewer) client(key types.NamespacedName) *clientRenewal {
	c := w.clients[key]
	if c == nil {
		c = &clientRenewal{}
		w.clients[key] = c
		w.peak = max(w.peak, len(w.clients))
	}
	return c
}

// forgetIdle drops key's entry when it keeps nothing. The caller holds
// w.mu.
func (w *renewer) forgetIdle(key types.NamespacedName, c *clientRenewal) {
	if *c == (clientRenewal{}) {
		delete(w.clients, key)
	}
}

// shrink builds clients again when it holds under a quarter of its peak:
// after a fan-out the entries of the clients renewed are gone, and the
// map would otherwise keep their memory. The caller holds w.mu.
func (w *renewer) shrink() {
	if w.peak < minShrink || len(w.clients) >= w.peak/4 {
		return
	}
	clients := make(map[types.NamespacedName]*clientRenewal, len(w.clients))
	for key, c := range w.clients {
		clients[key] = c
	}
	w.clients, w.peak = clients, len(clients)
}

// minShrink is the peak below which the map is left as it is.
const minShrink = 1024

// triggerCount is how many times a client was triggered on one attempt.
type triggerCount struct {
	on attempt
	n  int
}

// attempt is what a client's triggers are counted on: the root it is to
// move to and the generation of its Certificate's spec.
type attempt struct {
	root       string
	generation int64
}

// abandonedClient is a client whose renewal dualca stopped triggering.
type abandonedClient struct {
	key  types.NamespacedName
	root string
	// cert is its Certificate as seen; nil when unknown.
	cert *cmapi.Certificate
}

// actedFor bounds how long a client acted on is left alone while it still
// looks due: a stale cache, or an issuance that failed (cert-manager then
// retries on its own schedule as well).
const actedFor = 30 * time.Second

// dueClient is what the decision knew of a client due for renewal.
type dueClient struct {
	// revision is the revision of the credential the decision saw the
	// client hold; nil when it had none.
	revision *int
	// root is the fingerprint of the root the client is to move to, the
	// current one: what its triggers are counted on, with its spec.
	root string
	// cert is the client's Certificate as seen (the cache's: read only),
	// what an abandoned client's event refers to; nil when unknown.
	cert *cmapi.Certificate
}

// attempt is what the client's triggers are counted on.
func (d dueClient) attempt() attempt {
	a := attempt{root: d.root}
	if d.cert != nil {
		a.generation = d.cert.Generation
	}
	return a
}

// renewalRateLimiter is the token bucket with jitter for every trigger,
// combined with per-client exponential backoff for clients that fail. The
// bucket is read at clk's time: the queue's, real time, in dualca (the
// queue waits out the delays in real time); a fake clock in the tests.
func renewalRateLimiter(qps float64, burst int, maxBackoff time.Duration, clk clock.PassiveClock) workqueue.TypedRateLimiter[types.NamespacedName] {
	return &jitter[types.NamespacedName]{
		TypedRateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](50*time.Millisecond, maxBackoff),
			&bucket[types.NamespacedName]{limiter: rate.NewLimiter(rate.Limit(qps), burst), clock: clk},
		),
		// Up to a tenth of the interval between two tokens: enough to spread
		// a burst that starts on one tick, never enough to slow the rate.
		max: time.Duration(float64(time.Second) / qps / 10),
	}
}

// bucket is workqueue's TypedBucketRateLimiter with its clock given: each
// item reserves a token at clock's now and waits until it is due.
type bucket[T comparable] struct {
	limiter *rate.Limiter
	clock   clock.PassiveClock
}

func (b *bucket[T]) When(T) time.Duration {
	now := b.clock.Now()
	return b.limiter.ReserveN(now, 1).DelayFrom(now)
}

func (*bucket[T]) NumRequeues(T) int { return 0 }

func (*bucket[T]) Forget(T) {}

// jitter adds a random delay in [0, max) to another rate limiter's.
type jitter[T comparable] struct {
	workqueue.TypedRateLimiter[T]
	max time.Duration
}

func (j *jitter[T]) When(item T) time.Duration {
	d := j.TypedRateLimiter.When(item)
	if j.max > 0 {
		d += rand.N(j.max) //nolint:gosec // G404: jitter that spreads renewals; nothing secret
	}
	return d
}

func newRenewer(strategy strategy, o Options) *renewer {
	return &renewer{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			// Real time, not o.Clock: the queue waits in real time, and a
			// bucket on a clock that stood still would never refill.
			renewalRateLimiter(o.RenewalQPS, o.RenewalBurst, o.PollInterval, clock.RealClock{}),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "dualca-renewal"}),
		workers:  RenewalWorkers(o.RenewalQPS),
		strategy: strategy,
		metrics:  o.Metrics,
		logger:   o.Logger,
		now:      o.Clock.Now,
		clients:  map[types.NamespacedName]*clientRenewal{},
	}
}

// reportTo makes the renewer tell of the clients it abandons with a
// Warning event on the gateway Secret (where dualca may write events and
// operators look), the client's Certificate as the related object: the
// events API would fold the events of several clients into one series
// otherwise. gateway reads the gateway Secret; nil from it, no event.
func (w *renewer) reportTo(rec recorder.EventRecorder, gateway func(context.Context) client.Object) {
	w.report = func(clients []abandonedClient) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gw := gateway(ctx)
		if gw == nil {
			return
		}
		for _, c := range clients {
			var related runtime.Object
			if c.cert != nil {
				related = c.cert
			}
			rec.Eventf(gw, related, corev1.EventTypeWarning, reasonClientRenewalAbandoned, "Renew",
				"client %s: renewal triggered %d times on root %s and still not on it; not triggered again until the next root "+
					"or a change to its Certificate's spec. Check the Issuer of its Certificate: it must be the CA Issuer of the root Secret",
				c.key, maxTriggersPerRoot, bundle.Short(c.root))
		}
	}
}

// update takes the latest decision: the clients due now, and those of them
// cert-manager is issuing already (not queued, their backoff kept). It
// queues the others not already queued, and forgets the backoff of clients
// no longer due at all. It returns how many were queued.
func (w *renewer) update(due map[types.NamespacedName]dueClient, inFlight map[types.NamespacedName]bool) int {
	added, abandoned := w.take(due, inFlight)
	if len(abandoned) > 0 {
		for _, c := range abandoned {
			w.logger.Info("client renewal abandoned on this root", "client", c.key.String(), "root", bundle.Short(c.root),
				"triggers", maxTriggersPerRoot)
		}
		if w.report != nil {
			w.report(abandoned)
		}
	}
	return added
}

// take is update under the lock: it returns how many clients were queued
// and the clients abandoned since the last decision.
func (w *renewer) take(due map[types.NamespacedName]dueClient, inFlight map[types.NamespacedName]bool) (int, []abandonedClient) {
	w.mu.Lock()
	defer w.mu.Unlock()
	root := rootOf(due)
	now := w.now()
	for key, c := range w.clients {
		_, still := due[key]
		if root != "" {
			// A new root starts every count afresh.
			if c.triggers.on.root != root {
				c.triggers = triggerCount{}
			}
			if c.abandoned.root != root {
				c.abandoned = attempt{}
			}
		}
		if c.backoff && !still && !inFlight[key] {
			w.queue.Forget(key)
			c.backoff = false
		}
		// Seen in flight is not enough: the Certificate and the Secret are
		// watched apart, and after a lost connection the Secret may show
		// the old leaf after cert-manager finished (a second issuance for
		// nothing). Only a renewed client, or the wait running out, ends it.
		if !c.acted.IsZero() && (!still && !inFlight[key] || now.Sub(c.acted) >= actedFor) {
			c.acted = time.Time{}
		}
		w.forgetIdle(key, c)
	}
	w.due = due
	added, stopped := 0, 0
	var abandoned []abandonedClient
	for key, d := range due {
		c := w.clients[key]
		if c != nil && c.triggers.on == d.attempt() && c.triggers.n >= maxTriggersPerRoot {
			stopped++
			if c.abandoned != c.triggers.on {
				c.abandoned = c.triggers.on
				abandoned = append(abandoned, abandonedClient{key: key, root: d.root, cert: d.cert})
			}
			continue
		}
		if c == nil || !c.queued && c.acted.IsZero() {
			c = w.client(key)
			c.queued, c.backoff = true, true
			w.queue.AddRateLimited(key)
			added++
		}
	}
	w.shrink()
	w.metrics.abandoned.Set(float64(stopped))
	slices.SortFunc(abandoned, func(a, b abandonedClient) int { return strings.Compare(a.key.String(), b.key.String()) })
	return added, abandoned
}

// rootOf is the root the clients due are to move to: the current one; ""
// without a client due, when it is not known.
func rootOf(due map[types.NamespacedName]dueClient) string {
	for _, d := range due {
		return d.root
	}
	return ""
}

// Start runs the worker until ctx ends.
func (w *renewer) Start(ctx context.Context) error {
	// A runnable's context carries no logger: give it dualca's.
	if w.logger.GetSink() != nil {
		ctx = logf.IntoContext(ctx, w.logger.WithName("renewer"))
	}
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range w.workers {
		wg.Go(func() {
			for w.next(ctx) {
			}
		})
	}
	wg.Wait()
	return nil
}

// RenewalWorkers is how many workers act on the queue at once at qps
// renewals per second. The token bucket sets the pace; the workers only let
// one trigger's round trip overlap the next ones'. A pace of qps holds while
// a round trip takes up to workers/qps (Little's law), so there are enough
// for renewalRoundTrip at the configured rate: under an API server busy
// with cert-manager's re-issues a status update can take tens of
// milliseconds, and 8 workers held 500/s to 370-410/s. Never fewer than
// minRenewalWorkers (a slow request must not stall a slow pace), never more
// than maxRenewalWorkers requests in flight. The queue never hands one
// client to two workers.
func RenewalWorkers(qps float64) int {
	n := int(math.Ceil(qps * renewalRoundTrip.Seconds()))
	return min(max(n, minRenewalWorkers), maxRenewalWorkers)
}

const (
	renewalRoundTrip  = 200 * time.Millisecond
	minRenewalWorkers = 8
	maxRenewalWorkers = 64
)

// NeedLeaderElection: only the leader renews.
func (w *renewer) NeedLeaderElection() bool { return true }

func (w *renewer) next(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	w.mu.Lock()
	// The key stays in queued until it is acted on, so that a reconcile in
	// between, whose view is older than the action, does not queue it again.
	d, due := w.due[key]
	w.mu.Unlock()

	acted, err := false, error(nil)
	if due {
		acted, err = w.strategy.Renew(ctx, key, d.revision)
	}
	result := w.settle(key, d.attempt(), acted, err)
	log := logf.FromContext(ctx).WithValues("client", key.String())
	switch result {
	case renewalFailed:
		log.Error(err, "client renewal failed; retrying with backoff")
	case renewalTriggered:
		log.V(1).Info("client renewal triggered", "strategy", w.strategy.Name())
	default:
		log.V(1).Info("client renewal skipped", "due", due)
	}
	w.metrics.renewals.WithLabelValues(w.strategy.Name(), w.strategy.RenewalMethod(), result).Inc()
	return true
}

// settle records what became of a client taken from the queue: a failure
// is queued again with backoff, an action is remembered and counted on
// the attempt. It returns the result, for logs and metrics.
func (w *renewer) settle(key types.NamespacedName, on attempt, acted bool, err error) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.client(key)
	defer w.forgetIdle(key, c)
	c.queued = false
	switch {
	case err != nil:
		c.queued = true
		w.queue.AddRateLimited(key)
		return renewalFailed
	case acted:
		c.acted = w.now()
		if c.triggers.on != on {
			c.triggers = triggerCount{on: on}
		}
		c.triggers.n++
		return renewalTriggered
	}
	return renewalSkipped
}
