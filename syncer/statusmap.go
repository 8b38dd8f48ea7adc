package syncer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/dualca/dualca/bundle"
)

// The status ConfigMap (--status-configmap) is dualca's public face, the
// one object an operator needs: dualca publishes there, under StatusKey,
// the Report of the decision it last acted on (public material only:
// fingerprint prefixes, subjects, dates, counts), and takes the operator's
// controls from its annotations, AnnotationPaused and AnnotationPromote.
// `dualca status`, pause, resume and promote read and patch that one
// ConfigMap, so the operator's Role needs no Secret at all, and the
// gateway Secret's annotations are no input of a decision any more: a
// pause set there pauses nothing.
//
// A promote is one-shot: once a decision has consumed it (switched to the
// root, or ignored it), dualca removes it from the ConfigMap with an update
// at the version it read it from, so an operator's newer write is never
// lost.

// StatusKey is the status ConfigMap's data key holding the Report, JSON.
const StatusKey = "status.json"

// PromotePrefix is the shortest promote a root is named by: the prefix
// `dualca status` shows (bundle.Short), which `dualca promote` writes.
const PromotePrefix = 12

// statusMap reads the controls from the status ConfigMap and publishes the
// reports there. The reconcile reads the controls, and publishes when it
// has a promote to consume; the publisher (publisher.go) publishes the
// other reports. Publishes never overlap (the publisher's order lock, or
// a reconcile without a publisher); read is shared with the controls.
type statusMap struct {
	key              types.NamespacedName
	gateway, rootKey types.NamespacedName
	// targets are the objects the rotation is written to, as reported.
	targets []TargetStatus
	api     client.Reader // uncached
	// cache is the ConfigMap's single-object cache, read between polls;
	// nil when watches are disabled.
	cache  client.Reader
	writer client.Writer
	clock  clock.PassiveClock
	poll   time.Duration

	// read is the ConfigMap as controls last found it or a publish left
	// it; nil when missing. Never modified once stored.
	read atomic.Pointer[corev1.ConfigMap]
	// consumed is the promote dualca last removed: a cache still showing
	// it is read again from the API server, so that the removal is not
	// taken for a new promote.
	consumed string
	// published is the report last written (as reportJSON has it), and
	// when; read and written by publish alone.
	published   *publishedReport
	publishedAt time.Time
	// ours are the resourceVersions of dualca's last writes of the
	// ConfigMap, newest last: a version found that is none of them was
	// written by someone else, and what it holds is compared anew.
	ours []string
}

// newStatusMapOf is the status map of the manager's reconciler: the API
// reader (the manager's client would cache every ConfigMap of the
// cluster), and the single-object cache unless watches are disabled.
func newStatusMapOf(mgr ctrl.Manager, o Options, c caches) *statusMap {
	var cached client.Reader
	if !o.DisableWatches && c.status != nil {
		cached = c.status
	}
	return newStatusMap(o, mgr.GetAPIReader(), cached, mgr.GetClient())
}

// newStatusMap is the publisher of the options' status ConfigMap.
func newStatusMap(o Options, api client.Reader, cache client.Reader, writer client.Writer) *statusMap {
	return &statusMap{key: o.StatusConfigMap, gateway: o.Anchor(), rootKey: o.RootSecret, api: api, cache: cache,
		writer: writer, clock: o.Clock, poll: o.PollInterval, targets: targetStatuses(o.targets())}
}

