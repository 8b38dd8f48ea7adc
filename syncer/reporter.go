package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/dualca/dualca/bundle"
)

// reporter tells what reconciles found and did: events, log lines and
// metrics. It remembers what it reported of a problem that persists (an
// invalid root, an unusable client Secret), so that such a problem is told
// once, not at every retry; and when it first saw each root, for the lag
// and propagation metrics.
type reporter struct {
	recorder recorder.EventRecorder
	metrics  *Metrics
	strategy strategy
	rootKey  types.NamespacedName
	qps      float64
	// gateway is the primary target as the API server has it, or nil:
	// what an event about a missing root is about.
	gateway func(context.Context) client.Object
	roots   rootWatch

	// lastInvalid is the reason last reported for an invalid root; "" once
	// the root is usable.
	lastInvalid string
	// clientProblems are the problems last reported, by client.
	clientProblems map[string]string
	// foreign are the foreign inputs last found, told once each.
	foreignTold map[string]bool
	// refusedRoot is the root a refused plan (bundle.Decision.Refused)
	// keeps out of the gateway, told once; "" while no plan is refused.
	refusedRoot string
}

// rootSeen records a usable root read.
func (r *reporter) rootSeen(fp string, now time.Time) {
	r.metrics.rootValid.Set(1)
	r.roots.saw(fp, now)
}

// failed counts a failed reconcile by reason and, when a valid root was
// read, how long the gateway has been behind it.
func (r *reporter) failed(err error, rootFP string, now time.Time) {
	var invalid *bundle.InvalidError
	switch {
	case errors.As(err, &invalid):
		r.metrics.rootValid.Set(0)
		r.metrics.syncErrors.WithLabelValues("root_invalid").Inc()
		return
	case apierrors.IsConflict(err):
		r.metrics.syncErrors.WithLabelValues("conflict").Inc()
	default:
		r.metrics.syncErrors.WithLabelValues("api_error").Inc()
	}
	if rootFP != "" {
		r.roots.behind(rootFP, now)
	}
}

// invalidRoot turns an unusable root into one Warning event per distinct
// reason and an error that makes the controller retry with backoff. The
// gateway Secret is not touched. rootObj is the root Secret, nil when missing.
func (r *reporter) invalidRoot(ctx context.Context, rootObj *corev1.Secret, err error) error {
	var invalid *bundle.InvalidError
	if !errors.As(err, &invalid) {
		return err
	}
	if reason := invalid.Error(); r.lastInvalid != reason {
		// The root Secret, or the gateway when the root is missing; when
		// neither exists, nothing: the reason is told once one does. (A nil
		// *Secret is not a nil runtime.Object: the recorder would panic.)
		var regarding runtime.Object
		if rootObj != nil {
			regarding = rootObj
		} else if gw := r.gateway(ctx); gw != nil {
			regarding = gw
		}
		if regarding != nil {
			r.lastInvalid = reason
			r.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, bundle.ReasonRootInvalid, "Validate",
				"root %s is not usable, gateway left unchanged: %s", r.rootKey, reason)
		}
	}
	return fmt.Errorf("root secret %s: %w", r.rootKey, err)
}

// synced reports a reconcile that brought the gateway in step: metrics, a
// log line when the Secret was written, the decision's events, and the
// client Secrets that cannot be read.
func (r *reporter) synced(ctx context.Context, p pass, now time.Time) {
	d := p.decision
	events := r.refusal(ctx, p, now)
	r.metrics.decision(d, r.strategy.Phase(d), p.clients, now)
	r.lastInvalid = ""
	if p.written.tampered != "" {
		r.metrics.tampered.Inc()
		events = append([]bundle.Event{{Warning: true, Reason: bundle.ReasonGatewayTampered,
			Message: "gateway Secret was changed outside dualca (" + p.written.tampered + "); written again from dualca's record, nothing of it trusted"}}, events...)
	}
	if len(p.written.restored) > 0 {
		events = append([]bundle.Event{{Warning: true, Reason: bundle.ReasonGatewayRestored,
			Message: restoredWhat(p.written.restored) + " was deleted; restored as dualca last wrote it, server credential and rotation state included"}}, events...)
	}
	r.foreign(p.written.foreign)
	log := logf.FromContext(ctx)
	if p.written.wrote {
		log.Info("gateway secret written", "strategy", d.State.Strategy, "phase", d.State.Phase,
			"root", bundle.Short(d.State.Root), "server", bundle.Short(d.State.Server), "roots", len(d.State.BundleRoots))
	}
	for _, e := range sameReasonTogether(events) {
		r.event(p.written.object, e)
		log.Info("event", "reason", e.Reason, "warning", e.Warning, "message", e.Message)
	}
	r.clients(ctx, p.written.object, p.views)
}

