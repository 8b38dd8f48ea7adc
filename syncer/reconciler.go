package syncer

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dualca/dualca/bundle"
)

// reconciler keeps the gateway Secret in step with the root Secret. It
// holds collaborators, each keeping the state it needs between reconciles.
type reconciler struct {
	store    *gatewayStore
	clients  *clientTracker // nil when clients are not tracked
	strategy strategy
	report   *reporter
	renewer  *renewer   // nil when clients are not tracked
	status   *statusMap // the status ConfigMap: controls in, report out
	// publisher publishes the reports off the reconcile's path; nil
	// without a status map.
	publisher *statusPublisher
	ready     *readiness
	clock     clock.PassiveClock
	poll      time.Duration
	key       types.NamespacedName // the gateway Secret: the one work item
	// signatures remembers the signature checks of the decisions: each
	// client's leaf, the server leaf and the cross-certificates are
	// checked against every root of the bundle at each reconcile, and
	// roots of one CA share their subject, so without it each reconcile
	// cost a public-key operation per pair. Each reconcile starts a
	// generation of it, so it holds what the decisions use now.
	signatures *bundle.Memory
	// pace holds the reconciles that client events start to a share of
	// the time (see clientPace).
	pace clientPace
}

// pass is what one attempt at a reconcile read, decided and wrote.
type pass struct {
	// rootFP is the fingerprint of the valid root read; "" when none was.
	rootFP   string
	clients  bundle.Clients
	views    map[string]clientView
	decision bundle.Decision
	written  written
	issued   issued
	// waiting: nothing was decided, the clients are not read yet and the
	// decision needs them (an adoption).
	waiting bool
}

// Reconcile reads root, gateway and clients, lets the strategy decide,
// writes the gateway once if anything changed, reports, and hands the
// clients due for renewal to the renewer. Each reconcile ends by
// scheduling the next poll.
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	r.pace.began()
	defer func() { // also after a panic, which the controller turns into an error
		if wait, pending := r.pace.ended(); pending && err == nil && (res.RequeueAfter == 0 || wait < res.RequeueAfter) {
			// A client changed while this ran, perhaps after it read
			// them: the reconcile that reads the change comes after the
			// wait. (After an error, the controller's retry reads it.)
			res.RequeueAfter = max(wait, time.Millisecond)
		}
	}()
	return r.reconcile(ctx, req)
}

func (r *reconciler) reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r.signatures.Advance()
	var p pass
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() (err error) {
		p, err = r.attempt(ctx, attempt)
		attempt++
		return err
	})
	now := r.clock.Now()
	if err != nil {
		r.report.failed(err, p.rootFP, now)
		r.publishInvalidRoot(ctx, err)
		// The issuing Secret may have moved before the record's write
		// failed: that is told.
		r.report.issuing(ctx, p.written.object, p.issued, p.rootFP)
		return reconcile.Result{}, err
	}
	if p.waiting {
		// Not in sync, but what it did to the issuing Secret is told.
		r.report.issuing(ctx, p.written.object, p.issued, p.rootFP)
		return reconcile.Result{}, nil
	}
	// Ready as soon as the gateway is in sync: what follows only tells of
	// it (metrics, events, the status), and with many clients that takes
	// longer than the write: the per-root client counts check each
	// client's leaf against each root of the bundle.
	r.ready.synced()
	r.report.synced(ctx, p, now)
	r.report.issuing(ctx, p.written.object, p.issued, p.rootFP)
	// Renewals follow the decision only once it is written: the gateway
	// trusts the new root before any client is moved to it.
	if r.renewer != nil {
		if n := r.renewer.update(dueClients(p.rootFP, p.decision.Renew, p.views)); n > 0 {
			r.report.renewalsQueued(p.written.object, n, p.decision)
		}
	}
	statusWait := r.publishStatus(ctx, p, now)
	return reconcile.Result{RequeueAfter: sooner(r.requeueAfter(p), statusWait)}, nil
}

// promoteSet reports whether the ConfigMap as last read or written
// carries a promote.
func (m *statusMap) promoteSet() bool {
	read := m.read.Load()
	return read != nil && read.Annotations[bundle.AnnotationPromote] != ""
}

// attempt is one pass of root → gateway → clients → plan → write; a
// conflict on the write makes Reconcile try again from fresh reads.
func (r *reconciler) attempt(ctx context.Context, attempt int) (pass, error) {
	began := r.clock.Now()
	rootFrom, how := r.store.source(attempt)
	root, rootObj, err := r.store.readRoot(ctx, rootFrom)
	if err != nil {
		return pass{}, r.report.invalidRoot(ctx, rootObj, err)
	}
	p := pass{rootFP: root.Fingerprint}
	r.report.rootSeen(root.Fingerprint, r.clock.Now())
	gateway, err := r.store.readGateway(ctx, how)
	if err != nil {
		return p, err
	}
	if err := r.withControls(ctx, &gateway.state, root); err != nil {
		return p, err
	}
	if r.clients != nil {
		if p.clients, p.views, err = r.clients.read(ctx); err != nil {
			return p, err
		}
		if p.clients.Unread && r.strategy.Name() == bundle.StrategyZeroDowntime && bundle.AdoptionWaits(gateway.state, root) {
			// An adoption keeps the roots the clients still use: unless
			// none but the current root can be one (a first install), it
			// waits for them to be read (the load's end queues a
			// reconcile), and dualca is not ready meanwhile. The issuing
			// Secret is kept to a root the gateway as found trusts.
			p.waiting, p.written = true, written{object: gateway.found[0]}
			p.issued, err = r.store.syncIssuing(ctx, how, bundle.Waiting(gateway.state, r.store.served(gateway.found), root, r.clock.Now()), root)
			return p, err
		}
	}
	p.clients.Memory = r.signatures
	p.decision = r.strategy.Plan(gateway.state, root, p.clients, r.clock.Now())
	p.written, err = r.store.write(ctx, gateway, p.decision, root)
	if err != nil && !p.written.reached {
		return p, err
	}
	// After the targets: the gateway is told of a root before the issuing
	// Secret signs with it.
	follow := p.decision
	if err != nil {
		// The targets hold the decision, the record's write beside them
		// failed. The issuing Secret still follows them: a legacy copy
		// drops the old root at once, and left on it while the record's
		// writes fail, it would sign leaves the gateway refuses. But the
		// decision's timing came from a record that did not follow, and
		// may start a root's propagation delay before the targets got
		// the root: the issuing Secret only leaves a root they no longer
		// hold (or expired, or foreign), as while an adoption waits.
		follow = bundle.Waiting(gateway.state, [][]byte{p.decision.CAPEM}, root, r.clock.Now())
	}
	var issuingErr error
	p.issued, issuingErr = r.store.syncIssuing(ctx, how, follow, root)
	if err != nil {
		return p, err
	}
	if err = issuingErr; err != nil {
		return p, err
	}
	if how.fresh() {
		r.store.polled(began)
	}
	return p, nil
}

