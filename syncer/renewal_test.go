package syncer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRenewalRateLimiterPacesAndBacksOff checks the delays the renewal queue
// is given, on a fake clock (so a busy machine changes nothing): a burst
// goes at once, then one client per 1/qps, each with at most a tenth of
// that interval of jitter; as the clock moves the bucket refills at qps, up
// to the burst; a client that keeps failing waits twice as long each time,
// up to the cap.
func TestRenewalRateLimiterPacesAndBacksOff(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	const qps, burst = 10, 3
	const base = 50 * time.Millisecond // the per-client base delay
	interval := time.Second / qps
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	l := renewalRateLimiter(qps, burst, 2*time.Second, clk)
	n := 0
	when := func() time.Duration {
		n++
		return l.When(types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("client-", n)})
	}
	paced := func(d, want time.Duration, what string) {
		t.Helper()
		g.Expect(d).To(BeNumerically(">=", want), what)
		g.Expect(d).To(BeNumerically("<", want+interval/10), "%s: at most a tenth of the interval of jitter", what)
	}

	// The clock stands still: the burst, then one client per interval.
	for i := range 10 {
		want := base
		if i >= burst {
			want = time.Duration(i-burst+1) * interval
		}
		paced(when(), want, fmt.Sprint("client ", i))
	}
	// Half an interval after the last token is due, the next one is due
	// half an interval later: tokens come at qps, not sooner.
	clk.SetTime(clk.Now().Add(7*interval + interval/2))
	paced(when(), interval/2, "half an interval after the last")
	// The bucket refills at qps up to the burst, never beyond: a long quiet
	// time gives one burst, then the pace again.
	clk.SetTime(clk.Now().Add(time.Hour))
	for i := range burst {
		paced(when(), base, fmt.Sprint("after an hour, client ", i))
	}
	paced(when(), interval, "after an hour, past the burst")

	failing := types.NamespacedName{Namespace: "ns", Name: "failing"}
	slow := renewalRateLimiter(1000, 1000, 2*time.Second, clk) // the bucket never binds
	var delays []time.Duration
	for range 8 {
		delays = append(delays, slow.When(failing).Truncate(10*time.Millisecond))
	}
	g.Expect(delays).To(Equal([]time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
		400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 2 * time.Second, 2 * time.Second}))
	slow.Forget(failing)
	g.Expect(slow.When(failing)).To(BeNumerically("<", 60*time.Millisecond), "a client that succeeded starts afresh")
}

// TestRenewerQueuesEachDueClientOnce: the reconciler runs at every client
// change and hands over the whole due list each time; a client already
// queued is not queued again (that would spend the bucket), one in flight
// is not queued, and a client no longer due loses its backoff.
func TestRenewerQueuesEachDueClientOnce(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newRenewer(&zeroDowntime{}, testOptions())
	defer w.queue.ShutDown()
	a, b, c := key("a"), key("b"), key("c")

	g.Expect(w.update(map[types.NamespacedName]dueClient{a: {}, b: {}}, nil)).To(Equal(2))
	g.Expect(w.update(map[types.NamespacedName]dueClient{a: {}, b: {}}, nil)).To(Equal(0), "already queued")
	g.Expect(w.update(map[types.NamespacedName]dueClient{a: {}, b: {}, c: {}}, nil)).To(Equal(1))

	// c's first delay is spent; c goes in flight, then drops off the list:
	// its backoff is kept while in flight and forgotten once it is done.
	g.Expect(w.queue.NumRequeues(c)).To(Equal(1))
	w.update(map[types.NamespacedName]dueClient{a: {}, b: {}}, map[types.NamespacedName]bool{c: true})
	g.Expect(w.queue.NumRequeues(c)).To(Equal(1), "in flight: the backoff stays")
	w.update(map[types.NamespacedName]dueClient{a: {}, b: {}}, nil)
	g.Expect(w.queue.NumRequeues(c)).To(Equal(0), "no longer due: the backoff is forgotten")
}

