package syncer

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// rotation is a rotation from R1 to R2 in phase Renewing with one client
// on R1, as Plan decides it.
type rotation struct {
	now            time.Time
	r1, r2         *bundle.Root
	clients        bundle.Clients
	steady, renew  bundle.Decision
	rotating       bundle.Gateway
	timings        bundle.Timings
	gateway, rootK types.NamespacedName
}

func newRotation(t *testing.T) *rotation {
	t.Helper()
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	ca1 := certs.MustNew(t, "root-1", now.Add(-2*time.Hour), now.Add(48*time.Hour), certs.Options{IsCA: true}, nil)
	ca2 := certs.MustNew(t, "root-2", now.Add(-time.Hour), now.Add(72*time.Hour), certs.Options{IsCA: true}, nil)
	root := func(ca *certs.CA) *bundle.Root {
		r, err := bundle.ValidateRoot(ca.CertPEM, ca.KeyPEM, ca.CertPEM, now)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	leaf, _, _, err := ca1.Leaf("agent", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := &rotation{now: now, r1: root(ca1), r2: root(ca2),
		clients: bundle.Clients{Tracked: true, Items: []bundle.Client{{Name: "ns/agent", Leaf: bundle.NewClientLeaf(leaf, []*x509.Certificate{ca1.Cert}), CA: []*x509.Certificate{ca1.Cert}}}},
		timings: bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: time.Hour},
		gateway: types.NamespacedName{Namespace: "agents", Name: "gw"}, rootK: types.NamespacedName{Namespace: "cm", Name: "root"}}
	r.steady = bundle.Plan(bundle.Gateway{}, r.r1, r.clients, r.timings, now.Add(-time.Hour))
	r.renew = bundle.Plan(writtenGateway(r.steady), r.r2, r.clients, r.timings, now.Add(-5*time.Minute))
	r.rotating = writtenGateway(r.renew)
	return r
}

// writtenGateway is the gateway holding d, as dualca wrote it.
func writtenGateway(d bundle.Decision) bundle.Gateway {
	return bundle.Gateway{Exists: true, CertPEM: d.CertPEM, KeyPEM: d.KeyPEM, CAPEM: d.CAPEM, State: bundle.ParseState(d.State.Annotations()), Known: d.Known}
}

// TestReportOfTheDecision: the published report is made from the decision
// alone: its state, its roots with the clients that use each, and what
// comes next from its own Upcoming moments. It holds no certificate.
func TestReportOfTheDecision(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rt := newRotation(t)
	d := bundle.Plan(rt.rotating, rt.r2, rt.clients, rt.timings, rt.now)
	r := reportOf(rt.gateway, rt.rootK, d, rt.r2.Fingerprint, &rt.clients, 0, rt.now)

	g.Expect(r.Gateway).To(Equal("agents/gw"))
	g.Expect(r.Strategy).To(Equal(bundle.StrategyZeroDowntime))
	g.Expect(r.Phase).To(Equal(string(bundle.PhaseRenewing)))
	g.Expect(r.RootAddedAt).To(HaveValue(BeTemporally("==", d.State.RootAddedAt)))
	g.Expect(r.Root).To(Equal(&RootStatus{Secret: "cm/root", Valid: true, Fingerprint: bundle.Short(rt.r2.Fingerprint)}))
	g.Expect(r.Clients).To(Equal(&bundle.Progress{Pending: 1}))
	one, none := 1, 0
	g.Expect(r.Roots).To(Equal([]BundleRoot{
		{Fingerprint: bundle.Short(rt.r2.Fingerprint), Subject: rt.r2.Cert.Subject.String(), NotAfter: rt.r2.Cert.NotAfter.UTC(), Current: true, Clients: &none},
		{Fingerprint: bundle.Short(rt.r1.Fingerprint), Subject: rt.r1.Cert.Subject.String(), NotAfter: rt.r1.Cert.NotAfter.UTC(), Server: true, Clients: &one},
	}))
	g.Expect(r.Attention).To(BeEmpty())
	g.Expect(r.Next.Summary).To(HavePrefix("renewing: 1 clients pending; server switch when they are on " + bundle.Short(rt.r2.Fingerprint)))
	g.Expect(r.Next.Upcoming).To(HaveLen(len(d.Upcoming)))
	for i, m := range d.Upcoming {
		g.Expect(r.Next.Upcoming[i].Step).To(Equal(m.Step))
		g.Expect(r.Next.Upcoming[i].At).To(Equal(m.At))
	}
	g.Expect(r.Next.DueNow).To(BeEmpty(), "dualca publishes what it acted on")
	js, err := json.Marshal(r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(js)).NotTo(ContainSubstring("BEGIN"))
	g.Expect(string(js)).NotTo(ContainSubstring(rt.r2.Fingerprint), "prefixes only")

	t.Run("paused, and stalled when asked", func(t *testing.T) {
		g := NewWithT(t)
		gw := rt.rotating
		gw.State.Paused = bundle.PausedTrue
		d := bundle.Plan(gw, rt.r2, rt.clients, rt.timings, rt.now)
		r := reportOf(rt.gateway, rt.rootK, d, rt.r2.Fingerprint, &rt.clients, time.Minute, rt.now)
		g.Expect(r.Paused).To(BeTrue())
		g.Expect(r.PausedAt).To(HaveValue(BeTemporally("==", rt.now)))
		g.Expect(r.Next.Summary).To(HavePrefix("paused: no client is renewed"))
		g.Expect(r.Attention).To(ConsistOf(ContainSubstring("rotation paused by an operator"), ContainSubstring("client renewal stalled")))
	})
	t.Run("clients not tracked", func(t *testing.T) {
		g := NewWithT(t)
		r := reportOf(rt.gateway, rt.rootK, d, rt.r2.Fingerprint, &bundle.Clients{}, 0, rt.now)
		g.Expect(r.Roots).To(HaveEach(HaveField("Clients", BeNil())))
	})
}

// TestAnInvalidRootKeepsTheLastReport: with the root Secret unusable, the
// gateway is left as it is: so is the report, root invalid and said once.
func TestAnInvalidRootKeepsTheLastReport(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rt := newRotation(t)
	last := reportOf(rt.gateway, rt.rootK, rt.renew, rt.r2.Fingerprint, &rt.clients, 0, rt.now)
	r := invalidRootReport(last, rt.gateway, rt.rootK, "tls.key does not match")
	r = invalidRootReport(r, rt.gateway, rt.rootK, "root secret cm/root not found")
	g.Expect(r.Roots).To(Equal(last.Roots))
	g.Expect(r.Root).To(Equal(&RootStatus{Secret: "cm/root", Reason: "root secret cm/root not found"}))
	g.Expect(r.Attention).To(Equal([]string{"invalid root: root secret cm/root not found"}))
	g.Expect(r.Next.Unknown).To(ContainSubstring("not usable"))
	g.Expect(last.Root.Valid).To(BeTrue(), "the last report is left as it was")

	first := invalidRootReport(nil, rt.gateway, rt.rootK, "root secret cm/root not found")
	g.Expect(first.Roots).To(BeEmpty())
	g.Expect(first.Attention).To(ConsistOf("invalid root: root secret cm/root not found"))
}

// statusFixture is a status map on a fake API server, its clock fixed.
type statusFixture struct {
	g     *WithT
	ctx   context.Context
	c     client.Client
	clock *clocktesting.FakePassiveClock
	m     *statusMap
	key   types.NamespacedName
	opts  Options
}

func newStatusFixture(t *testing.T, objs ...client.Object) *statusFixture {
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	key := types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-status"}
	gw, state := types.NamespacedName{Namespace: "agents", Name: "gw"}, types.NamespacedName{Namespace: "dualca", Name: "s"}
	o := Options{GatewaySecret: gw, StateSecret: state, StatusConfigMap: DefaultStatusConfigMap(gw, state),
		RootSecret: types.NamespacedName{Namespace: "cm", Name: "root"}, PollInterval: time.Minute, Clock: clk}
	return &statusFixture{g: NewWithT(t), ctx: context.Background(), c: c, clock: clk, m: newStatusMap(o, c, nil, c), key: key, opts: o}
}

// get is the ConfigMap as the API server has it, nil when missing.
func (f *statusFixture) get() *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	if err := f.c.Get(f.ctx, f.key, cm); err != nil {
		return nil
	}
	return cm
}