// clientPace paces the reconciles that a client's change starts: the
// reconcile waits two and a half times the last reconcile's duration,
// counted from that reconcile's end, at most maxClientEventWait. A fan-out over fifty
// thousand clients changes hundreds of them a second, and a reconcile
// reads them all (half a second at that size): started at every change,
// reconciles would take a whole core from the renewals they follow.
// Waiting holds them to 2/7 of the time (a margin under a third: at
// twice the duration, a wait that left none, a fan-out over fifty
// thousand clients measured 33.5 %, the other reconciles and the
// controller's own time counted), and the changes that arrive meanwhile
// join the same work item. A change that comes while a
// reconcile runs is queued by that reconcile as it ends, after the wait:
// queued at once, with the wait counted from the change, it would start
// as soon as the running one ended whenever that ran longer than the
// wait, and reconciles took half the fan-out's time. With a hundred
// clients a reconcile takes milliseconds, and so does the wait. Changes
// of the root and the gateway never wait. The wait only delays what
// dualca learns of its clients' progress, which postpones a server
// switch and never advances one.
type clientPace struct {
	mu sync.Mutex
	// clk is the clock; nil: the real one (monotonic: this paces work,
	// it decides nothing, and it is not the decisions' clock).
	clk clock.PassiveClock
	// running: a reconcile is under way, since start; pending: a client
	// changed meanwhile. While none runs, start and end are the last
	// one's.
	running, pending bool
	start, end       time.Time
}

func (p *clientPace) now() time.Time {
	if p.clk != nil {
		return p.clk.Now()
	}
	return time.Now()
}

// began says a reconcile starts: what changed before it, it reads.
func (p *clientPace) began() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running, p.pending, p.start = true, false, p.now()
}

// ended says the reconcile ended; pending reports whether a client
// changed while it ran, and wait how long the reconcile that reads the
// change waits.
func (p *clientPace) ended() (wait time.Duration, pending bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running, p.end = false, p.now()
	pending, p.pending = p.pending, false
	return p.waitLocked(), pending
}

// changed says a client changed: queue reports whether the change's work
// item is to be queued, after wait; false when the running reconcile
// queues it as it ends.
func (p *clientPace) changed() (wait time.Duration, queue bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		p.pending = true
		return 0, false
	}
	return p.waitLocked(), true
}

// waitLocked is the wait from now, while no reconcile runs.
func (p *clientPace) waitLocked() time.Duration {
	return max(0, min(p.end.Sub(p.start)*5/2, maxClientEventWait)-p.now().Sub(p.end))
}

// maxClientEventWait bounds the wait: a reconcile slowed by an
// unresponsive API server must not leave client progress unseen for long.
// It holds reconciles to 2/7 of the time up to reconciles of 1.6 s: at
// fifty thousand clients in a fan-out they took 270 to 780 ms on average
// and up to 1.75 s.
const maxClientEventWait = 4 * time.Second

// requeueAfter is the jittered poll interval, or less when a write of the
// client progress waits, or when the decision will change by time alone
// before then (a delay ends, a root expires).
func (r *reconciler) requeueAfter(p pass) time.Duration {
	after := wait.Jitter(r.poll, 0.1)
	if p.written.deferred > 0 {
		after = min(after, p.written.deferred)
	}
	if next := p.decision.NextCheck; !next.IsZero() {
		if until := next.Sub(r.clock.Now()) + 5*time.Millisecond; until < after {
			after = max(until, 5*time.Millisecond)
		}
	}
	return after
}

// dueClients are the clients a decision wants renewed, moving to root (the
// current root's fingerprint), minus those cert-manager is issuing already
// (returned apart), with what the renewer needs of them.
func dueClients(root string, names []string, views map[string]clientView) (map[types.NamespacedName]dueClient, map[types.NamespacedName]bool) {
	due := make(map[types.NamespacedName]dueClient, len(names))
	inFlight := map[types.NamespacedName]bool{}
	for _, name := range names {
		v, ok := views[name]
		if !ok {
			continue
		}
		key := types.NamespacedName{Namespace: v.cert.Namespace, Name: v.cert.Name}
		if v.inFlight {
			inFlight[key] = true
			continue
		}
		due[key] = dueClient{root: root, cert: v.cert, revision: v.cert.Status.Revision}
	}
	return due, inFlight
}
