package syncer

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/dualca/dualca/bundle"
)

// rootSecret is the root Secret at key holding r, of type typ.
func rootSecret(key types.NamespacedName, r *bundle.Root, typ corev1.SecretType) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: typ,
		Data: map[string][]byte{corev1.TLSCertKey: r.CertPEM, corev1.TLSPrivateKeyKey: r.KeyPEM, caKey: r.CertPEM}}
}

// pollFixture is a reconciler of one combined gateway Secret whose API
// server (a fake) passes each read's key to get first: an error it returns
// is the read's. The root Secret holds rt.r1; the poll interval is testPoll.
type pollFixture struct {
	rt    *rotation
	clk   *clocktesting.FakeClock
	api   client.WithWatch
	store *gatewayStore
	r     *reconciler
}

const testPoll = time.Minute

func newPollFixture(t *testing.T, get func(client.ObjectKey) error) *pollFixture {
	f := &pollFixture{rt: newRotation(t)}
	f.clk = clocktesting.NewFakeClock(f.rt.now)
	f.api = interceptor.NewClient(fake.NewClientBuilder().WithObjects(rootSecret(f.rt.rootK, f.rt.r1, corev1.SecretTypeTLS)).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := get(key); err != nil {
				return err
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	f.store = &gatewayStore{targets: combined(), api: f.api, writer: f.api, rootKey: f.rt.rootK, clock: f.clk, pollInterval: testPoll,
		parsed: bundle.NewParsed(), record: &record{key: types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}, api: f.api, writer: f.api}}
	m := NewMetrics()
	f.r = &reconciler{store: f.store, strategy: &zeroDowntime{timings: f.rt.timings, clock: f.clk}, clock: f.clk,
		report: &reporter{metrics: m, roots: rootWatch{metrics: m}}, signatures: bundle.NewMemory()}
	return f
}

// TestAFailedPollIsNoPoll: the poll reads root and targets from the API
// server, which is what repairs a lost watch. A poll whose reads failed
// must not count as one: the next reconcile polls again, not the one a
// whole interval later. One that succeeded counts from when it began.
func TestAFailedPollIsNoPoll(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	failGateway := false
	var f *pollFixture
	f = newPollFixture(t, func(key client.ObjectKey) error {
		if failGateway && key == f.rt.gateway {
			return errors.New("the API server is away")
		}
		return nil
	})
	rt, clk, store, r := f.rt, f.clk, f.store, f.r
	store.rootCache = fake.NewClientBuilder().WithObjects(rootSecret(rt.rootK, rt.r1, corev1.SecretTypeTLS)).Build()
	fresh := func() bool {
		_, how := store.source(0)
		return how.fresh()
	}

	g.Expect(fresh()).To(BeTrue(), "the first reconcile polls")
	failGateway = true
	_, err := r.attempt(ctx, 0)
	g.Expect(err).To(MatchError(ContainSubstring("the API server is away")))
	clk.Step(time.Second)
	g.Expect(fresh()).To(BeTrue(), "a poll whose reads failed is no poll: the next reconcile polls again")

	failGateway = false
	began := clk.Now()
	_, err = r.attempt(ctx, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fresh()).To(BeFalse(), "a poll that succeeded counts: the reconciles until the next read the caches")
	clk.SetTime(began.Add(testPoll * 9 / 10))
	g.Expect(fresh()).To(BeTrue(), "the next poll is due an interval (less its jitter) after the last began")
	_, how := store.source(1)
	g.Expect(how).To(Equal(retrying), "a retry after a conflict always reads fresh")
}

// TestAPollReadsTheRootAndTheGatewayAlone: at rest dualca sends the poll's
// two reads and nothing else (the product's at-rest contract). Its record
// is read once, then known from its own writes; a record deleted meanwhile
// makes the write that finds it gone fail as a conflict, and the retry
// reads it again from the API server.
func TestAPollReadsTheRootAndTheGatewayAlone(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	var gets []types.NamespacedName
	f := newPollFixture(t, func(key client.ObjectKey) error {
		gets = append(gets, key)
		return nil
	})
	rt, clk, api, r, recordKey := f.rt, f.clk, f.api, f.r, f.store.record.key

	_, err := r.attempt(ctx, 0)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gets).To(ConsistOf(rt.rootK, recordKey, rt.gateway), "the first reconcile reads the record once")
	for range 3 {
		gets = nil
		clk.Step(testPoll)
		_, err = r.attempt(ctx, 0)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(gets).To(ConsistOf(rt.rootK, rt.gateway), "a poll at rest: the root and the gateway, nothing else")
	}

	// The record deleted behind dualca's back, then a new root: the write
	// that finds the record gone is a conflict, and the retry reads it.
	g.Expect(api.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: recordKey.Namespace, Name: recordKey.Name}})).To(Succeed())
	root := &corev1.Secret{}
	g.Expect(api.Get(ctx, rt.rootK, root)).To(Succeed())
	root.Data = rootSecret(rt.rootK, rt.r2, corev1.SecretTypeTLS).Data
	g.Expect(api.Update(ctx, root)).To(Succeed())
	clk.Step(testPoll)
	_, err = r.attempt(ctx, 0)
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "the record gone: %v", err)
	gets = nil
	_, err = r.attempt(ctx, 1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gets).To(ContainElement(recordKey), "the retry reads the record again")
	rec := &corev1.Secret{}
	g.Expect(api.Get(ctx, recordKey, rec)).To(Succeed(), "and writes it back")
}

// TestStatusJudgesTheRootAsTheControllerDoes: `dualca status` reads the
// root Secret with the controller's own reader, so a root the controller
// refuses (here: valid PEM in a Secret that is not of type
// kubernetes.io/tls) is not reported valid.
func TestStatusJudgesTheRootAsTheControllerDoes(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	rt := newRotation(t)
	for typ, valid := range map[corev1.SecretType]bool{corev1.SecretTypeTLS: true, corev1.SecretTypeOpaque: false} {
		c := fake.NewClientBuilder().WithObjects(rootSecret(rt.rootK, rt.r1, typ),
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: rt.gateway.Namespace, Name: rt.gateway.Name}}).Build()
		store := &gatewayStore{rootKey: rt.rootK, clock: clocktesting.NewFakePassiveClock(rt.now)}
		_, _, controllerErr := store.readRoot(ctx, c)
		g.Expect(controllerErr == nil).To(Equal(valid), "the controller takes a root in a Secret of type %q: %v", typ, controllerErr)

		r, err := Status(ctx, c, StatusOptions{GatewaySecret: rt.gateway, RootSecret: rt.rootK}, rt.now)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Root.Valid).To(Equal(valid), "status calls valid a root in a Secret of type %q: %+v", typ, r.Root)
		if !valid {
			g.Expect(r.Root.Reason).To(Equal(controllerErr.Error()), "status gives the controller's reason")
		}
	}
}
