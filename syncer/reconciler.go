package syncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
)

// Reconciler keeps the gateway Secret in step with the root Secret.
type Reconciler struct {
	cfg      Config
	reader   client.Reader // uncached: every reconcile is also a poll
	writer   client.Client
	recorder recorder.EventRecorder
	caches   []cache.Cache
	// clients and renewer are nil when no client selector is configured.
	clients *clientTracker
	renewer *renewer
	synced  atomic.Bool
	// reconciles counts successful reconciles, so tests can wait for polls.
	reconciles atomic.Int64
	// lastInvalid is the reason last reported for an invalid root, so that a
	// root that stays broken is reported once, not at every retry.
	lastInvalid atomic.Value
	// lastWrite is when the gateway Secret was last written; a write that
	// would change only the client progress waits until progressEvery has
	// passed since, so a fan-out over thousands of clients does not rewrite
	// (and make the gateway reload) the Secret once per client. Reconciles
	// run one at a time, so these need no lock.
	lastWrite time.Time
	deferred  time.Duration
	// roots times the roots seen, for the lag and propagation metrics.
	roots rootWatch
	// elected is closed once this replica leads; nil without leader election.
	elected <-chan struct{}
	// rootCache and gatewayCache are the single-object caches, read between
	// polls (see source); nil when watches are disabled.
	rootCache, gatewayCache client.Reader
	// lastPoll is when root and gateway were last read from the API server.
	lastPoll time.Time
	// gatewayRV is the gateway's resourceVersion as last read from the API
	// server or written; "" when it was absent.
	gatewayRV string
	// remembered is the gateway Secret as dualca last read or wrote it, to
	// restore it as it was if it is deleted.
	remembered *corev1.Secret
	// clientProblems are the problems last reported, by client, so that a
	// client Secret that stays broken is reported once.
	clientProblems map[string]string
}

// progressEvery bounds how often a change of the client progress alone is
// written to the gateway Secret.
const progressEvery = 5 * time.Second

// Reconcile reads root and gateway, decides, and writes the gateway once if
// anything changed. Each reconcile ends by scheduling the next poll.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	var (
		d       bundle.Decision
		gateway *corev1.Secret
		wrote   bool
		views   map[string]clientView
		clients bundle.Clients
		rootFP  string
		// restored: the gateway Secret was deleted and is written again
		// from what dualca last knew of it.
		restored bool
	)
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		rootReader, gatewayReader := r.source(attempt)
		attempt++
		root, rootObj, err := r.readRoot(ctx, rootReader)
		if err != nil {
			return r.reportInvalid(ctx, rootObj, err)
		}
		rootValid.Set(1)
		rootFP = root.Fingerprint
		r.roots.saw(rootFP, r.cfg.Clock.Now())
		current, gw, err := r.readGateway(ctx, gatewayReader)
		if err != nil {
			return err
		}
		restored = current == nil && gw.Exists
		clients = bundle.Clients{}
		if r.clients != nil {
			if clients, views, err = r.clients.read(ctx); err != nil {
				return err
			}
		}
		d = r.decide(gw, root, clients)
		gateway, wrote, err = r.write(ctx, current, d)
		return err
	})
	now := r.cfg.Clock.Now()
	if err != nil {
		r.countError(err, rootFP, now)
		return reconcile.Result{}, err
	}
	r.roots.reflected(d.State.Root, now)
	recordDecision(d, clients, r.cfg.Legacy, now)
	r.lastInvalid.Store("")
	r.synced.Store(true)
	r.reconciles.Add(1)
	if wrote && restored {
		d.Events = append([]bundle.Event{{Warning: true, Reason: bundle.ReasonBundleUpdated,
			Message: "gateway Secret was deleted; restored as dualca last wrote it, server credential and rotation state included"}}, d.Events...)
	}
	if wrote {
		logf.FromContext(ctx).Info("gateway secret written", "strategy", d.State.Strategy, "phase", d.State.Phase,
			"root", bundle.Short(d.State.Root), "server", bundle.Short(d.State.Server), "roots", len(d.State.BundleRoots))
	}
	for _, e := range sameReasonTogether(d.Events) {
		r.event(gateway, e)
		logf.FromContext(ctx).Info("event", "reason", e.Reason, "warning", e.Warning, "message", e.Message)
	}
	r.reportClients(ctx, gateway, views)
	// Renewals follow the decision only once it is written: the gateway
	// trusts the new root before any client is moved to it.
	if r.renewer != nil {
		if n := r.renewer.update(dueClients(d.Renew, views)); n > 0 {
			r.event(gateway, renewalEvent(n, d, r.cfg))
		}
	}
	return reconcile.Result{RequeueAfter: r.requeueAfter(d)}, nil
}