// TestRenewerLeavesAClientActedOnAlone: a client just triggered still
// looks due to a reconcile whose cache has not caught up (with the trigger,
// or after a lost connection with the re-issued Secret); it is not queued
// again (a token wasted, or a second issuance) until it was seen renewed or
// the wait runs out.
func TestRenewerLeavesAClientActedOnAlone(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	now := time.Now()
	fake := &fakeNow{t: now}
	w := newRenewer(&zeroDowntime{}, testOptions())
	w.now = fake.now
	defer w.queue.ShutDown()
	a := key("a")
	due := map[types.NamespacedName]dueClient{a: {}}

	g.Expect(w.update(due, nil)).To(Equal(1))
	w.settle(a, attempt{}, true, nil) // taken by the worker and triggered
	g.Expect(w.update(due, nil)).To(Equal(0), "the cache has not seen the trigger yet")
	w.update(nil, map[types.NamespacedName]bool{a: true})
	g.Expect(w.update(due, nil)).To(Equal(0), "seen in flight, then due again: the Secret's cache may be behind")
	fake.t = now.Add(actedFor)
	g.Expect(w.update(due, nil)).To(Equal(1), "still due after actedFor: queued again")

	w.settle(a, attempt{}, true, nil)
	w.update(nil, nil)
	g.Expect(w.update(due, nil)).To(Equal(1), "renewed (no longer due), then due again at a later rotation: queued at once")
}

// TestTheRenewerLetsGoOfAFanOut: what the renewer keeps of a client
// lasts while the client is queued, in flight, waited for or counted on
// the current root, and no longer: a new root leaves nothing of the
// clients renewed on the last one, and the map they filled is built
// again, so a fan-out over tens of thousands of clients does not keep
// their memory until the process ends.
func TestTheRenewerLetsGoOfAFanOut(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w := newRenewer(&zeroDowntime{}, testOptions())
	defer w.queue.ShutDown()
	const n = 4 * minShrink
	due, inFlight := map[types.NamespacedName]dueClient{}, map[types.NamespacedName]bool{}
	for i := range n {
		k := key(fmt.Sprintf("agent-%d", i))
		due[k], inFlight[k] = dueClient{root: "R2"}, true
	}
	entries := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.clients)
	}

	g.Expect(w.update(due, nil)).To(Equal(n))
	for k := range due {
		w.settle(k, attempt{root: "R2"}, true, nil)
	}
	w.update(nil, inFlight)
	g.Expect(entries()).To(Equal(n), "in flight: each is waited for, its backoff and count kept")
	w.update(nil, nil)
	g.Expect(entries()).To(Equal(n), "renewed: the counts on R2 stay while R2 is the root")

	last := key("agent-0")
	w.update(map[types.NamespacedName]dueClient{last: {root: "R3"}}, nil)
	w.mu.Lock()
	defer w.mu.Unlock()
	g.Expect(w.clients).To(HaveLen(1), "a new root: nothing is kept of the others")
	g.Expect(*w.clients[last]).To(Equal(clientRenewal{queued: true, backoff: true}))
	g.Expect(w.peak).To(Equal(1), "the map was built again for what it holds")
}

// TestRenewerStopsTriggeringAClientThatNeverMoves: a client cert-manager
// re-issues that never lands on the current root (another Issuer's CA) is
// triggered maxTriggersPerRoot times on that root, then reported once
// (event and gauge) and left alone; a new root counts afresh. Before the
// bound it was triggered again at every reconcile, for the whole rotation.
func TestRenewerStopsTriggeringAClientThatNeverMoves(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w, counted, reported, trigger := newTriggerCounting(t, g)
	stuck, other := key("stuck"), key("other")
	on := func(root string, keys ...types.NamespacedName) map[types.NamespacedName]dueClient {
		due := map[types.NamespacedName]dueClient{}
		for _, k := range keys {
			due[k] = dueClient{root: root}
		}
		return due
	}

	for i := range maxTriggersPerRoot {
		g.Expect(trigger(on("R2", stuck))).To(Equal(1), "trigger %d on R2", i+1)
	}
	g.Expect(counted.times(stuck)).To(Equal(maxTriggersPerRoot))
	g.Expect(*reported).To(BeEmpty(), "not abandoned before it is seen due once more")
	g.Expect(trigger(on("R2", stuck, other))).To(Equal(1), "only the other client is queued")
	g.Expect(counted.times(stuck)).To(Equal(maxTriggersPerRoot), "no fourth trigger on R2")
	g.Expect(*reported).To(HaveLen(1))
	g.Expect((*reported)[0].key).To(Equal(stuck))
	g.Expect((*reported)[0].root).To(Equal("R2"))
	g.Expect(testutil.ToFloat64(w.metrics.abandoned)).To(Equal(1.0))
	for range 5 {
		g.Expect(w.update(on("R2", stuck), nil)).To(Equal(0))
	}
	g.Expect(counted.times(stuck)).To(Equal(maxTriggersPerRoot), "still none, however many reconciles")
	g.Expect(*reported).To(HaveLen(1), "reported once per client and root")

	// A new root: the count starts afresh, and the bound holds again.
	g.Expect(trigger(on("R3", stuck))).To(Equal(1), "triggered again on a new root")
	g.Expect(testutil.ToFloat64(w.metrics.abandoned)).To(BeZero())
	for range maxTriggersPerRoot - 1 {
		g.Expect(trigger(on("R3", stuck))).To(Equal(1))
	}
	g.Expect(trigger(on("R3", stuck))).To(Equal(0))
	g.Expect(counted.times(stuck)).To(Equal(2 * maxTriggersPerRoot))
	g.Expect(*reported).To(HaveLen(2))
	g.Expect((*reported)[1].root).To(Equal("R3"), "reported again, for the new root")
	g.Expect(testutil.ToFloat64(w.metrics.abandoned)).To(Equal(1.0))
	w.mu.Lock()
	defer w.mu.Unlock()
	g.Expect(w.clients).To(HaveLen(1), "R2's counts are forgotten")
	g.Expect(w.clients[stuck].triggers).To(Equal(triggerCount{on: attempt{root: "R3"}, n: maxTriggersPerRoot}))
}

