package syncer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// TestClientEventsWaitAndShareOneReconcile checks that a burst of client
// events becomes one work item, added only after the wait, and that with
// no wait an event is a work item at once.
func TestClientEventsWaitAndShareOneReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	req, q := newWorkQueue(t)

	const wait = 300 * time.Millisecond
	var changes atomic.Int32
	var told []string // what the tracker was told of the last two events, NAME/gone
	var loaded atomic.Bool
	h := waitingWorkItem[*corev1.Secret](req, func() (time.Duration, bool) { return wait, true }, func(o client.Object, gone bool) {
		changes.Add(1)
		told = append(told[max(0, len(told)-1):], fmt.Sprintf("%s/%t", o.GetName(), gone))
	}, loaded.Load)
	named := func(name string) *corev1.Secret { return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	// While the client cache loads, the tracker is told and nothing is
	// queued: the load's end queues the reconcile (clientLoad).
	h.Create(context.Background(), event.TypedCreateEvent[*corev1.Secret]{Object: named("loading")}, q)
	g.Expect(told).To(Equal([]string{"loading/false"}))
	g.Consistently(q.Len).WithTimeout(2*wait).Should(BeZero(), "an event of the cache's load queues nothing")
	changes.Store(0)
	loaded.Store(true)
	began := time.Now()
	for range 500 {
		h.Update(context.Background(), event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: named("old"), ObjectNew: named("new")}, q)
	}
	h.Create(context.Background(), event.TypedCreateEvent[*corev1.Secret]{Object: named("created")}, q)
	g.Expect(told).To(Equal([]string{"new/false", "created/false"}), "an update tells of the new object")
	h.Delete(context.Background(), event.TypedDeleteEvent[*corev1.Secret]{Object: named("deleted")}, q)
	g.Expect(told).To(Equal([]string{"created/false", "deleted/true"}), "a deletion tells the object is gone")
	g.Expect(changes.Load()).To(BeEquivalentTo(502), "the tracker hears of every event at once, before its work item is queued")
	g.Expect(q.Len()).To(BeZero(), "nothing is queued before the wait ends")
	g.Eventually(q.Len).WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(Equal(1))
	g.Expect(time.Since(began)).To(BeNumerically(">=", wait), "the work item waited")
	got, _ := q.Get()
	g.Expect(got).To(Equal(req))
	q.Done(got)
	g.Consistently(q.Len).WithTimeout(2*wait).Should(BeZero(), "502 events made one work item")

	later := waitingWorkItem[*corev1.Secret](req, func() (time.Duration, bool) { return 0, false }, func(client.Object, bool) {}, loaded.Load)
	later.Generic(context.Background(), event.TypedGenericEvent[*corev1.Secret]{Object: &corev1.Secret{}}, q)
	g.Consistently(q.Len).WithTimeout(100*time.Millisecond).Should(BeZero(), "left to the reconcile under way: nothing queued")

	now := waitingWorkItem[*corev1.Secret](req, func() (time.Duration, bool) { return 0, true }, func(client.Object, bool) {}, loaded.Load)
	now.Generic(context.Background(), event.TypedGenericEvent[*corev1.Secret]{Object: &corev1.Secret{}}, q)
	g.Expect(q.Len()).To(Equal(1), "without a wait the event is a work item at once")
}