// reportClients tells, once per client and problem, which selected client
// Secrets cannot be read: a Warning event on the gateway Secret (where
// dualca may write events, and where operators look) and a log line. Such
// a client counts as on no root, so a rotation renews it and its old root
// is not kept for it.
func (r *Reconciler) reportClients(ctx context.Context, gateway *corev1.Secret, views map[string]clientView) {
	if r.clientProblems == nil {
		r.clientProblems = map[string]string{}
	}
	for name := range r.clientProblems {
		if views[name].problem == "" {
			delete(r.clientProblems, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(views)) {
		problem := views[name].problem
		if problem == "" || r.clientProblems[name] == problem {
			continue
		}
		r.clientProblems[name] = problem
		logf.FromContext(ctx).Info("client secret unusable", "client", name, "reason", problem)
		// The Secret is the related object: the events API folds events
		// that differ only in their note into one series, and the Secret's
		// reference (its resourceVersion included) tells clients and
		// versions of a Secret apart.
		var related runtime.Object
		if secret := views[name].secret; secret != nil {
			related = secret
		}
		r.recorder.Eventf(gateway, related, corev1.EventTypeWarning, bundle.ReasonClientInvalid, "Sync",
			"client %s: %s; it counts as on no root until cert-manager writes its secret again", name, problem)
	}
}

// countError counts a failed reconcile by reason and, when a valid root
// was read, how long the gateway has been behind it.
func (r *Reconciler) countError(err error, rootFP string, now time.Time) {
	var invalid *bundle.InvalidError
	switch {
	case errors.As(err, &invalid):
		rootValid.Set(0)
		syncErrors.WithLabelValues("root_invalid").Inc()
		return
	case apierrors.IsConflict(err):
		syncErrors.WithLabelValues("conflict").Inc()
	default:
		syncErrors.WithLabelValues("api_error").Inc()
	}
	if rootFP != "" {
		r.roots.behind(rootFP, now)
	}
}

// requeueAfter is the jittered poll interval, or less when the decision
// will change by time alone before then (a delay ends, a root expires).
func (r *Reconciler) requeueAfter(d bundle.Decision) time.Duration {
	after := wait.Jitter(r.cfg.PollInterval, 0.1)
	if r.deferred > 0 {
		after, r.deferred = min(after, r.deferred), 0
	}
	if !d.NextCheck.IsZero() {
		if until := d.NextCheck.Sub(r.cfg.Clock.Now()) + 5*time.Millisecond; until < after {
			after = max(until, 5*time.Millisecond)
		}
	}
	return after
}

// decide runs the configured strategy. Without a client selector, clients
// are not tracked: the zero-downtime strategy then keeps old roots until they
// expire and switches the server when the grace period ends.
func (r *Reconciler) decide(gw bundle.Gateway, root *bundle.Root, clients bundle.Clients) bundle.Decision {
	now := r.cfg.Clock.Now()
	if r.cfg.Legacy {
		return legacy.Plan(gw, root, clients, now)
	}
	return bundle.Plan(gw, root, clients, bundle.Timings{
		TrustPropagationDelay: r.cfg.TrustPropagationDelay,
		ServerSwitchGrace:     r.cfg.ServerSwitchGrace,
	}, now)
}

// dueClients are the clients a decision wants renewed, minus those
// cert-manager is issuing already (returned apart), with what the renewer
// needs of them.
func dueClients(names []string, views map[string]clientView) (map[types.NamespacedName]dueClient, map[types.NamespacedName]bool) {
	due := make(map[types.NamespacedName]dueClient, len(names))
	inFlight := map[types.NamespacedName]bool{}
	for _, name := range names {
		v, ok := views[name]
		if !ok {
			continue
		}
		if v.inFlight {
			inFlight[types.NamespacedName{Namespace: v.cert.Namespace, Name: v.cert.Name}] = true
			continue
		}
		d := dueClient{secret: types.NamespacedName{Namespace: v.cert.Namespace, Name: v.cert.Spec.SecretName}, failedBefore: failed(v.cert)}
		if v.secret != nil {
			d.hasSecret, d.secretUID, d.secretRV = true, v.secret.UID, v.secret.ResourceVersion
		}
		due[types.NamespacedName{Namespace: v.cert.Namespace, Name: v.cert.Name}] = d
	}
	return due, inFlight
}

// renewalEvent tells that clients were queued for renewal, once per batch.
func renewalEvent(n int, d bundle.Decision, cfg Config) bundle.Event {
	if cfg.Legacy {
		return bundle.Event{Reason: bundle.ReasonClientRenewalTriggered, Message: fmt.Sprintf(
			"legacy strategy: deleting the secrets of %s not issued by root %s, so cert-manager re-issues them (%.3g/s)",
			clientCount(n), bundle.Short(d.State.Root), cfg.RenewalQPS)}
	}
	return bundle.Event{Reason: bundle.ReasonClientRenewalTriggered, Message: fmt.Sprintf(
		"re-issuing %s from root %s through cert-manager's Issuing condition (%.3g/s)",
		clientCount(n), bundle.Short(d.State.Root), cfg.RenewalQPS)}
}

func clientCount(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}

// source returns where this reconcile reads the root and the gateway.
//
// The poll, and every retry after a conflict, reads both from the API
// server: that is what repairs a lost or stalled watch. A reconcile between
// polls was started by an event of the single-object caches or by a delay
// ending, and reads the caches, which saves two requests on the propagation
// path and for every client event of a fan-out. A stale cache cannot do
// harm: the root cache is the very source of the root's events (a newer
// root arrives as its own event), and a gateway cached at another version
// than the one dualca last read or wrote is read again from the API server;
// a write decided from a gateway that changed meanwhile fails on its
// resourceVersion and is retried fresh.
func (r *Reconciler) source(attempt int) (root, gateway client.Reader) {
	if r.rootCache == nil || attempt > 0 || time.Since(r.lastPoll) >= r.cfg.PollInterval*9/10 {
		r.lastPoll = time.Now()
		return r.reader, r.reader
	}
	return r.rootCache, r.gatewayCache
}

// readRoot returns the validated root, read through from. Any reason the
// root cannot be used is an *bundle.InvalidError; the Secret is returned
// when it exists, so an event can point at it.
func (r *Reconciler) readRoot(ctx context.Context, from client.Reader) (*bundle.Root, *corev1.Secret, error) {
	key := r.cfg.RootSecret
	s := &corev1.Secret{}
	if err := from.Get(ctx, key, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &bundle.InvalidError{Reason: "root secret " + key.String() + " not found"}
		}
		return nil, nil, fmt.Errorf("reading root secret %s: %w", key, err)
	}
	if s.Type != corev1.SecretTypeTLS {
		return nil, s, &bundle.InvalidError{Reason: fmt.Sprintf("root secret has type %q, want %q", s.Type, corev1.SecretTypeTLS)}
	}
	root, err := bundle.ValidateRoot(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[caKey], r.cfg.Clock.Now())
	return root, s, err
}

// readGateway returns the gateway Secret (nil when absent) and what it
// holds, read through from; a cached copy at another version than the one
// dualca knows is read again from the API server.
func (r *Reconciler) readGateway(ctx context.Context, from client.Reader) (*corev1.Secret, bundle.Gateway, error) {
	s := &corev1.Secret{}
	err := from.Get(ctx, r.cfg.GatewaySecret, s)
	if from != r.reader && (client.IgnoreNotFound(err) != nil || s.ResourceVersion != r.gatewayRV) {
		s = &corev1.Secret{}
		err = r.reader.Get(ctx, r.cfg.GatewaySecret, s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			r.gatewayRV = ""
			if r.remembered != nil {
				// Deleted behind dualca's back: decide from what it last
				// held, so the rotation goes on where it was. Its server
				// credential cannot be made again once the old root's key
				// has left the root Secret.
				return nil, gatewayOf(r.remembered), nil
			}
			return nil, bundle.Gateway{}, nil
		}
		return nil, bundle.Gateway{}, fmt.Errorf("reading gateway secret %s: %w", r.cfg.GatewaySecret, err)
	}
	r.gatewayRV, r.remembered = s.ResourceVersion, s
	return s, gatewayOf(s), nil
}

// gatewayOf is what the decisions need of the gateway Secret s.
func gatewayOf(s *corev1.Secret) bundle.Gateway {
	return bundle.Gateway{
		Exists:  true,
		CertPEM: s.Data[corev1.TLSCertKey],
		KeyPEM:  s.Data[corev1.TLSPrivateKeyKey],
		CAPEM:   s.Data[caKey],
		State:   bundle.ParseState(s.Annotations),
	}
}

// write creates or updates the gateway Secret to hold d, and does nothing
// when it already does. Updates carry the resourceVersion that was read, so
// a concurrent writer makes this fail with a conflict and the caller
// re-reads and decides again instead of overwriting.
func (r *Reconciler) write(ctx context.Context, current *corev1.Secret, d bundle.Decision) (*corev1.Secret, bool, error) {
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.cfg.GatewaySecret.Namespace, Name: r.cfg.GatewaySecret.Name},
		Type:       corev1.SecretTypeTLS,
	}
	if current != nil {
		desired = current.DeepCopy()
	}
	desired.Annotations = mergeAnnotations(desired.Annotations, d.State.Annotations())
	if desired.Data == nil {
		desired.Data = map[string][]byte{}
	}
	desired.Data[corev1.TLSCertKey] = d.CertPEM
	desired.Data[corev1.TLSPrivateKeyKey] = d.KeyPEM
	desired.Data[caKey] = d.CAPEM

	if current == nil {
		if err := r.writer.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Someone created it between our read and our write: decide again.
				return nil, false, apierrors.NewConflict(corev1.Resource("secrets"), desired.Name, err)
			}
			return nil, false, fmt.Errorf("creating gateway secret %s: %w", r.cfg.GatewaySecret, err)
		}
		r.lastWrite, r.gatewayRV, r.remembered = r.cfg.Clock.Now(), desired.ResourceVersion, desired
		return desired, true, nil
	}
	if unchanged(current, desired) {
		return current, false, nil
	}
	if progressOnly(current, desired) {
		if wait := progressEvery - r.cfg.Clock.Since(r.lastWrite); wait > 0 {
			r.deferred = wait
			return current, false, nil
		}
	}
	if err := r.writer.Update(ctx, desired); err != nil {
		if apierrors.IsConflict(err) {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("updating gateway secret %s: %w", r.cfg.GatewaySecret, err)
	}
	r.lastWrite, r.gatewayRV, r.remembered = r.cfg.Clock.Now(), desired.ResourceVersion, desired
	return desired, true, nil
}

