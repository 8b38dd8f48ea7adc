package syncer

import (
	"context"
	"crypto/x509"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// The write path of a rotation: what a reconcile leaves out or takes
// again from the last one so that a new root reaches the gateway sooner,
// and why each shortcut decides exactly what the long way would.

// TestTheStatusIsPublishedOffTheReconcilesPath: a reconcile hands its
// report to the publisher and returns; reports handed over faster than
// they are published replace one another, so the one published is the
// latest, built once; a report published at once by a reconcile (a
// promote to consume) replaces any handed over, and an older one never
// follows it; after a write, the reports handed over within statusSpacing
// wait for it to end and the latest alone goes out; a report deferred
// (client progress alone) is published at its turn; the publisher stops
// with its context.
func TestTheStatusIsPublishedOffTheReconcilesPath(t *testing.T) {
	t.Parallel()
	rt := newRotation(t)
	f := newStatusFixture(t)
	g := f.g
	turns := make(chan time.Time)
	p := newStatusPublisher(f.m, logr.Discard())
	p.after = func(time.Duration) <-chan time.Time { return turns }
	report := func(d bundle.Decision, root *bundle.Root) *Report {
		return reportOf(rt.gateway, rt.rootK, d, root.Fingerprint, &rt.clients, 0, rt.now)
	}
	var built atomic.Int32
	offer := func(rep *Report) {
		p.offer(func() *Report { built.Add(1); return rep.copy() })
	}

	// Handed over faster than published: the latest replaces the others,
	// and nothing is built on the reconcile's path.
	offer(report(rt.steady, rt.r1))
	offer(report(rt.renew, rt.r2))
	g.Expect(built.Load()).To(BeZero())
	build, seq := p.take()
	g.Expect(build().Phase).To(Equal(string(rt.renew.State.Phase)), "the latest of the two")
	g.Expect(seq).To(Equal(uint64(2)))

	// Published at once, in place of one handed over: that one is dropped,
	// and an older one never follows it out.
	offer(report(rt.steady, rt.r1))
	_, err := p.now(f.ctx, report(rt.renew, rt.r2), true)
	g.Expect(err).NotTo(HaveOccurred())
	build, _ = p.take()
	g.Expect(build).To(BeNil(), "the report handed over before is dropped")
	g.Expect(p.publish(f.ctx, report(rt.steady, rt.r1), seq, true)).To(Equal(published{}), "an older report never follows a newer one out")
	g.Expect(f.published().Phase).To(Equal(string(rt.renew.State.Phase)))

	// The publisher at work: what is handed over is built once and published.
	built.Store(0)
	ctx, cancel := context.WithCancel(f.ctx)
	stopped := make(chan error)
	go func() { stopped <- p.Start(ctx) }()
	f.clock.SetTime(f.clock.Now().Add(time.Second))
	phase := report(rt.renew, rt.r2)
	phase.Phase = string(bundle.PhaseRetiring)
	offer(phase)
	g.Eventually(func() string { return f.published().Phase }).Should(Equal(phase.Phase))
	g.Expect(built.Load()).To(Equal(int32(1)))

	// After a write, the reports handed over wait for the spacing to end,
	// replacing one another: the latest alone is built and published.
	switched := phase.copy()
	switched.Phase = string(bundle.PhaseSteady)
	offer(report(rt.renew, rt.r2))
	offer(switched)
	g.Consistently(built.Load, 100*time.Millisecond).Should(Equal(int32(1)), "nothing is built within the spacing")
	g.Expect(f.published().Phase).To(Equal(phase.Phase), "nor published")
	f.clock.SetTime(f.clock.Now().Add(statusSpacing))
	turns <- f.clock.Now()
	g.Eventually(func() string { return f.published().Phase }).Should(Equal(switched.Phase), "the latest, once the spacing ends")
	g.Expect(built.Load()).To(Equal(int32(2)), "built once")
	turns <- f.clock.Now() // the spacing after that write

	// The client progress alone waits for its turn.
	progressed := switched.copy()
	progressed.Clients = &bundle.Progress{Renewed: 1}
	offer(progressed)
	g.Eventually(built.Load).Should(Equal(int32(3)))
	g.Consistently(func() *bundle.Progress { return f.published().Clients }).ShouldNot(Equal(progressed.Clients), "deferred")
	f.clock.SetTime(f.clock.Now().Add(progressEvery))
	turns <- f.clock.Now()
	g.Eventually(func() *bundle.Progress { return f.published().Clients }).Should(Equal(progressed.Clients), "published at its turn")

	cancel()
	g.Eventually(stopped).Should(Receive(BeNil()))
}

// TestTheRecordKnowsWhatItWroteWithoutParsingIt: after a write the
// record takes the decision's roots for roots.pem, the same certificates
// as a record read after a restart parses from it, and encodes the same
// roots again as the same bytes.
func TestTheRecordKnowsWhatItWroteWithoutParsingIt(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	rt := newRotation(t)
	key := types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}
	c := fake.NewClientBuilder().Build()
	rec := &record{key: key, api: c, writer: c}
	ts := combined()
	_, err := rec.read(ctx, true)
	g.Expect(err).NotTo(HaveOccurred())
	d := rt.renew
	g.Expect(d.Known).To(HaveLen(2), "the rotation knows both roots")
	gw := ts[0].desired(nil, contentOf(d))
	g.Expect(rec.write(ctx, ts, map[string]string{ts[0].id(): ts[0].digest(gw)}, nil, d, rt.r2)).To(Succeed())

	known := rec.known(rec.last)
	g.Expect(known).To(HaveLen(len(d.Known)))
	for i := range known {
		g.Expect(known[i]).To(BeIdenticalTo(d.Known[i]), "root %d is the decision's, not parsed again", i)
	}
	g.Expect(rec.encodeRoots(d.Known)).To(Equal(bundle.Encode(d.Known)))

	restarted := &record{key: key, api: c, writer: c}
	found, err := restarted.read(ctx, true)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(found.Data[recordRoots]).To(Equal(bundle.Encode(d.Known)), "roots.pem as written")
	g.Expect(raws(restarted.known(found))).To(Equal(raws(known)), "a restart knows the same roots")

	other := []*x509.Certificate{d.Known[1], d.Known[0]}
	g.Expect(rec.encodeRoots(other)).To(Equal(bundle.Encode(other)), "other roots, or another order, are encoded")

	big := &record{}
	huge := make([]byte, bundle.MaxPEMBytes+1)
	big.wroteRoots(huge, d.Known)
	g.Expect(big.roots).To(BeNil(), "what a parse would refuse is never remembered as known")
}