// published is the report the ConfigMap holds.
func (f *statusFixture) published() *Report {
	cm := f.get()
	f.g.Expect(cm).NotTo(BeNil())
	r := ParseReport(cm.Data[StatusKey])
	f.g.Expect(r).NotTo(BeNil())
	return r
}

// publish reads the controls and publishes r, as a reconcile does.
func (f *statusFixture) publish(r *Report, promoteKept bool) published {
	_, _, err := f.m.controls(f.ctx)
	f.g.Expect(err).NotTo(HaveOccurred())
	done, err := f.m.publish(f.ctx, r.copy(), promoteKept)
	f.g.Expect(err).NotTo(HaveOccurred())
	return done
}

// TestThePublisherWritesWhatChanged: the ConfigMap is created at the first
// publish, then written when the report changes; a change of observedAt
// alone is never written (at rest dualca writes nothing), one of the client
// progress alone waits for progressEvery.
func TestThePublisherWritesWhatChanged(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	f := newStatusFixture(t)
	g := f.g
	g.Expect(f.m.key).To(Equal(f.key), "the default: the record's namespace, named after the gateway")
	rep := reportOf(rt.gateway, rt.rootK, rt.renew, rt.r2.Fingerprint, &rt.clients, 0, rt.now)

	g.Expect(f.publish(rep, true).wrote).To(BeTrue())
	cm := f.get()
	g.Expect(cm.Data).To(HaveKey(StatusKey))
	g.Expect(cm.Data[StatusKey]).NotTo(ContainSubstring("BEGIN"))
	g.Expect(f.published().ObservedAt).To(HaveValue(BeTemporally("==", f.clock.Now())))
	g.Expect(f.published().PollInterval).To(Equal("1m0s"))
	rv := cm.ResourceVersion

	f.clock.SetTime(f.clock.Now().Add(10 * time.Second))
	g.Expect(f.publish(rep, true)).To(Equal(published{}), "observedAt alone: not written")
	g.Expect(f.get().ResourceVersion).To(Equal(rv))

	progressed := rep.copy()
	progressed.Clients = &bundle.Progress{Renewed: 1}
	g.Expect(f.publish(progressed, true).wrote).To(BeTrue(), "client progress alone, 10 s after the last write: written at once")
	g.Expect(f.published().Clients).To(Equal(progressed.Clients))

	f.clock.SetTime(f.clock.Now().Add(time.Second))
	more := progressed.copy()
	more.Clients = &bundle.Progress{Renewed: 1, Failed: 1}
	g.Expect(f.publish(more, true)).To(Equal(published{deferred: progressEvery - time.Second}), "paced")
	g.Expect(f.published().Clients).To(Equal(progressed.Clients))
	f.clock.SetTime(f.clock.Now().Add(progressEvery))
	g.Expect(f.publish(more, true).wrote).To(BeTrue())
	g.Expect(f.published().Clients).To(Equal(more.Clients))

	phase := more.copy()
	phase.Phase = string(bundle.PhaseRetiring)
	f.clock.SetTime(f.clock.Now().Add(time.Second))
	g.Expect(f.publish(phase, true).wrote).To(BeTrue(), "anything else is written at once")

	rv = f.get().ResourceVersion
	for range 10 {
		f.clock.SetTime(f.clock.Now().Add(time.Minute))
		g.Expect(f.publish(phase, true)).To(Equal(published{}), "poll intervals later, the same report: nothing written")
	}
	g.Expect(f.get().ResourceVersion).To(Equal(rv))
	restarted := newStatusMap(f.opts, f.c, nil, f.c)
	_, _, err := restarted.controls(f.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restarted.publish(f.ctx, phase.copy(), true)).To(Equal(published{}), "a dualca started again, the same report: nothing written")
	g.Expect(f.get().ResourceVersion).To(Equal(rv))

	edited := f.get()
	edited.Data[StatusKey] = `{"phase":"Steady","attention":[]}`
	g.Expect(f.c.Update(f.ctx, edited)).To(Succeed())
	_, _, err = f.m.controls(f.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.publish(phase, true).wrote).To(BeTrue(), "a report edited by someone else is written back")
	g.Expect(f.published().Phase).To(Equal(string(bundle.PhaseRetiring)))
	_, _, err = f.m.controls(f.ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.publish(phase, true)).To(Equal(published{}), "and then left alone")

	g.Expect(f.c.Delete(f.ctx, f.get())).To(Succeed())
	f.clock.SetTime(f.clock.Now().Add(time.Second))
	g.Expect(f.publish(phase, true).wrote).To(BeTrue(), "deleted: created again")
	g.Expect(f.get()).NotTo(BeNil())
}