// TestAnAbandonedClientIsTriggeredAgainWhenItsSpecChanges: a client
// abandoned while its Issuer could not sign (the soak's broken issuer) is
// triggered again once its Certificate's spec changes (pointed back at the
// right Issuer), on the same root, and counted afresh on the new spec;
// updates of its status alone (cert-manager failing again) change nothing.
// Before, it stayed abandoned until the next root, and the rotation could
// not retire the old one.
func TestAnAbandonedClientIsTriggeredAgainWhenItsSpecChanges(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	w, counted, reported, triggerDue := newTriggerCounting(t, g)
	stuck := key("stuck")
	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: stuck.Namespace, Name: stuck.Name, Generation: 2}}
	trigger := func(c *cmapi.Certificate) int {
		return triggerDue(map[types.NamespacedName]dueClient{stuck: {root: "R2", cert: c}})
	}

	for range maxTriggersPerRoot {
		g.Expect(trigger(crt)).To(Equal(1))
	}
	g.Expect(trigger(crt)).To(Equal(0), "abandoned on R2 at generation 2")
	g.Expect(*reported).To(HaveLen(1))
	g.Expect(testutil.ToFloat64(w.metrics.abandoned)).To(Equal(1.0))

	failedAgain := crt.DeepCopy()
	failedAgain.Status.LastFailureTime = &metav1.Time{Time: w.now()}
	failedAgain.ResourceVersion = "9"
	g.Expect(trigger(failedAgain)).To(Equal(0), "a new status is no new spec")

	healed := failedAgain.DeepCopy()
	healed.Generation = 3
	healed.Spec.IssuerRef.Name = "the-root-ca"
	g.Expect(trigger(healed)).To(Equal(1), "its spec changed: triggered again on the same root")
	g.Expect(testutil.ToFloat64(w.metrics.abandoned)).To(BeZero(), "no longer abandoned")
	for range maxTriggersPerRoot - 1 {
		g.Expect(trigger(healed)).To(Equal(1))
	}
	g.Expect(trigger(healed)).To(Equal(0), "the bound holds on the new spec")
	g.Expect(counted.times(stuck)).To(Equal(2 * maxTriggersPerRoot))
	g.Expect(*reported).To(HaveLen(2), "reported again, for the new spec")
	g.Expect((*reported)[1].root).To(Equal("R2"))
	g.Expect((*reported)[1].cert.Generation).To(Equal(int64(3)))
}

// TestEditingACertificateDoesNotOutpaceActedFor plays a writer of a client
// namespace who edits an abandoned client's Certificate at every
// reconcile: each new spec may start a fresh count, but the client is
// still triggered no more than once per actedFor.
func TestEditingACertificateDoesNotOutpaceActedFor(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	fake := &fakeNow{t: time.Now()}
	counted := &countedRenewals{}
	w := newRenewer(counted, testOptions())
	w.now = fake.now
	t.Cleanup(w.queue.ShutDown)
	edited := key("edited")
	for generation := int64(1); generation <= 20; generation++ {
		crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: edited.Namespace, Name: edited.Name, Generation: generation}}
		for range w.update(map[types.NamespacedName]dueClient{edited: {root: "R2", cert: crt}}, nil) {
			g.Expect(w.next(t.Context())).To(BeTrue())
		}
		fake.t = fake.t.Add(actedFor / 10)
	}
	g.Expect(counted.times(edited)).To(Equal(2), "20 edits over 2 actedFor periods: one trigger per period")
}