// refusal reports a plan refused for its size (bundle/budget.go): the
// gateway was left as it was, behind the current root, so the rotation lag
// grows (alert DualcaRotationLag) and each such reconcile counts as a sync
// error of reason bundle_too_large; its BundleTooLarge Warning is told
// once per root kept out, not at every reconcile. It returns the
// decision's events to tell.
func (r *reporter) refusal(ctx context.Context, p pass, now time.Time) []bundle.Event {
	d := p.decision
	if d.Refused == "" {
		r.refusedRoot = ""
		r.roots.reflected(d.State.Root, now)
		return d.Events
	}
	r.roots.behind(p.rootFP, now)
	r.metrics.syncErrors.WithLabelValues(syncErrorBundleTooLarge).Inc()
	if r.refusedRoot == p.rootFP {
		return nil
	}
	r.refusedRoot = p.rootFP
	logf.FromContext(ctx).Info("plan refused, gateway left as it is", "root", bundle.Short(p.rootFP), "why", d.Refused)
	return d.Events
}

// syncErrorBundleTooLarge is the dualca_sync_errors_total reason of a
// reconcile whose plan was refused for its size.
const syncErrorBundleTooLarge = "bundle_too_large"

// restoredWhat names the targets restored: the gateway Secret as it
// always was, the others by kind and key.
func restoredWhat(ids []string) string {
	if len(ids) == 1 && ids[0] == gatewayRestoredID {
		return "gateway Secret"
	}
	return strings.Join(ids, ", ")
}

// foreign sets the foreign inputs' gauge and tells each input found that
// was not found at the last reconcile with a Warning on the object it is
// in: once, not at every reconcile.
func (r *reporter) foreign(found []foreignInput) {
	r.metrics.foreign.Set(float64(len(found)))
	told := map[string]bool{}
	for _, in := range found {
		told[in.what] = true
		if !r.foreignTold[in.what] && in.object != nil {
			r.event(in.object, bundle.Event{Warning: true, Reason: bundle.ReasonForeignTargetInput,
				Message: "the gateway reads what dualca does not own, left as found: " + in.what})
		}
	}
	r.foreignTold = told
}

// renewalsQueued tells that n clients were queued for renewal, once per batch.
func (r *reporter) renewalsQueued(gateway client.Object, n int, d bundle.Decision) {
	r.event(gateway, bundle.Event{Reason: bundle.ReasonClientRenewalTriggered,
		Message: r.strategy.RenewalMessage(ClientCount(n), bundle.Short(d.State.Root), r.qps)})
}

// clients tells, once per client and problem, which selected clients'
// certificates (as their CertificateRequest tells them) cannot be used: a
// Warning event on the gateway Secret (where dualca may write events, and
// where operators look) and a log line. Such a client is on no root, so a
// rotation renews it.
func (r *reporter) clients(ctx context.Context, gateway client.Object, views map[string]clientView) {
	if r.clientProblems == nil {
		r.clientProblems = map[string]string{}
	}
	for name := range r.clientProblems {
		if views[name].problem == "" {
			delete(r.clientProblems, name)
		}
	}
	var changed []string // sorted, so events come in a stable order
	for name, v := range views {
		if v.problem != "" && r.clientProblems[name] != v.problem {
			changed = append(changed, name)
		}
	}
	slices.Sort(changed)
	for _, name := range changed {
		problem := views[name].problem
		r.clientProblems[name] = problem
		logf.FromContext(ctx).Info("client certificates unusable", "client", name, "reason", problem)
		// The request (or, when none is believed, the Certificate) is the
		// related object: the events API folds events that differ only in
		// their note into one series, and its reference (its
		// resourceVersion included) tells clients and their versions apart.
		var related runtime.Object = views[name].cert
		if cr := views[name].request; cr != nil {
			related = cr
		}
		r.recorder.Eventf(gateway, related, corev1.EventTypeWarning, bundle.ReasonClientInvalid, "Sync",
			"client %s: %s; it is on no root until cert-manager issues it again", name, problem)
	}
}

func (r *reporter) event(gateway client.Object, e bundle.Event) {
	if gateway == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if e.Warning {
		typ = corev1.EventTypeWarning
	}
	r.recorder.Eventf(gateway, nil, typ, e.Reason, "Sync", "%s", note(e.Message))
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

// ClientCount words a number of clients, as events and `dualca status` say it.
func ClientCount(n int) string {
	if n == 1 {
		return "1 client"
	}
	return fmt.Sprintf("%d clients", n)
}