// TestACacheBehindItsOwnCreateIsNoError: a ConfigMap dualca created, which
// its cache does not show yet, is written as any other.
func TestACacheBehindItsOwnCreateIsNoError(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	f := newStatusFixture(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "dualca", Name: "gw-dualca-status"}})
	rep := reportOf(rt.gateway, rt.rootK, rt.renew, rt.r2.Fingerprint, &rt.clients, 0, rt.now)
	done, err := f.m.publish(f.ctx, rep, true) // read as missing: no controls read
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(done.wrote).To(BeTrue())
	f.g.Expect(f.published().Phase).To(Equal(string(rt.renew.State.Phase)))
}

// TestTheControlsComeFromTheConfigMap: the pause and promote annotations
// of the ConfigMap replace what the gateway said; a promote by the prefix
// status shows names the current root; a missing ConfigMap is no control.
func TestTheControlsComeFromTheConfigMap(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	for name, tc := range map[string]struct {
		annotations         map[string]string
		wantPaused, promote string
	}{
		"no configmap":           {annotations: nil},
		"paused":                 {annotations: map[string]string{bundle.AnnotationPaused: "true"}, wantPaused: "true"},
		"promote by prefix":      {annotations: map[string]string{bundle.AnnotationPromote: bundle.Short(rt.r2.Fingerprint)}, promote: rt.r2.Fingerprint},
		"promote in capitals":    {annotations: map[string]string{bundle.AnnotationPromote: strings.ToUpper(bundle.Short(rt.r2.Fingerprint))}, promote: rt.r2.Fingerprint},
		"promote of another":     {annotations: map[string]string{bundle.AnnotationPromote: bundle.Short(rt.r1.Fingerprint)}, promote: bundle.Short(rt.r1.Fingerprint)},
		"a prefix too short":     {annotations: map[string]string{bundle.AnnotationPromote: rt.r2.Fingerprint[:6]}, promote: rt.r2.Fingerprint[:6]},
		"the whole fingerprint":  {annotations: map[string]string{bundle.AnnotationPromote: rt.r2.Fingerprint}, promote: rt.r2.Fingerprint},
		"other annotations only": {annotations: map[string]string{"x": "y"}},
	} {
		t.Run(name, func(t *testing.T) {
			var objs []client.Object
			if tc.annotations != nil {
				objs = append(objs, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "dualca", Name: "gw-dualca-status", Annotations: tc.annotations}})
			}
			f := newStatusFixture(t, objs...)
			st := rt.rotating.State
			st.Paused, st.Promote = "true", "from-the-gateway"
			f.g.Expect(f.m.overlay(f.ctx, &st, rt.r2)).To(Succeed())
			f.g.Expect(st.Paused).To(Equal(tc.wantPaused), "the gateway's annotations are no input")
			f.g.Expect(st.Promote).To(Equal(tc.promote))
		})
	}
}