// newTriggerCounting is a renewer on a fake clock whose renewals are
// counted and whose abandoned clients are collected in *reported, with
// trigger: it queues the due clients and lets a worker act on each, then
// lets the acted-on wait run out, so that the clients still look due; it
// returns how many were queued.
func newTriggerCounting(t *testing.T, g Gomega) (w *renewer, counted *countedRenewals, reported *[]abandonedClient,
	trigger func(map[types.NamespacedName]dueClient) int) {
	fake := &fakeNow{t: time.Now()}
	counted = &countedRenewals{}
	w = newRenewer(counted, testOptions())
	w.now = fake.now
	reported = &[]abandonedClient{}
	w.report = func(c []abandonedClient) { *reported = append(*reported, c...) }
	t.Cleanup(w.queue.ShutDown)
	ctx := t.Context()
	trigger = func(due map[types.NamespacedName]dueClient) int {
		n := w.update(due, nil)
		for range n {
			g.Expect(w.next(ctx)).To(BeTrue())
		}
		fake.t = fake.t.Add(actedFor)
		return n
	}
	return w, counted, reported, trigger
}

// TestAnAbandonedClientIsAWarningOnTheGatewaySecret: the report is one
// Warning per client on the gateway Secret, the client's Certificate as
// the related object (the events API would fold several clients' events
// into one series without it), naming the client and the root.
func TestAnAbandonedClientIsAWarningOnTheGatewaySecret(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rec := &recordedEvents{}
	gateway := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "gw", Name: "gateway"}}
	w := newRenewer(&zeroDowntime{}, testOptions())
	defer w.queue.ShutDown()
	w.reportTo(rec, func(context.Context) client.Object {
		if gateway == nil {
			return nil // as the store says it: no object
		}
		return gateway
	})
	a := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
	b := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"}}
	root := "3f9a1c2b7d4e" + strings.Repeat("0", 52)
	w.report([]abandonedClient{{key: key("a"), root: root, cert: a}, {key: key("b"), root: root, cert: b}})
	g.Expect(rec.events).To(HaveLen(2))
	for i, crt := range []*cmapi.Certificate{a, b} {
		e := rec.events[i]
		g.Expect(e.regarding).To(BeIdenticalTo(gateway))
		g.Expect(e.related).To(BeIdenticalTo(crt))
		g.Expect(e.typ).To(Equal(corev1.EventTypeWarning))
		g.Expect(e.reason).To(Equal(reasonClientRenewalAbandoned))
		g.Expect(e.note).To(And(ContainSubstring("client ns/"+crt.Name), ContainSubstring("3 times on root 3f9a1c2b7d4e"),
			ContainSubstring("not triggered again until the next root")))
	}

	// Without the gateway Secret there is nothing to put the event on.
	gateway = nil
	w.report([]abandonedClient{{key: key("a"), root: root, cert: a}})
	g.Expect(rec.events).To(HaveLen(2))
}

type recordedEvent struct {
	regarding, related runtime.Object
	typ, reason, note  string
}

// recordedEvents is an EventRecorder that keeps what it is given.
type recordedEvents struct {
	mu     sync.Mutex
	events []recordedEvent
}

func (r *recordedEvents) Eventf(regarding, related runtime.Object, typ, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, recordedEvent{regarding: regarding, related: related, typ: typ, reason: reason, note: fmt.Sprintf(note, args...)})
}

func (r *recordedEvents) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, typ, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, typ, reason, action, note, args...)
}

// countedRenewals is the zero-downtime strategy whose renewals only count.
type countedRenewals struct {
	zeroDowntime
	mu sync.Mutex
	by map[types.NamespacedName]int
}

func (c *countedRenewals) Renew(_ context.Context, key types.NamespacedName, _ *int) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[types.NamespacedName]int{}
	}
	c.by[key]++
	return true, nil
}

func (c *countedRenewals) times(key types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[key]
}