// controls reads the operator's controls: the pause and promote
// annotations of the ConfigMap as found; "" each when it is missing. It
// reads the cache, whose events start a reconcile at every change of a
// control (and whose reflector lists again whenever its watch ends), or
// the API server when there is no cache: the poll's requests are the root's
// and the gateway's alone.
func (m *statusMap) controls(ctx context.Context) (paused, promote string, err error) {
	from := m.cache
	if from == nil {
		from = m.api
	}
	cm := &corev1.ConfigMap{}
	err = from.Get(ctx, m.key, cm)
	if err == nil && from != m.api && m.consumed != "" && cm.Annotations[bundle.AnnotationPromote] == m.consumed {
		cm = &corev1.ConfigMap{}
		err = m.api.Get(ctx, m.key, cm)
	}
	switch {
	case apierrors.IsNotFound(err):
		m.read.Store(nil)
		return "", "", nil
	case err != nil:
		return "", "", fmt.Errorf("reading status configmap %s: %w", m.key, err)
	}
	m.read.Store(cm)
	if cm.Annotations[bundle.AnnotationPromote] != m.consumed {
		m.consumed = ""
	}
	return cm.Annotations[bundle.AnnotationPaused], cm.Annotations[bundle.AnnotationPromote], nil
}

// overlay puts the controls into st, the state a decision starts from, in
// place of whatever the gateway Secret said. A promote naming the current
// root by a prefix (`dualca promote` writes the 12 characters status
// shows) is taken for its whole fingerprint; any other is passed on as
// found, for the decision to ignore with a PromoteIgnored Warning.
func (m *statusMap) overlay(ctx context.Context, st *bundle.State, root *bundle.Root) error {
	paused, promote, err := m.controls(ctx)
	if err != nil {
		return err
	}
	st.Paused, st.Promote = paused, promote
	if p := strings.ToLower(promote); root != nil && len(p) >= PromotePrefix && strings.HasPrefix(root.Fingerprint, p) {
		st.Promote = root.Fingerprint
	}
	return nil
}

// reportOf is the report of the decision d, which the root of fingerprint
// rootFP (usable, read from rootKey; "" when none was) and the clients (nil
// when not tracked) made for gateway.
// It reads no Secret: everything comes from the decision. stalledAfter > 0
// adds the stalled-renewal attention as of now; dualca publishes with 0,
// and `dualca status` applies its own.
func reportOf(gateway, rootKey types.NamespacedName, d bundle.Decision, rootFP string, clients *bundle.Clients,
	stalledAfter time.Duration, now time.Time) *Report {
	st := d.State
	r := &Report{Gateway: gateway.String(), Strategy: st.Strategy, Phase: string(st.Phase), Clients: st.Clients,
		Roots: []BundleRoot{}, Attention: []string{}}
	if !st.RootAddedAt.IsZero() {
		at := st.RootAddedAt
		r.RootAddedAt = &at
	}
	if !st.SwitchedAt.IsZero() {
		at := st.SwitchedAt
		r.SwitchedAt = &at
	}
	if rootFP != "" {
		r.Root = &RootStatus{Secret: rootKey.String(), Valid: true, Fingerprint: bundle.Short(rootFP)}
	}
	r.addControls(st)
	roots := d.Roots
	if roots == nil {
		roots, _ = bundle.ParseCertificates(caKey, d.CAPEM)
	}
	if clients != nil && clients.Unread {
		r.Attention = append(r.Attention, unreadAttention)
	}
	if clients != nil && (!clients.Tracked || clients.Unread) {
		clients = nil
	}
	r.addRoots(roots, st, clients, now)
	r.addFailedClients()
	r.AddStalled(stalledAfter, now)
	if rootFP != "" {
		r.Next = nextOf(d, rootFP)
	}
	return r
}

// unreadAttention is the attention of a report made before the clients
// were read (bundle.Clients.Unread): the client counts it shows are those
// recorded before.
const unreadAttention = "dualca is reading the selected clients (it has just started and their cache is loading): until it has, no root leaves the bundle but by expiry, the server switches only if it must, no client is renewed, and the client counts shown are those recorded before"

// invalidRootReport is the last report with the root Secret invalid for
// reason: the gateway is left as it was, so the rest of the report holds.
func invalidRootReport(last *Report, gateway, rootKey types.NamespacedName, reason string) *Report {
	r := &Report{Gateway: gateway.String(), Roots: []BundleRoot{}}
	if last != nil {
		r = last.copy()
	}
	r.Root = &RootStatus{Secret: rootKey.String(), Reason: reason}
	attention := []string{}
	for _, a := range r.Attention {
		if !strings.HasPrefix(a, invalidRootAttention) {
			attention = append(attention, a)
		}
	}
	r.Attention = append(attention, invalidRootAttention+reason)
	r.Next = &Next{Unknown: "the root Secret is not usable: dualca leaves the gateway Secret as it is until it is"}
	return r
}