// TestAConsumedPromoteIsRemoved: once a decision consumed the promote,
// the publish removes it in the update that writes the report, at the
// version the promote was read at; a promote the operator changed
// meanwhile stays; one the decision kept stays too.
func TestAConsumedPromoteIsRemoved(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	rep := reportOf(rt.gateway, rt.rootK, rt.renew, rt.r2.Fingerprint, &rt.clients, 0, rt.now)
	cm := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "dualca", Name: "gw-dualca-status",
			Annotations: map[string]string{bundle.AnnotationPromote: "aaaaaaaaaaaa", bundle.AnnotationPaused: "true"}}}
	}

	t.Run("consumed", func(t *testing.T) {
		f := newStatusFixture(t, cm())
		f.g.Expect(f.publish(rep, false).wrote).To(BeTrue())
		f.g.Expect(f.get().Annotations).To(Equal(map[string]string{bundle.AnnotationPaused: "true"}), "the pause stays")
		f.g.Expect(f.get().Data).To(HaveKey(StatusKey))
		f.g.Expect(f.m.consumed).To(Equal("aaaaaaaaaaaa"))
	})
	t.Run("kept", func(t *testing.T) {
		f := newStatusFixture(t, cm())
		f.publish(rep, true)
		f.g.Expect(f.get().Annotations).To(HaveKeyWithValue(bundle.AnnotationPromote, "aaaaaaaaaaaa"))
	})
	t.Run("changed by the operator meanwhile", func(t *testing.T) {
		f := newStatusFixture(t, cm())
		_, promote, err := f.m.controls(f.ctx)
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(promote).To(Equal("aaaaaaaaaaaa"))
		newer := f.get()
		newer.Annotations[bundle.AnnotationPromote] = "bbbbbbbbbbbb"
		f.g.Expect(f.c.Update(f.ctx, newer)).To(Succeed())
		done, err := f.m.publish(f.ctx, rep.copy(), false)
		f.g.Expect(err).NotTo(HaveOccurred())
		f.g.Expect(done.wrote).To(BeTrue())
		f.g.Expect(f.get().Annotations).To(HaveKeyWithValue(bundle.AnnotationPromote, "bbbbbbbbbbbb"), "the operator's newer promote is not lost")
		f.g.Expect(f.get().Data).To(HaveKey(StatusKey))
	})
}