// TestClientEventWaitFollowsTheLastReconcile checks the pace of the
// reconciles client events start: a change waits two and a half times
// the last reconcile's duration, counted from its end, never more than
// maxClientEventWait; one that comes while a reconcile runs is left to
// that reconcile, which queues it after the same wait as it ends. So
// reconciles started by client changes take at most 2/7 of the time, up
// to reconciles of 1.6 s.
func TestClientEventWaitFollowsTheLastReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	clk := clocktesting.NewFakePassiveClock(time.Unix(1_000_000, 0))
	p := clientPace{clk: clk}
	changed := func() []any { d, queue := p.changed(); return []any{d, queue} }
	run := func(took time.Duration, changes int) (time.Duration, bool) {
		p.began()
		for range changes {
			g.Expect(changed()).To(Equal([]any{time.Duration(0), false}), "left to the reconcile under way")
		}
		clk.SetTime(clk.Now().Add(took))
		return p.ended()
	}

	g.Expect(changed()).To(Equal([]any{time.Duration(0), true}), "before any reconcile: at once")
	wait, pending := run(3*time.Millisecond, 0)
	g.Expect(pending).To(BeFalse(), "nothing changed while it ran")
	g.Expect(wait).To(Equal(7500 * time.Microsecond))
	g.Expect(changed()).To(Equal([]any{7500 * time.Microsecond, true}))
	clk.SetTime(clk.Now().Add(4 * time.Millisecond))
	g.Expect(changed()).To(Equal([]any{3500 * time.Microsecond, true}), "counted from the reconcile's end")
	clk.SetTime(clk.Now().Add(10 * time.Millisecond))
	g.Expect(changed()).To(Equal([]any{time.Duration(0), true}), "past the wait: at once")

	wait, pending = run(500*time.Millisecond, 3)
	g.Expect(pending).To(BeTrue(), "changes while it ran: it queues their reconcile")
	g.Expect(wait).To(Equal(1250*time.Millisecond), "after two and a half times its duration")
	g.Expect(changed()).To(Equal([]any{1250 * time.Millisecond, true}), "a change after the end waits as long")
	wait, pending = run(1600*time.Millisecond, 1)
	g.Expect(pending).To(BeTrue())
	g.Expect(wait).To(Equal(4*time.Second), "2/7 of the time, up to reconciles of 1.6 s")
	wait, _ = run(2*time.Second, 0)
	g.Expect(wait).To(Equal(maxClientEventWait))
	_, pending = run(time.Millisecond, 0)
	g.Expect(pending).To(BeFalse(), "what changed before a reconcile began, it read")
}

// TestTheGatewaysOwnWritesStartNoReconcile checks the gateway watch's
// filter: the creation or update to the version dualca wrote last is
// dropped; any other version, and every deletion, passes.
func TestTheGatewaysOwnWritesStartNoReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	s := &targetState{}
	p := notOwnWrite[*corev1.Secret](s)
	at := func(rv string) *corev1.Secret {
		sec := &corev1.Secret{}
		sec.ResourceVersion = rv
		return sec
	}
	g.Expect(p.Update(event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: at("6"), ObjectNew: at("7")})).To(BeTrue(), "nothing written yet")

	s.wrote(at("7"))
	g.Expect(p.Update(event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: at("6"), ObjectNew: at("7")})).To(BeFalse(), "dualca's own update")
	g.Expect(p.Create(event.TypedCreateEvent[*corev1.Secret]{Object: at("7")})).To(BeFalse(), "dualca's own creation")
	g.Expect(p.Update(event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: at("7"), ObjectNew: at("8")})).To(BeTrue(), "someone else's update")
	g.Expect(p.Create(event.TypedCreateEvent[*corev1.Secret]{Object: at("9")})).To(BeTrue(), "someone else's creation")
	g.Expect(p.Delete(event.TypedDeleteEvent[*corev1.Secret]{Object: at("7")})).To(BeTrue(), "a deletion of dualca's version")
	g.Expect(p.Generic(event.TypedGenericEvent[*corev1.Secret]{Object: at("7")})).To(BeTrue())
	g.Expect(p.Update(event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: at(""), ObjectNew: at("")})).To(BeTrue(), "no version known")
}