const invalidRootAttention = "invalid root: "

// copy is a deep copy of r.
func (r *Report) copy() *Report {
	b, err := json.Marshal(r)
	out := &Report{}
	if err != nil || json.Unmarshal(b, out) != nil {
		return &Report{Gateway: r.Gateway, Roots: []BundleRoot{}, Attention: []string{}}
	}
	return out
}

// published is what a publish did.
type published struct {
	wrote bool
	// deferred is how long a change of the client progress alone waits
	// before it is written; 0 when nothing waits.
	deferred time.Duration
}

// publish writes r to the ConfigMap, creating it when it is missing, and
// removes a promote the decision consumed (consumed: the decision's state
// carries none). It writes only what changed, as the gateway store does:
// a report that says what the last one published said is not written
// (at rest dualca writes nothing), and one that differs in the client
// progress alone at most every progressEvery. `dualca status` judges a
// report's age by what it says comes next, not by its observedAt.
func (m *statusMap) publish(ctx context.Context, r *Report, promoteKept bool) (published, error) {
	now := m.clock.Now()
	r.ObservedAt, r.PollInterval = &now, m.poll.String()
	body, err := json.Marshal(r)
	if err != nil {
		return published{}, fmt.Errorf("encoding the status: %w", err)
	}
	read := m.read.Load()
	switch {
	case read == nil:
		// Missing as last read; created meanwhile (by dualca itself, its
		// cache not caught up yet): written below as any other.
		done, err := m.create(ctx, r, body)
		if !apierrors.IsAlreadyExists(err) {
			return done, err
		}
	case !promoteKept && read.Annotations[bundle.AnnotationPromote] != "":
		return m.consume(ctx, read, r, body)
	}
	if read != nil && (m.published == nil || !slices.Contains(m.ours, read.ResourceVersion)) {
		// What an earlier dualca published (a restart at rest writes
		// nothing either), or what someone else left there: a report
		// edited by hand is written back as dualca has it.
		m.published = publishedOf(ParseReport(read.Data[StatusKey]))
	}
	since := m.clock.Since(m.publishedAt)
	this := publishedOf(r)
	switch {
	case m.published.same(this):
		return published{}, nil
	case m.published.progressOnly(this) && since < progressEvery:
		return published{deferred: progressEvery - since}, nil
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{StatusKey: string(body)}})
	if err != nil {
		return published{}, fmt.Errorf("encoding the status: %w", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: m.key.Namespace, Name: m.key.Name}}
	if err := m.writer.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return m.create(ctx, r, body)
		}
		return published{}, fmt.Errorf("publishing status to configmap %s: %w", m.key, err)
	}
	m.wrote(cm, this)
	return published{wrote: true}, nil
}

// create creates the ConfigMap holding body.
func (m *statusMap) create(ctx context.Context, r *Report, body []byte) (published, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.key.Namespace, Name: m.key.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "dualca"}},
		Data: map[string]string{StatusKey: string(body)},
	}
	if err := m.writer.Create(ctx, cm); err != nil {
		return published{}, fmt.Errorf("creating status configmap %s: %w", m.key, err)
	}
	m.wrote(cm, publishedOf(r))
	return published{wrote: true}, nil
}