// TestOnlyAControlStartsAReconcile: the ConfigMap's watch passes the
// operator's changes of a control and none of dualca's publishes.
func TestOnlyAControlStartsAReconcile(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	p := controlsChanged()
	cm := func(data string, annotations map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}, Data: map[string]string{StatusKey: data}}
	}
	paused := map[string]string{bundle.AnnotationPaused: "true"}
	update := func(a, b *corev1.ConfigMap) bool {
		return p.Update(event.TypedUpdateEvent[*corev1.ConfigMap]{ObjectOld: a, ObjectNew: b})
	}
	g.Expect(update(cm("a", nil), cm("b", nil))).To(BeFalse(), "a publish")
	g.Expect(update(cm("a", paused), cm("b", paused))).To(BeFalse(), "a publish while paused")
	g.Expect(update(cm("a", map[string]string{"x": "y"}), cm("a", nil))).To(BeFalse(), "someone else's annotation")
	g.Expect(update(cm("a", nil), cm("a", paused))).To(BeTrue(), "pause")
	g.Expect(update(cm("a", paused), cm("a", nil))).To(BeTrue(), "resume")
	g.Expect(update(cm("a", nil), cm("a", map[string]string{bundle.AnnotationPromote: "x"}))).To(BeTrue(), "promote")
	g.Expect(p.Create(event.TypedCreateEvent[*corev1.ConfigMap]{Object: cm("a", nil)})).To(BeFalse(), "dualca's creation")
	g.Expect(p.Create(event.TypedCreateEvent[*corev1.ConfigMap]{Object: cm("", paused)})).To(BeTrue())
	g.Expect(p.Delete(event.TypedDeleteEvent[*corev1.ConfigMap]{Object: cm("", paused)})).To(BeTrue(), "a pause deleted with it")
	g.Expect(p.Delete(event.TypedDeleteEvent[*corev1.ConfigMap]{Object: cm("", nil)})).To(BeTrue(), "published again at once")
}
