package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestClientEventsWaitAndShareOneReconcile checks that a burst of client
// events becomes one work item, added only after the wait, and that with
// no wait an event is a work item at once.
func TestClientEventsWaitAndShareOneReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "gw", Name: "gateway-credential"}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()

	const wait = 300 * time.Millisecond
	var changes atomic.Int32
	h := waitingWorkItem[*corev1.Secret](req, func() time.Duration { return wait }, func() { changes.Add(1) })
	began := time.Now()
	for range 500 {
		h.Update(context.Background(), event.TypedUpdateEvent[*corev1.Secret]{ObjectOld: &corev1.Secret{}, ObjectNew: &corev1.Secret{}}, q)
	}
	h.Create(context.Background(), event.TypedCreateEvent[*corev1.Secret]{Object: &corev1.Secret{}}, q)
	h.Delete(context.Background(), event.TypedDeleteEvent[*corev1.Secret]{Object: &corev1.Secret{}}, q)
	g.Expect(changes.Load()).To(BeEquivalentTo(502), "the tracker hears of every event at once, before its work item is queued")
	g.Expect(q.Len()).To(BeZero(), "nothing is queued before the wait ends")
	g.Eventually(q.Len).WithTimeout(10 * time.Second).WithPolling(5 * time.Millisecond).Should(Equal(1))
	g.Expect(time.Since(began)).To(BeNumerically(">=", wait), "the work item waited")
	got, _ := q.Get()
	g.Expect(got).To(Equal(req))
	q.Done(got)
	g.Consistently(q.Len).WithTimeout(2*wait).Should(BeZero(), "502 events made one work item")

	now := waitingWorkItem[*corev1.Secret](req, func() time.Duration { return 0 }, func() {})
	now.Generic(context.Background(), event.TypedGenericEvent[*corev1.Secret]{Object: &corev1.Secret{}}, q)
	g.Expect(q.Len()).To(Equal(1), "without a wait the event is a work item at once")
}

// TestClientEventWaitFollowsTheLastReconcile checks the wait: twice the
// last reconcile's duration, never more than maxClientEventWait.
func TestClientEventWaitFollowsTheLastReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	var r Reconciler
	g.Expect(r.clientEventWait()).To(BeZero(), "before any reconcile")
	r.took.Store(int64(3 * time.Millisecond))
	g.Expect(r.clientEventWait()).To(Equal(6 * time.Millisecond))
	r.took.Store(int64(550 * time.Millisecond))
	g.Expect(r.clientEventWait()).To(Equal(maxClientEventWait))
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