// consume writes body and removes the promote the decision consumed, in
// one merge patch at the version the promote was read at (its
// resourceVersion makes it fail on a conflict, as an update would, and
// dualca needs no update right). On a conflict it reads the ConfigMap
// again: a promote the operator changed meanwhile is a new one, and stays.
func (m *statusMap) consume(ctx context.Context, read *corev1.ConfigMap, r *Report, body []byte) (published, error) {
	promote := read.Annotations[bundle.AnnotationPromote]
	cm := read.DeepCopy()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if cm == nil {
			cm = &corev1.ConfigMap{}
			if err := m.api.Get(ctx, m.key, cm); err != nil {
				return err
			}
		}
		meta := map[string]any{"resourceVersion": cm.ResourceVersion}
		if cm.Annotations[bundle.AnnotationPromote] == promote {
			meta["annotations"] = map[string]any{bundle.AnnotationPromote: nil}
		}
		patch, err := json.Marshal(map[string]any{"metadata": meta, "data": map[string]string{StatusKey: string(body)}})
		if err != nil {
			return err
		}
		err = m.writer.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch))
		if apierrors.IsConflict(err) {
			cm = nil
		}
		return err
	})
	if err != nil {
		return published{}, fmt.Errorf("removing the consumed promote from configmap %s: %w", m.key, client.IgnoreNotFound(err))
	}
	m.consumed = promote
	m.wrote(cm, publishedOf(r))
	return published{wrote: true}, nil
}

// wrote remembers the report just published.
func (m *statusMap) wrote(cm *corev1.ConfigMap, r *publishedReport) {
	m.read.Store(cm)
	m.published, m.publishedAt = r, m.clock.Now()
	m.ours = append(m.ours[max(0, len(m.ours)-oursKept+1):], cm.ResourceVersion)
}

// oursKept is how many of its own writes the status map knows by
// resourceVersion: enough for a cache a few writes behind.
const oursKept = 8

// ParseReport is the report a status ConfigMap holds under StatusKey; nil
// when none can be read.
func ParseReport(b string) *Report {
	if b == "" {
		return nil
	}
	r := &Report{}
	if json.Unmarshal([]byte(b), r) != nil {
		return nil
	}
	return r
}

// publishedReport is what a report says, for comparing it with the next
// one: its JSON without what changes at every publish (observedAt), and
// without the client progress too.
type publishedReport struct {
	whole, withoutProgress []byte
}

// publishedOf is r, to compare; nil for nil.
func publishedOf(r *Report) *publishedReport {
	if r == nil {
		return nil
	}
	return &publishedReport{whole: reportJSON(r, false), withoutProgress: reportJSON(r, true)}
}

// same reports whether a and b say the same, when published apart.
func (a *publishedReport) same(b *publishedReport) bool {
	return a != nil && b != nil && bytes.Equal(a.whole, b.whole)
}

// progressOnly reports whether a and b differ in the client progress
// alone: the counts, and the summary line that tells them.
func (a *publishedReport) progressOnly(b *publishedReport) bool {
	return a != nil && b != nil && bytes.Equal(a.withoutProgress, b.withoutProgress)
}

// reportJSON is r without what changes at every publish (observedAt) and,
// progressLeftOut, without the client counts. r is not changed: what is
// left out is left out of shallow copies.
func reportJSON(r *Report, progressLeftOut bool) []byte {
	c := *r
	c.ObservedAt, c.PollInterval = nil, ""
	if progressLeftOut {
		c.Clients = nil
		c.Roots = slices.Clone(c.Roots)
		for i := range c.Roots {
			c.Roots[i].Clients = nil
		}
		if c.Next != nil {
			next := *c.Next
			next.Summary = ""
			c.Next = &next
		}
	}
	b, _ := json.Marshal(&c)
	return b
}

// controlsChanged lets through the ConfigMap's events that change a
// control: its creation with a control set, an update of AnnotationPaused
// or AnnotationPromote, and its deletion (which lifts any control, and
// which dualca repairs by publishing again at once). dualca's own writes
// of the status change neither control (the removal of a consumed promote
// does, once, and the reconcile it starts finds nothing to do), so
// publishing starts no loop.
func controlsChanged() predicate.TypedPredicate[*corev1.ConfigMap] {
	set := func(cm *corev1.ConfigMap) bool {
		return cm.Annotations[bundle.AnnotationPaused] != "" || cm.Annotations[bundle.AnnotationPromote] != ""
	}
	return predicate.TypedFuncs[*corev1.ConfigMap]{
		CreateFunc: func(e event.TypedCreateEvent[*corev1.ConfigMap]) bool { return set(e.Object) },
		DeleteFunc: func(event.TypedDeleteEvent[*corev1.ConfigMap]) bool { return true },
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.ConfigMap]) bool {
			for _, k := range []string{bundle.AnnotationPaused, bundle.AnnotationPromote} {
				if e.ObjectOld.Annotations[k] != e.ObjectNew.Annotations[k] {
					return true
				}
			}
			return false
		},
		GenericFunc: func(event.TypedGenericEvent[*corev1.ConfigMap]) bool { return false },
	}
}

