package syncer

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Renewal.
//
// The reconciler decides which clients are due; the renewer acts on them,
// each once at a time, at the pace of a token bucket (--renewal-qps,
// --renewal-burst) with jitter, so ten thousand clients do not stampede the
// API server or the issuer (several workers overlap the round trips,
// never the pace). A client that keeps failing is retried with
// exponential backoff, up to the poll interval. The action is the
// strategy's (Strategy.Renew): zero-downtime sets cert-manager's Issuing
// condition (what `cmctl renew` does) and never deletes anything; legacy
// deletes the client's Secret, as the behaviour it reproduces did.

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
	strategy Strategy
	metrics  *Metrics
	now      func() time.Time
	logger   logr.Logger

	mu sync.Mutex
	// queued are the clients in the queue and not yet taken by a worker:
	// the reconciler, which runs at every client change, does not add them
	// again (each add would spend a token of the bucket).
	queued map[types.NamespacedName]bool
	// due is the latest decision: a client queued earlier that is no longer
	// due (cert-manager renewed it meanwhile) is skipped.
	due map[types.NamespacedName]dueClient
	// backoff are the clients the rate limiter counts retries of, until
	// they are no longer due.
	backoff map[types.NamespacedName]bool
	// acted are the clients acted on, and when: until the cache shows
	// cert-manager at work (or actedFor has passed), the reconciler's view
	// of them is older than the action, and queueing them again would spend
	// a token of the bucket on a client that needs nothing.
	acted map[types.NamespacedName]time.Time
}

// actedFor bounds how long a client acted on is left alone while it still
// looks due: a stale cache, or an issuance that failed (cert-manager then
// retries on its own schedule as well).
const actedFor = 30 * time.Second

// dueClient is what the decision knew of a client due for renewal.
type dueClient struct {
	// secret is the client's Secret as seen, its identity only; nil when
	// it had none.
	secret       *metav1.ObjectMeta
	failedBefore bool
}

// renewalRateLimiter is the token bucket with jitter for every trigger,
// combined with per-client exponential backoff for clients that fail.
func renewalRateLimiter(qps float64, burst int, maxBackoff time.Duration) workqueue.TypedRateLimiter[types.NamespacedName] {
	return &jitter[types.NamespacedName]{
		TypedRateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](50*time.Millisecond, maxBackoff),
			&workqueue.TypedBucketRateLimiter[types.NamespacedName]{Limiter: rate.NewLimiter(rate.Limit(qps), burst)},
		),
		// Up to a tenth of the interval between two tokens: enough to spread
		// a burst that starts on one tick, never enough to slow the rate.
		max: time.Duration(float64(time.Second) / qps / 10),
	}
}

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

func newRenewer(strategy Strategy, o Options) *renewer {
	return &renewer{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			renewalRateLimiter(o.RenewalQPS, o.RenewalBurst, o.PollInterval),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "dualca-renewal"}),
		workers:  RenewalWorkers(o.RenewalQPS),
		strategy: strategy,
		metrics:  o.Metrics,
		logger:   o.Logger,
		now:      o.Clock.Now,
		queued:   map[types.NamespacedName]bool{},
		backoff:  map[types.NamespacedName]bool{},
		acted:    map[types.NamespacedName]time.Time{},
	}
}

// update takes the latest decision: the clients due now, and those of them
// cert-manager is issuing already (not queued, their backoff kept). It
// queues the others not already queued, and forgets the backoff of clients
// no longer due at all. It returns how many were queued.
func (w *renewer) update(due map[types.NamespacedName]dueClient, inFlight map[types.NamespacedName]bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	for key := range w.backoff {
		if _, still := due[key]; !still && !inFlight[key] {
			w.queue.Forget(key)
			delete(w.backoff, key)
		}
	}
	now := w.now()
	for key, at := range w.acted {
		// Seen in flight is not enough: the Certificate and the Secret are
		// watched apart, and after a lost connection the Secret may show
		// the old leaf after cert-manager finished (a second issuance for
		// nothing). Only a renewed client, or the wait running out, ends it.
		if _, still := due[key]; !still && !inFlight[key] || now.Sub(at) >= actedFor {
			delete(w.acted, key)
		}
	}
	w.due = due
	added := 0
	for key := range due {
		if _, recently := w.acted[key]; !w.queued[key] && !recently {
			w.queued[key], w.backoff[key] = true, true
			w.queue.AddRateLimited(key)
			added++
		}
	}
	return added
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
		acted, err = w.strategy.Renew(ctx, key, d.secret)
	}
	result := w.settle(key, acted, err)
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
// is queued again with backoff, an action is remembered. It returns the
// result, for logs and metrics.
func (w *renewer) settle(key types.NamespacedName, acted bool, err error) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.queued, key)
	switch {
	case err != nil:
		w.queued[key] = true
		w.queue.AddRateLimited(key)
		return renewalFailed
	case acted:
		w.acted[key] = w.now()
		return renewalTriggered
	}
	return renewalSkipped
}