func raws(cs []*x509.Certificate) [][]byte {
	out := make([][]byte, len(cs))
	for i, c := range cs {
		out[i] = c.Raw
	}
	return out
}

// TestTheRootIsParsedOncePerContent: the same bytes give the same root,
// checked again for its dates at every read; other bytes are validated
// afresh; an invalid root is never remembered.
func TestTheRootIsParsedOncePerContent(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	s := &gatewayStore{clock: clk}
	ca1 := certs.MustNew(t, "root-1", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true}, nil)
	ca2 := certs.MustNew(t, "root-2", now.Add(-time.Hour), now.Add(48*time.Hour), certs.Options{IsCA: true}, nil)

	first, err := s.validateRoot(ca1.CertPEM, ca1.KeyPEM, ca1.CertPEM)
	g.Expect(err).NotTo(HaveOccurred())
	again, err := s.validateRoot(append([]byte(nil), ca1.CertPEM...), ca1.KeyPEM, ca1.CertPEM)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(BeIdenticalTo(first), "the same bytes, the same root")

	_, err = s.validateRoot(ca1.CertPEM, ca2.KeyPEM, ca1.CertPEM)
	g.Expect(err).To(HaveOccurred(), "another key: validated afresh, and refused")
	g.Expect(s.root).To(BeIdenticalTo(first), "a refused root is not remembered")

	second, err := s.validateRoot(ca2.CertPEM, ca2.KeyPEM, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second.Fingerprint).To(Equal(bundle.Fingerprint(ca2.Cert)))

	s.root = first
	clk.SetTime(now.Add(2 * time.Hour))
	_, err = s.validateRoot(ca1.CertPEM, ca1.KeyPEM, ca1.CertPEM)
	_, want := bundle.ValidateRoot(ca1.CertPEM, ca1.KeyPEM, ca1.CertPEM, clk.Now())
	g.Expect(want).To(HaveOccurred())
	g.Expect(err).To(MatchError(want.Error()), "an expired root is refused as ValidateRoot refuses it")
	var invalid *bundle.InvalidError
	g.Expect(err).To(BeAssignableToTypeOf(invalid))
}

// writeLog is a client that notes every create and update, and refuses
// those of the objects named in refuse.
type writeLog struct {
	mu     sync.Mutex
	writes []string
	refuse map[string]bool
}

func (l *writeLog) note(_ context.Context, verb string, obj client.Object) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes = append(l.writes, verb+" "+obj.GetName())
	if l.refuse[obj.GetName()] {
		return errors.New("refused by a policy")
	}
	return nil
}

// set refuses the writes of the objects named, and forgets the writes noted.
func (l *writeLog) set(refused ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes, l.refuse = nil, map[string]bool{}
	for _, name := range refused {
		l.refuse[name] = true
	}
}

func (l *writeLog) noted() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.writes)
}