// The reconciler's hooks. Each is a no-op without a status map (tests
// that build a reconciler by hand).

// withControls replaces the controls of the state gw starts from with the
// status ConfigMap's.
func (r *reconciler) withControls(ctx context.Context, gw *bundle.Gateway, root *bundle.Root) error {
	if r.status == nil {
		return nil
	}
	return r.status.overlay(ctx, &gw.State, root)
}

// publishStatus publishes the report of a reconcile that brought the
// gateway in step: handed over to the publisher, unless the decision may
// have consumed a promote, which is removed at once with the report (see
// statusPublisher). It returns how soon a deferred publish of its own
// wants the next reconcile (0: no sooner than otherwise). A failure is
// logged and tried again with the next report: the status never holds the
// gateway back.
func (r *reconciler) publishStatus(ctx context.Context, p pass, now time.Time) time.Duration {
	if r.status == nil || p.rootFP == "" {
		return 0
	}
	kept := p.decision.State.Promote != ""
	if r.publisher == nil || r.status.promoteSet() || kept {
		done, err := r.publishNow(ctx, r.reportOf(p, now), kept)
		if err != nil {
			logf.FromContext(ctx).Error(err, "publishing status")
			return 0
		}
		return done.deferred
	}
	r.publisher.offer(func() *Report { return r.reportOf(p, now) })
	return 0
}

// publishNow publishes rep in the reconcile that made it.
func (r *reconciler) publishNow(ctx context.Context, rep *Report, promoteKept bool) (published, error) {
	if r.publisher != nil {
		return r.publisher.now(ctx, rep, promoteKept)
	}
	return r.status.publish(ctx, rep, promoteKept)
}

// reportOf is the report of pass p, as of now.
func (r *reconciler) reportOf(p pass, now time.Time) *Report {
	var clients *bundle.Clients
	if r.clients != nil {
		clients = &p.clients
	}
	rep := reportOf(r.status.gateway, r.status.rootKey, p.decision, p.rootFP, clients, 0, now)
	rep.Targets = r.status.targets
	if is := p.issued; is.key != "" {
		rep.Issuing = &IssuingStatus{Secret: is.key, Root: bundle.Short(is.action.Holds), Current: is.current(p.rootFP)}
		if !rep.Issuing.Current {
			rep.Issuing.Reason = is.action.Reason
		}
	}
	for _, in := range p.written.foreign {
		rep.Attention = append(rep.Attention, "the gateway reads what dualca does not own, left as found: "+in.what)
	}
	return rep
}

// publishInvalidRoot publishes that the root Secret is not usable, when err
// says so.
func (r *reconciler) publishInvalidRoot(ctx context.Context, err error) {
	var invalid *bundle.InvalidError
	if r.status == nil || !errors.As(err, &invalid) {
		return
	}
	m := r.status
	if _, _, err := m.controls(ctx); err != nil {
		logf.FromContext(ctx).Error(err, "publishing status")
		return
	}
	var last *Report
	if read := m.read.Load(); read != nil {
		last = ParseReport(read.Data[StatusKey])
	}
	rep := invalidRootReport(last, m.gateway, m.rootKey, invalid.Error())
	if _, err := r.publishNow(ctx, rep, true); err != nil {
		logf.FromContext(ctx).Error(err, "publishing status")
	}
}

// sooner is after, or wait when that is sooner and not 0.
func sooner(after, wait time.Duration) time.Duration {
	if wait > 0 {
		return min(after, wait)
	}
	return after
}