// TestAnEventOfTheWriteUnderWayWaitsForItsReply checks the targets'
// handler: an event that comes while dualca's write of the target is
// under way (the watch ahead of the write's reply) is queued once the
// write has ended, and not at all when it was that write; without a
// write under way, or for a deletion, an event is queued at once.
func TestAnEventOfTheWriteUnderWayWaitsForItsReply(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	req, q := newWorkQueue(t)
	s := &targetState{}
	h := targetWorkItem[*corev1.Secret](req, s)
	ctx := context.Background()
	at := func(rv string) *corev1.Secret {
		sec := &corev1.Secret{}
		sec.ResourceVersion = rv
		return sec
	}
	update := func(rv string) {
		h.Update(ctx, event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: at("1"), ObjectNew: at(rv)}, q)
	}
	drain := func() {
		for q.Len() > 0 {
			item, _ := q.Get()
			q.Done(item)
			q.Forget(item)
		}
	}

	update("5")
	g.Expect(q.Len()).To(Equal(1), "no write under way: at once")
	drain()

	// The event of dualca's own write, before its reply: never queued.
	end := s.beginWrite()
	update("6")
	g.Consistently(q.Len, 100*time.Millisecond).Should(BeZero(), "not while the write is under way")
	s.wrote(at("6"))
	end()
	g.Consistently(q.Len, 100*time.Millisecond).Should(BeZero(), "the write's own event")

	// Someone else's version, during a write: queued once the write ends.
	end = s.beginWrite()
	update("7")
	g.Consistently(q.Len, 100*time.Millisecond).Should(BeZero(), "not while the write is under way")
	s.wrote(at("8"))
	end()
	g.Eventually(q.Len).Should(Equal(1), "another version, once the write has ended")
	drain()

	// A write that failed: the event is someone else's.
	end = s.beginWrite()
	h.Create(ctx, event.TypedCreateEvent[*corev1.Secret]{Object: at("9")}, q)
	end()
	g.Eventually(q.Len).Should(Equal(1), "the write failed: the event is another's")
	drain()

	// A deletion does not wait.
	end = s.beginWrite()
	h.Delete(ctx, event.TypedDeleteEvent[*corev1.Secret]{Object: at("8")}, q)
	g.Expect(q.Len()).To(Equal(1), "a deletion at once")
	end()
	drain()

	// The latest own version, the write over: not queued.
	update("8")
	g.Expect(q.Len()).To(BeZero(), "dualca's own version")
}

// newWorkQueue is the gateway's work item and a controller's queue, shut
// down when the test ends.
func newWorkQueue(t *testing.T) (reconcile.Request, workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "gw", Name: "gateway-credential"}}, q
}

// syncingSource is a client source whose sync ends when its test says.
type syncingSource struct{ synced chan error }

func (s syncingSource) Start(context.Context, workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	return nil
}

func (s syncingSource) WaitForSync(ctx context.Context) error {
	select {
	case err := <-s.synced:
		return err
	case <-ctx.Done():
		return nil
	}
}

// TestTheClientLoadEndsWithItsLastSource checks clientLoad: the
// controller is not told of the client sources' sync (their Start
// returns at once, and they are no syncing sources); the clients count as
// read, with one reconcile queued, only once every source has synced; and
// a source that fails to sync stops the manager with its error.
func TestTheClientLoadEndsWithItsLastSource(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	req, q := newWorkQueue(t)
	m := NewMetrics()
	load := newClientLoad(req, m, 2)
	certs, requests := syncingSource{make(chan error, 1)}, syncingSource{make(chan error, 1)}
	for _, src := range []syncingSource{certs, requests} {
		s := load.source(src)
		_, syncing := s.(source.TypedSyncingSource[reconcile.Request])
		g.Expect(syncing).To(BeFalse(), "the controller does not wait for it")
		g.Expect(s.Start(t.Context(), q)).To(Succeed())
	}
	g.Expect(testutil.ToFloat64(m.clientsRead)).To(BeZero())
	certs.synced <- nil
	g.Consistently(load.loaded.Load).WithTimeout(200*time.Millisecond).Should(BeFalse(), "one source of two has synced")
	g.Expect(q.Len()).To(BeZero())
	requests.synced <- nil
	g.Eventually(load.loaded.Load).WithTimeout(10 * time.Second).Should(BeTrue())
	g.Expect(q.Len()).To(Equal(1), "the load's end queues the reconcile that reads the clients")
	g.Expect(testutil.ToFloat64(m.clientsRead)).To(Equal(1.0))

	failing := newClientLoad(req, NewMetrics(), 1)
	src := syncingSource{make(chan error, 1)}
	g.Expect(failing.source(src).Start(t.Context(), q)).To(Succeed())
	src.synced <- errors.New("timed out waiting for cache to be synced")
	g.Expect(failing.Start(t.Context())).To(MatchError(ContainSubstring("reading the clients: timed out")), "the manager stops with the error")
	g.Expect(failing.loaded.Load()).To(BeFalse())
}