// mergeAnnotations replaces dualca's annotations and keeps everyone else's.
func mergeAnnotations(existing, ours map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range existing {
		if !strings.HasPrefix(k, bundle.AnnotationPrefix) {
			out[k] = v
		}
	}
	maps.Copy(out, ours)
	return out
}

// progressOnly reports whether b differs from a in the client progress
// annotation alone.
func progressOnly(a, b *corev1.Secret) bool {
	withoutProgress := func(s *corev1.Secret) *corev1.Secret {
		c := s.DeepCopy()
		delete(c.Annotations, bundle.AnnotationClients)
		return c
	}
	return a.Annotations[bundle.AnnotationClients] != b.Annotations[bundle.AnnotationClients] &&
		unchanged(withoutProgress(a), withoutProgress(b))
}

func unchanged(a, b *corev1.Secret) bool {
	if !maps.Equal(a.Annotations, b.Annotations) || len(a.Data) != len(b.Data) {
		return false
	}
	for k, v := range a.Data {
		if w, ok := b.Data[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// reportInvalid turns an unusable root into one Warning event per distinct
// reason and an error that makes the controller retry with backoff. The
// gateway Secret is not touched.
func (r *Reconciler) reportInvalid(ctx context.Context, rootObj *corev1.Secret, err error) error {
	var invalid *bundle.InvalidError
	if !errors.As(err, &invalid) {
		return err
	}
	reason := invalid.Error()
	if prev, _ := r.lastInvalid.Load().(string); prev != reason {
		r.lastInvalid.Store(reason)
		var regarding runtime.Object = rootObj
		if rootObj == nil {
			gw := &corev1.Secret{}
			if getErr := r.reader.Get(ctx, r.cfg.GatewaySecret, gw); getErr == nil {
				regarding = gw
			}
		}
		if regarding != nil {
			r.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, bundle.ReasonRootInvalid, "Validate",
				"root %s is not usable, gateway left unchanged: %s", r.cfg.RootSecret, reason)
		}
	}
	return fmt.Errorf("root secret %s: %w", r.cfg.RootSecret, err)
}

// sameReasonTogether joins the events of one decision that share a reason
// (two roots retired at once, say): the events API would keep only the
// first of several events about one object version with one reason.
func sameReasonTogether(events []bundle.Event) []bundle.Event {
	var out []bundle.Event
	at := map[bundle.Event]int{}
	for _, e := range events {
		key := bundle.Event{Warning: e.Warning, Reason: e.Reason}
		if i, ok := at[key]; ok {
			out[i].Message += "; " + e.Message
			continue
		}
		at[key] = len(out)
		out = append(out, e)
	}
	return out
}

func (r *Reconciler) event(gateway *corev1.Secret, e bundle.Event) {
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	r.recorder.Eventf(gateway, nil, typ, e.Reason, "Sync", "%s", e.Message)
}

func (r *Reconciler) request() reconcile.Request {
	return reconcile.Request{NamespacedName: r.cfg.GatewaySecret}
}

// caKey is the trust-bundle key that cert-manager and Istio both use.
const caKey = "ca.crt"