type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

func TestDueClientsSkipsInFlightIssuance(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	crt := func(name string, busy bool, failedAt bool) clientView {
		c := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: cmapi.CertificateSpec{SecretName: name + "-tls"}}
		if busy {
			setIssuing(c, "ManuallyTriggered", "test", time.Now())
		}
		if failedAt {
			c.Status.LastFailureTime = &metav1.Time{Time: time.Now()}
			c.Status.Conditions = append(c.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionFalse, Reason: "Failed"})
		}
		if name != "missing" {
			c.Status.Revision = ptr.To(7)
		}
		return clientView{cert: c, inFlight: issuing(c)}
	}
	views := map[string]clientView{
		"ns/due": crt("due", false, false), "ns/busy": crt("busy", true, false),
		"ns/failed": crt("failed", false, true), "ns/missing": crt("missing", false, false),
	}
	due, inFlight := dueClients("R2", []string{"ns/busy", "ns/due", "ns/failed", "ns/missing", "ns/gone"}, views)
	g.Expect(inFlight).To(Equal(map[types.NamespacedName]bool{key("busy"): true}))
	g.Expect(due).To(HaveLen(3))
	g.Expect(due[key("due")]).To(Equal(dueClient{revision: ptr.To(7), root: "R2", cert: views["ns/due"].cert}))
	g.Expect(due[key("failed")].root).To(Equal("R2"), "a failed client is due like any other, counted on the root it is to move to")
	g.Expect(due[key("missing")].revision).To(BeNil(), "never issued: the legacy strategy has nothing to delete")
	g.Expect(failed(views["ns/failed"].cert)).To(BeTrue())
	g.Expect(failed(views["ns/busy"].cert)).To(BeFalse(), "a failed client being issued again is in flight, not failed")
}

// TestTheClientCacheHoldsNoSecret: the client cache keeps the selected
// Certificates and their CertificateRequests, both by the client selector,
// and no Secret at all; of a request only what identifies it and its
// certificates.
func TestTheClientCacheHoldsNoSecret(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	o := testOptions()
	o.ClientSelector, o.ClientNamespaces = labels.SelectorFromSet(labels.Set{"app": "agent"}), []string{"agents", "edge"}
	opts := clientCacheOptions(o, nil)
	g.Expect(opts.DefaultNamespaces).To(HaveLen(2))
	g.Expect(opts.DefaultNamespaces).To(HaveKey("agents"))
	g.Expect(opts.DefaultNamespaces).To(HaveKey("edge"))
	var certs, requests cache.ByObject
	for obj, by := range opts.ByObject {
		switch obj.(type) {
		case *cmapi.Certificate:
			certs = by
		case *cmapi.CertificateRequest:
			requests = by
		default:
			t.Errorf("the client cache holds %T", obj)
		}
	}
	g.Expect(certs.Label).To(Equal(o.ClientSelector))
	g.Expect(requests.Label).To(Equal(o.ClientSelector), "cert-manager copies the Certificate's labels onto its requests")

	cr := &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-1-3", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "cert-manager"}},
			Labels: map[string]string{"app": "agent", "app.kubernetes.io/instance": "agent-1"},
			Annotations: map[string]string{cmapi.CertificateNameKey: "agent-1", cmapi.CertificateRequestRevisionAnnotationKey: "3",
				cmapi.CertificateRequestPrivateKeyAnnotationKey: "agent-1-x7k2p", "copied.example/note": "n"}},
		Spec:   cmapi.CertificateRequestSpec{Request: []byte("csr"), Username: "system:serviceaccount:cert-manager:cert-manager"},
		Status: cmapi.CertificateRequestStatus{Certificate: []byte("crt"), CA: []byte("ca"), Conditions: []cmapi.CertificateRequestCondition{{Type: "Ready"}}},
	}
	out, err := requests.Transform(cr)
	g.Expect(err).NotTo(HaveOccurred())
	kept := out.(*cmapi.CertificateRequest)
	g.Expect(kept.Annotations).To(Equal(map[string]string{cmapi.CertificateNameKey: "agent-1", cmapi.CertificateRequestRevisionAnnotationKey: "3"}))
	g.Expect(kept.Spec).To(BeZero(), "the CSR is of no use")
	g.Expect(kept.Status).To(Equal(cmapi.CertificateRequestStatus{Certificate: []byte("crt"), CA: []byte("ca")}))
	g.Expect(kept.ManagedFields).To(BeNil())
	g.Expect(kept.Labels).To(BeNil(), "the API server selected it by them; nothing reads them")
}