func (l *writeLog) client() client.Client {
	return interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := l.note(ctx, "create", obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := l.note(ctx, "update", obj); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
	})
}

// writeFixture is a gateway Secret and its record behind a writeLog.
type writeFixture struct {
	g      Gomega
	rt     *rotation
	log    *writeLog
	c      client.Client
	record types.NamespacedName
}

func newWriteFixture(t *testing.T) *writeFixture {
	log := &writeLog{refuse: map[string]bool{}}
	return &writeFixture{g: NewWithT(t), rt: newRotation(t), log: log, c: log.client(),
		record: types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}}
}

// start is a dualca started afresh: it knows nothing but the API server.
func (f *writeFixture) start() *gatewayStore {
	return &gatewayStore{targets: combined(), api: f.c, writer: f.c, clock: clocktesting.NewFakePassiveClock(f.rt.now),
		parsed: bundle.NewParsed(), record: &record{key: f.record, api: f.c, writer: f.c}}
}

// write reads what s starts from and writes d.
func (f *writeFixture) write(s *gatewayStore, d bundle.Decision, root *bundle.Root) (written, gatewayRead, error) {
	read, err := s.readGateway(context.Background(), retrying)
	f.g.Expect(err).NotTo(HaveOccurred())
	w, err := s.write(context.Background(), read, d, root)
	return w, read, err
}

func (f *writeFixture) gateway() *corev1.Secret {
	gw := &corev1.Secret{}
	f.g.Expect(f.c.Get(context.Background(), f.rt.gateway, gw)).To(Succeed())
	return gw
}

// TestTheRecordIsWrittenAfterTheTargets: a decision's record is written
// once the gateway's write has returned, not beside it: the two writes
// sent together contend for the API server and etcd, and the gateway, the
// write a new root waits for, came half as late again. A record write
// refused (or a crash) leaves the gateway ahead of the record, sealed:
// neither the same dualca nor one started afresh takes it for tampering,
// and once the record is written a writer's replay of an older gateway is
// tampering again. A tampering found by a reconcile whose record write
// failed is still told, once, by the one that writes it.
func TestTheRecordIsWrittenAfterTheTargets(t *testing.T) {
	t.Parallel()
	f := newWriteFixture(t)
	g, rt, rec := f.g, f.rt, f.record.Name

	s := f.start()
	_, _, err := f.write(s, rt.steady, rt.r1)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.log.noted()).To(Equal([]string{"create gw", "create " + rec}), "the gateway, then its record")
	steady := f.gateway()

	f.log.set(rec)
	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).To(MatchError(ContainSubstring("refused by a policy")))
	g.Expect(f.log.noted()).To(Equal([]string{"update gw", "update " + rec}))
	g.Expect(f.gateway().Data[caKey]).To(Equal(rt.renew.CAPEM), "the gateway trusts the new root already")
	g.Expect(f.gateway().Annotations).To(HaveKey(annotationSeal))

	_, read, _ := f.write(s, rt.renew, rt.r2)
	g.Expect(read.tampered).To(BeEmpty(), "its own write, its record refused")
	_, read, _ = f.write(f.start(), rt.renew, rt.r2)
	g.Expect(read.tampered).To(BeEmpty(), "a dualca started afresh knows the seal from the record's key")

	f.log.set()
	w, _, err := f.write(f.start(), rt.renew, rt.r2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.tampered).To(BeEmpty())
	g.Expect(f.log.noted()).To(Equal([]string{"update " + rec}), "the gateway holds the decision already: its record alone is written")

	replay := f.gateway()
	replay.Data, replay.Annotations = steady.Data, steady.Annotations
	g.Expect(f.c.Update(context.Background(), replay)).To(Succeed())
	next := bundle.Plan(rt.rotating, rt.r2, rt.clients, rt.timings, rt.now)
	f.log.set(rec)
	s = f.start()
	_, read, err = f.write(s, next, rt.r2)
	g.Expect(read.tampered).NotTo(BeEmpty(), "the older gateway, sealed for an older record, written back")
	g.Expect(err).To(HaveOccurred(), "the next decision's record refused")
	f.log.set()
	w, read, err = f.write(s, next, rt.r2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(read.tampered).To(BeEmpty(), "the gateway is dualca's write again")
	g.Expect(w.tampered).NotTo(BeEmpty(), "the tampering is told by the reconcile that wrote its record")
	w, _, _ = f.write(s, next, rt.r2)
	g.Expect(w.tampered).To(BeEmpty(), "and told once")
}

