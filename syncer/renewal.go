package syncer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/bundle"
)

// Renewal.
//
// The reconciler decides which clients are due; the renewer acts on them,
// one at a time, at the pace of a token bucket (--renewal-qps,
// --renewal-burst) with jitter, so ten thousand clients do not stampede the
// API server or the issuer. A client that keeps failing is retried with
// exponential backoff, up to the poll interval. The action is the
// strategy's: zero-downtime sets cert-manager's Issuing condition (what
// `cmctl renew` does) and never deletes anything; legacy deletes the
// client's Secret, as the behaviour it reproduces did.

// Renewal results, for logs and metrics.
const (
	renewalTriggered = "triggered"
	renewalSkipped   = "skipped"
	renewalFailed    = "failed"
)

// renewer is a manager Runnable that works through the clients due for
// renewal. Only the leader runs it.
type renewer struct {
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	writer client.Client
	reader client.Reader // uncached: a renewal acts on what is, not on a cache
	// cache is the client cache, for a first attempt (see triggerIssuance);
	// nil until the watches are set up.
	cache  client.Reader
	legacy bool
	now    func() time.Time
	logger logr.Logger

	mu sync.Mutex
	// queued are the clients in the queue and not yet taken by the worker:
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
	// result counts renewals by result, for tests and metrics.
	results map[string]int
}

// actedFor bounds how long a client acted on is left alone while it still
// looks due: a stale cache, or an issuance that failed (cert-manager then
// retries on its own schedule as well).
const actedFor = 30 * time.Second

// dueClient is what the decision knew of a client due for renewal.
type dueClient struct {
	secret       types.NamespacedName
	secretUID    types.UID
	secretRV     string
	hasSecret    bool
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

func newRenewer(writer client.Client, reader client.Reader, cfg Config) *renewer {
	return &renewer{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			renewalRateLimiter(cfg.RenewalQPS, cfg.RenewalBurst, cfg.PollInterval),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "dualca-renewal"}),
		writer:  writer,
		reader:  reader,
		legacy:  cfg.Legacy,
		logger:  cfg.Logger,
		now:     cfg.Clock.Now,
		queued:  map[types.NamespacedName]bool{},
		backoff: map[types.NamespacedName]bool{},
		acted:   map[types.NamespacedName]time.Time{},
		results: map[string]int{},
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
	for w.next(ctx) {
	}
	return nil
}

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
	log := logf.FromContext(ctx).WithValues("client", key.String())

	result, err := renewalSkipped, error(nil)
	if due {
		if w.legacy {
			result, err = w.deleteSecret(ctx, d)
		} else {
			result, err = w.triggerIssuance(ctx, key)
		}
	}
	w.mu.Lock()
	delete(w.queued, key)
	switch {
	case err != nil:
		result = renewalFailed
		w.queued[key] = true
		w.queue.AddRateLimited(key)
	case result == renewalTriggered:
		w.acted[key] = w.now()
	}
	w.results[result]++
	w.mu.Unlock()
	switch {
	case err != nil:
		log.Error(err, "client renewal failed; retrying with backoff")
	case result == renewalTriggered:
		log.V(1).Info("client renewal triggered", "legacy", w.legacy)
	default:
		log.V(1).Info("client renewal skipped", "due", due)
	}
	strategy, method := bundle.StrategyZeroDowntime, "issuing-condition"
	if w.legacy {
		strategy, method = bundle.StrategyLegacy, "secret-deletion"
	}
	renewals.WithLabelValues(strategy, method, result).Inc()
	return true
}

// triggerIssuance sets Issuing=True on the client's Certificate unless
// cert-manager is already issuing it. The first attempt starts from the
// cached Certificate: the update carries its resourceVersion, so a cache
// behind the API server only costs a conflict, after which the Certificate
// is read fresh. That is one request per client instead of two.
func (w *renewer) triggerIssuance(ctx context.Context, key types.NamespacedName) (string, error) {
	result := renewalSkipped
	from := w.cache
	if from == nil {
		from = w.reader
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt := &cmapi.Certificate{}
		reader := from
		from = w.reader
		if err := reader.Get(ctx, key, crt); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if issuing(crt) {
			return nil // in flight: re-triggering would only restart it
		}
		setIssuing(crt, "ManuallyTriggered", "Re-issuance triggered by dualca: the CA root rotated", w.now())
		if err := w.writer.Status().Update(ctx, crt); err != nil {
			return err
		}
		result = renewalTriggered
		return nil
	})
	if err != nil {
		return renewalFailed, fmt.Errorf("setting Issuing on certificate %s: %w", key, err)
	}
	return result, nil
}

// deleteSecret is the legacy action: delete the client's Secret as it was
// when found due, so cert-manager re-issues it. The preconditions make it a
// no-op if cert-manager replaced the Secret meanwhile.
func (w *renewer) deleteSecret(ctx context.Context, d dueClient) (string, error) {
	if !d.hasSecret {
		return renewalSkipped, nil
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: d.secret.Namespace, Name: d.secret.Name}}
	err := w.writer.Delete(ctx, s, client.Preconditions{UID: &d.secretUID, ResourceVersion: &d.secretRV})
	switch {
	case err == nil:
		return renewalTriggered, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return renewalSkipped, nil
	}
	return renewalFailed, fmt.Errorf("deleting client secret %s: %w", d.secret, err)
}

// counts returns the renewals by result so far.
func (w *renewer) counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]int, len(w.results))
	for k, v := range w.results {
		out[k] = v
	}
	return out
}