func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: "ns", Name: name} }

func testOptions() Options {
	return Options{RenewalQPS: 10, RenewalBurst: 3, PollInterval: 5 * time.Minute, Metrics: NewMetrics(), Clock: clock.RealClock{}}
}

func TestProgressOnlyChangesAreTold(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	base := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			"dualca.io/phase": "Renewing", "dualca.io/clients": "renewed=1 pending=9 failed=0"}},
		Data: map[string][]byte{"ca.crt": []byte("a")},
	}
	progress := base.DeepCopy()
	progress.Annotations["dualca.io/clients"] = "renewed=2 pending=8 failed=0"
	phase := progress.DeepCopy()
	phase.Annotations["dualca.io/phase"] = "Retiring"
	data := progress.DeepCopy()
	data.Data["ca.crt"] = []byte("b")

	s := &gatewayStore{targets: combined()}
	only := func(a, b *corev1.Secret) bool { return s.progressOnly([]client.Object{a}, []client.Object{b}) }
	g.Expect(only(base, progress)).To(BeTrue())
	g.Expect(only(base, phase)).To(BeFalse(), "a phase change is written at once")
	g.Expect(only(base, data)).To(BeFalse(), "a bundle change is written at once")
	g.Expect(only(base, base.DeepCopy())).To(BeFalse(), "nothing changed")
}

// TestRenewerOverlapsAsManyRoundTripsAsItsRateNeeds: with every round trip
// held open, the renewer has exactly RenewalWorkers(qps) in flight, never
// more: enough at a high rate that a slow API server does not slow the
// pace, never fewer than the minimum at a low one, capped at a high one.
// Released, every client is acted on once.
func TestRenewerOverlapsAsManyRoundTripsAsItsRateNeeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		qps     float64
		workers int
	}{{5, minRenewalWorkers}, {100, 20}, {1000, maxRenewalWorkers}} {
		t.Run(fmt.Sprint("qps=", tc.qps), func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(RenewalWorkers(tc.qps)).To(Equal(tc.workers))
			const clients = 100
			o := testOptions()
			o.RenewalQPS, o.RenewalBurst = tc.qps, clients // every client ready at once
			held := &heldRenewals{release: make(chan struct{})}
			w := newRenewer(held, o)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Start(ctx) }()
			defer func() { cancel(); <-done }()

			due := map[types.NamespacedName]dueClient{}
			for i := range clients {
				due[key(fmt.Sprint("client-", i))] = dueClient{}
			}
			g.Expect(w.update(due, nil)).To(Equal(clients))
			// Generous waits: a busy machine may be slow to start the workers.
			g.Eventually(held.inFlight).WithTimeout(30*time.Second).Should(Equal(tc.workers), "every worker holds a round trip open")
			g.Consistently(held.inFlight).WithTimeout(300*time.Millisecond).Should(Equal(tc.workers), "and no more start")
			close(held.release)
			g.Eventually(held.acted).WithTimeout(30*time.Second).Should(HaveLen(clients), "released, every client is acted on")
			once := map[types.NamespacedName]bool{}
			for _, k := range held.acted() {
				once[k] = true
			}
			g.Expect(once).To(HaveLen(clients), "each once")
			g.Expect(held.peak()).To(Equal(tc.workers))
		})
	}
}

// heldRenewals is the zero-downtime strategy whose every renewal waits for
// release: it counts the round trips open at once, and the clients acted on.
type heldRenewals struct {
	zeroDowntime
	release chan struct{}

	mu          sync.Mutex
	open, most  int
	actedOnKeys []types.NamespacedName
}

func (h *heldRenewals) Renew(ctx context.Context, key types.NamespacedName, _ *int) (bool, error) {
	h.mu.Lock()
	h.open++
	h.most = max(h.most, h.open)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.open--
		h.mu.Unlock()
	}()
	select {
	case <-h.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	h.mu.Lock()
	h.actedOnKeys = append(h.actedOnKeys, key)
	h.mu.Unlock()
	return true, nil
}

func (h *heldRenewals) inFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

func (h *heldRenewals) peak() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.most
}

func (h *heldRenewals) acted() []types.NamespacedName {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]types.NamespacedName(nil), h.actedOnKeys...)
}