// TestARecordAheadOfItsGatewayRestartsTheDelay: the other state the
// writes can leave. The gateway's write is refused as a new
// root arrives and the record's is not: the record describes a gateway
// that trusts the new root, the gateway does not. The next read takes the
// gateway neither for tampering nor for up to date: it is lagging, so the
// decision counts the new root's propagation delay from the write that
// will bring it there (see lagging), and that write follows once the
// gateway can be written.
func TestARecordAheadOfItsGatewayRestartsTheDelay(t *testing.T) {
	t.Parallel()
	f := newWriteFixture(t)
	g, rt, rec := f.g, f.rt, f.record.Name

	s := f.start()
	_, _, err := f.write(s, rt.steady, rt.r1)
	g.Expect(err).NotTo(HaveOccurred())

	f.log.set("gw")
	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).To(MatchError(ContainSubstring("refused by a policy")))
	g.Expect(f.log.noted()).To(Equal([]string{"update gw", "update " + rec}), "the record is written all the same")
	g.Expect(f.gateway().Data[caKey]).To(Equal(rt.steady.CAPEM), "the gateway does not trust the new root yet")

	for _, again := range []*gatewayStore{s, f.start()} {
		read, err := again.readGateway(context.Background(), retrying)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(read.tampered).To(BeEmpty(), "dualca's own write, left behind")
		g.Expect(read.state.Lagging).To(BeTrue(), "the gateway lacks the root its record says it trusts")
		g.Expect(read.state.CAPEM).To(Equal(rt.renew.CAPEM), "the decisions start from the record")
	}

	f.log.set()
	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.gateway().Data[caKey]).To(Equal(rt.renew.CAPEM))
	read, err := f.start().readGateway(context.Background(), retrying)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(read.state.Lagging).To(BeFalse(), "caught up")
	g.Expect(read.tampered).To(BeEmpty())
}

// TestAWriterWhoDropsTheNewRootRestartsItsDelay: a hostile writer of the
// gateway Secret, after a gateway write was refused as a new root came
// (the record trusts the root, the gateway does not yet), edits the
// gateway. It is tampering, restored from the record; and as the gateway
// has never had the root, the root's propagation delay counts from the
// write that first brings it there: counted from the record's date,
// already spent, the clients would be moved to the root the moment it is
// written, before the gateway loads it. Once dualca has brought the root
// to the gateway, an edit or a replay that drops it is undone and delays
// nothing (a writer must not hold a rotation back); a dualca started since
// cannot tell, and waits the delay again.
func TestAWriterWhoDropsTheNewRootRestartsItsDelay(t *testing.T) {
	t.Parallel()
	f := newWriteFixture(t)
	g, rt := f.g, f.rt

	s := f.start()
	_, _, err := f.write(s, rt.steady, rt.r1)
	g.Expect(err).NotTo(HaveOccurred())
	steady := f.gateway()
	f.log.set("gw")
	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).To(MatchError(ContainSubstring("refused by a policy")))
	f.log.set()

	edit := func(change func(*corev1.Secret)) {
		gw := f.gateway()
		change(gw)
		g.Expect(f.c.Update(context.Background(), gw)).To(Succeed())
	}
	serverCert := func(gw *corev1.Secret) { gw.Data[corev1.TLSCertKey] = rt.r1.CertPEM } // anything dualca never wrote
	readBy := func(s *gatewayStore) gatewayRead {
		read, err := s.readGateway(context.Background(), retrying)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(read.tampered).NotTo(BeEmpty(), "a writer's edit")
		return read
	}
	edit(serverCert)
	for _, by := range []*gatewayStore{s, f.start()} {
		read := readBy(by)
		g.Expect(read.state.Lagging).To(BeTrue(), "the gateway the writer left never had the root its record trusts")
		d := bundle.Plan(read.state, rt.r2, rt.clients, rt.timings, rt.now)
		g.Expect(d.State.RootAddedAt).To(BeTemporally("==", rt.now), "the delay counts from the write that brings the root")
		g.Expect(d.Renew).To(BeEmpty(), "no client moves to a root the gateway has not loaded")
		counted := read.state
		counted.Lagging = false
		g.Expect(bundle.Plan(counted, rt.r2, rt.clients, rt.timings, rt.now).Renew).To(ConsistOf("ns/agent"),
			"from the record's date the delay was spent: the client would move at once")
	}

	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).NotTo(HaveOccurred())
	edit(serverCert)
	g.Expect(readBy(s).state.Lagging).To(BeFalse(), "an edit that keeps the root postpones nothing")
	_, _, err = f.write(s, rt.renew, rt.r2)
	g.Expect(err).NotTo(HaveOccurred())
	edit(func(gw *corev1.Secret) { gw.Data = steady.Data })
	g.Expect(readBy(s).state.Lagging).To(BeFalse(), "a replay of the gateway before the root, once dualca brought the root there, postpones nothing")
	g.Expect(readBy(f.start()).state.Lagging).To(BeTrue(), "a dualca started since cannot tell it from a gateway that never had the root")
}
