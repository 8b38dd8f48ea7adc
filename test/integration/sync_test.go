package integration

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gcustom"
	gomegatypes "github.com/onsi/gomega/types"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/certs"
)

func TestANewRootCreatesTheGatewayFromIt(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	r1 := s.newRoot("root-1")
	s.putRoot(r1)
	s.start(s.options().Syncer())

	s.g.Eventually(s.view).Should(Equal(gatewayView{Roots: []string{"root-1"}, Server: "root-1", Phase: "Steady"}))
	gw := s.gatewaySecret()
	s.g.Expect(gw.Type).To(Equal(corev1.SecretTypeTLS))
	s.g.Expect(bundle.VerifyServer(gw.Data[corev1.TLSCertKey], r1.Cert, time.Now())).To(Succeed(), "the server certificate is a leaf of root-1")
	s.g.Expect(gw.Data[corev1.TLSPrivateKeyKey]).NotTo(Equal(r1.KeyPEM), "the gateway does not hold the root's key")
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationRoot, fingerprint(r1.Cert)))
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationServer, fingerprint(r1.Cert)))
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationBundleHash, bundle.Hash(gw.Data["ca.crt"])))
	s.g.Expect(gw.Annotations).To(HaveKey(bundle.AnnotationRootAddedAt))
}

func TestARotationKeepsTheOldRootTrustedAndTheServerOnIt(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.startOnFirstRoot(s.options().Syncer())

	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	s.g.Eventually(s.view).Should(And(
		HaveField("Roots", []string{"root-2", "root-1"}),
		HaveField("Server", "root-1")))
	// The propagation delay (1s here) passes: clients would be renewed now,
	// but the server stays on root-1 until the grace period.
	s.g.Eventually(s.view).Should(HaveField("Phase", "Renewing"))
	s.g.Consistently(s.view).Should(HaveField("Server", "root-1"))
	s.g.Eventually(s.events).Should(ContainElements(
		HavePrefix(bundle.ReasonRootRotated+": new root \"root-2\""),
		HavePrefix(bundle.ReasonBundleUpdated+": trust bundle now holds 2 roots")))
	gw := s.gatewaySecret()
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationRoot, fingerprint(r2.Cert)))
}

func TestWithoutClientTrackingTheServerSwitchesWhenTheGracePeriodEnds(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.ServerSwitchGrace = 3 * time.Second
	s.startOnFirstRoot(o.Syncer())
	versions := s.watchGateway(s.gatewaySecret().ResourceVersion)

	s.putRoot(s.newRoot("root-2"))
	// Nothing is known of the clients, so root-1 stays trusted until it expires.
	s.g.Eventually(s.view).Should(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-2", Phase: "Retiring"}))
	// Every version the gateway went through, in order (a window of the
	// grace period's length, which a busy machine could let an Eventually
	// miss, is read from the watch instead).
	s.g.Eventually(func() []gatewayView { return viewsOf(versions()) }).Should(inOrder(
		gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"},
		gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-2", Phase: "Retiring"}))
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonServerSwitched + ": grace period 3s is over")))
	gw := s.gatewaySecret()
	added, _ := time.Parse(time.RFC3339, gw.Annotations[bundle.AnnotationRootAddedAt])
	switched, _ := time.Parse(time.RFC3339, gw.Annotations[bundle.AnnotationServerSwitchedAt])
	s.g.Expect(switched.Sub(added)).To(BeNumerically(">=", o.ServerSwitchGrace))
}

func TestAServerRootAboutToExpireIsSwitchedAwayFromThenRetired(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	now := time.Now()
	// 20 s: the time to start dualca and switch, with room for a busy
	// machine, before root-1 expires.
	r1, err := certs.NewCA("root-1", now.Add(-time.Hour), now.Add(20*time.Second))
	s.g.Expect(err).NotTo(HaveOccurred())
	s.putRoot(r1)
	o := s.options()
	o.PollInterval = 500 * time.Millisecond
	s.start(o.Syncer())
	s.g.Eventually(s.view).Should(HaveField("Server", "root-1"))
	versions := s.watchGateway(s.gatewaySecret().ResourceVersion)

	// root-1 expires within the safety margin: waiting for the grace period
	// would leave the gateway presenting an expired certificate.
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view, time.Minute).Should(Equal(gatewayView{Roots: []string{"root-2"}, Server: "root-2", Phase: "Steady"}))
	// The server moved to root-2 while root-1 was still trusted, then root-1
	// was retired: in that order, as the watch saw every version.
	s.g.Eventually(func() []gatewayView { return viewsOf(versions()) }).Should(inOrder(
		gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-2", Phase: "Retiring"},
		gatewayView{Roots: []string{"root-2"}, Server: "root-2", Phase: "Steady"}))
	s.g.Eventually(s.events).Should(ContainElements(
		HavePrefix(bundle.ReasonServerSwitchForced+": server switched to the new root before every client was ready: server root \"root-1\""),
		HavePrefix(bundle.ReasonRootRetired+": root \"root-1\"")))
}

func TestLegacyCopiesTheRootPlainly(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.Legacy = true
	s.startOnFirstRoot(o.Syncer())

	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	s.g.Eventually(func(g Gomega) {
		gw, err := s.getGateway()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(gw.Data).To(Equal(map[string][]byte{
			corev1.TLSCertKey: r2.CertPEM, corev1.TLSPrivateKeyKey: r2.KeyPEM, "ca.crt": r2.CertPEM}))
		g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy))
	}).Should(Succeed())
}

func TestThePollAloneBringsTheGatewayUpToDate(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.PollInterval = time.Second
	cfg := o.Syncer()
	cfg.DisableWatches = true
	d, _ := s.startOnFirstRoot(cfg)

	// With no watch, only the poll can see this rotation: a poll that read
	// the root after it was written brought the gateway up to date. How
	// soon (within one poll interval) is the benchmark's to measure.
	polled := d.polls()
	s.g.Expect(polled).To(BeNumerically(">=", 1), "the poll at start read the root")
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))
	s.g.Expect(d.polls()).To(BeNumerically(">", polled), "a poll read root-2")
}

// inOrder matches views that hold want in that order, others between.
func inOrder(want ...gatewayView) gomegatypes.GomegaMatcher {
	return gcustom.MakeMatcher(func(seen []gatewayView) (bool, error) {
		i := 0
		for _, v := range seen {
			if i < len(want) && reflect.DeepEqual(v, want[i]) {
				i++
			}
		}
		return i == len(want), nil
	}).WithTemplate("Expected the views\n{{.FormattedActual}}\n{{.To}} hold, in this order,\n{{format .Data 1}}").WithTemplateData(want)
}

// viewsOf is the views of versions of the gateway Secret, a version that
// looks as the one before it left out.
func viewsOf(versions []*corev1.Secret) []gatewayView {
	var out []gatewayView
	for _, v := range versions {
		view := viewOf(v)
		if len(out) == 0 || !reflect.DeepEqual(out[len(out)-1], view) {
			out = append(out, view)
		}
	}
	return out
}

func TestADeletedOrEditedGatewayIsRestored(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.startOnFirstRoot(s.options().Syncer())
	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	want := gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}
	s.g.Eventually(s.view).Should(Equal(want))
	good := s.gatewaySecret()
	ctx := context.Background()

	// Another controller's annotation and label survive every write.
	gw := good.DeepCopy()
	gw.Annotations["example.com/owner"] = "platform-team"
	gw.Labels = map[string]string{"app": "gateway"}
	s.g.Expect(k8s.Update(ctx, gw)).To(Succeed())

	// Every edit is undone exactly, from dualca's record: the gateway
	// Secret's content is never an input of a decision.
	edits := map[string]func(*corev1.Secret){
		"ca.crt garbage":                func(gw *corev1.Secret) { gw.Data["ca.crt"] = []byte("not a bundle") },
		"ca.crt replaced by another CA": func(gw *corev1.Secret) { gw.Data["ca.crt"] = certs.MustCA(t, "intruder", time.Hour).CertPEM },
		"another CA added to ca.crt": func(gw *corev1.Secret) {
			gw.Data["ca.crt"] = append(gw.Data["ca.crt"], certs.MustCA(t, "intruder", time.Hour).CertPEM...)
		},
		"dualca annotation changed": func(gw *corev1.Secret) { gw.Annotations[bundle.AnnotationPhase] = "Steady" },
		"tls.key replaced":          func(gw *corev1.Secret) { gw.Data[corev1.TLSPrivateKeyKey] = certs.MustCA(t, "other", time.Hour).KeyPEM },
	}
	restore := func(name string, edit func(*corev1.Secret), want func(g Gomega, cur *corev1.Secret)) {
		gw := s.gatewaySecret()
		edit(gw)
		s.g.Expect(k8s.Update(ctx, gw)).To(Succeed(), name)
		s.g.Eventually(func(g Gomega) {
			cur, err := s.getGateway()
			g.Expect(err).NotTo(HaveOccurred())
			want(g, cur)
			g.Expect(cur.Annotations).To(HaveKeyWithValue("example.com/owner", "platform-team"), name)
			g.Expect(cur.Labels).To(HaveKeyWithValue("app", "gateway"), name)
		}).Should(Succeed(), name)
	}
	for name, edit := range edits {
		restore(name, edit, func(g Gomega, cur *corev1.Secret) {
			g.Expect(cur.Data).To(Equal(good.Data), name)
			for k, v := range good.Annotations {
				if k != syncer.AnnotationSeal {
					g.Expect(cur.Annotations).To(HaveKeyWithValue(k, v), name)
				}
			}
		})
	}
	s.g.Eventually(s.view).Should(Equal(want), "the rotation goes on where it was")
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonGatewayTampered + ": gateway Secret was changed outside dualca (")))
}

// TestADeletedGatewayIsRestoredAsItWas: deleted in the middle of a
// rotation, the gateway Secret comes back at once exactly as dualca last
// wrote it: the server credential from the old root (whose key is no longer
// anywhere else), both roots, the rotation's recorded moments.
func TestADeletedGatewayIsRestoredAsItWas(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.startOnFirstRoot(s.options().Syncer())
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}))
	before := s.gatewaySecret()

	s.g.Expect(k8s.Delete(context.Background(), before)).To(Succeed())
	s.g.Eventually(s.getGateway).Should(And(
		HaveField("UID", Not(Equal(before.UID))),
		HaveField("Data", Equal(before.Data)),
		HaveField("Annotations", WithTransform(withoutSeal, Equal(withoutSeal(before.Annotations))))))
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonGatewayRestored + ": gateway Secret was deleted; restored as dualca last wrote it")))
}

func TestNothingChangesNothingIsWritten(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.putRoot(s.newRoot("root-1"))
	o := s.options()
	o.PollInterval = 50 * time.Millisecond
	d := s.start(o.Syncer())
	s.g.Eventually(s.view).Should(HaveField("Phase", "Steady"))
	// A rotation in progress carries timestamps and a phase: they must not
	// churn either.
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(HaveField("Phase", "Renewing"))
	// The pass that wrote it may not have seen its writes through (the
	// record is written after the gateway, and a request is counted
	// when it returns): one more pass, which starts only after it ended,
	// reads the root once more.
	s.g.Eventually(d.polls).Should(BeNumerically(">", d.polls()))
	rv := s.gatewaySecret().ResourceVersion
	// Every reconcile of this one is a poll: it comes a poll interval
	// after the previous one, and reads the root from the API server.
	writes, before := d.writes(), d.polls()
	s.g.Eventually(d.polls).Should(BeNumerically(">=", before+30))
	s.g.Expect(d.writes()).To(Equal(writes), "writes during 30 reconciles that had nothing to change")
	s.g.Expect(s.gatewaySecret().ResourceVersion).To(Equal(rv))
	s.g.Expect(writes).To(BeNumerically(">=", 3), "the count sees the writes that did happen: create, rotation, phase")
}

func TestFlippingTheStrategyConvertsTheSameSecretBothWays(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	legacy := s.options()
	legacy.Legacy = true
	d, _ := s.startOnFirstRoot(legacy.Syncer())
	uid := s.gatewaySecret().UID
	d.Stop()

	// The root rotates while the installation is being switched over:
	// the legacy copy is adopted, so root-1 stays trusted and served.
	s.putRoot(s.newRoot("root-2"))
	d = s.start(s.options().Syncer())
	s.g.Eventually(s.view).Should(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}))
	s.g.Expect(s.gatewaySecret().Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
	d.Stop()

	// And back: a plain copy of the root again.
	s.start(legacy.Syncer())
	s.g.Eventually(s.view).Should(Equal(gatewayView{Roots: []string{"root-2"}, Server: "root-2"}))
	gw := s.gatewaySecret()
	s.g.Expect(gw.UID).To(Equal(uid))
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy))
	s.g.Expect(gw.Annotations).NotTo(HaveKey(bundle.AnnotationBundleHash))
}

func TestARestartInTheMiddleOfARotationResumes(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	// Long enough that no phase ends by time alone during the test.
	o := s.options()
	o.TrustPropagationDelay = time.Minute
	d, _ := s.startOnFirstRoot(o.Syncer())
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))
	// And the reconcile that wrote it done, its record written after the
	// gateway included: the gauge is set only once the whole pass is.
	// Stopped between the two writes, the restart would find its record
	// behind the gateway and take root-2 for new (it did, once, on a busy
	// machine: a write again, the bundle time restarted).
	s.g.Eventually(func() float64 { return d.Gauge("dualca_bundle_roots") }).Should(Equal(2.0))
	before := s.gatewaySecret()
	d.Stop()

	// Restarted on the same world: nothing to do, nothing written, and the
	// time root-2 entered the bundle is the recorded one, not the restart's.
	d = s.start(o.Syncer())
	s.g.Eventually(d.Synced).Should(BeTrue(), "a reconcile completed")
	after := s.gatewaySecret()
	s.g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion))
	d.Stop()

	// Stopped again, and a third root arrives while it is down.
	s.putRoot(s.newRoot("root-3"))
	s.start(o.Syncer())
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-3", "root-2", "root-1"}))
	s.g.Consistently(s.view).Should(And(
		HaveField("Roots", []string{"root-3", "root-2", "root-1"}),
		HaveField("Server", "root-1")))
}

func TestOnlyTheWatchedSecretsAreCached(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	for i := range 500 {
		s.g.Expect(k8s.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("unrelated-%03d", i)},
			Data:       map[string][]byte{"payload": make([]byte, 1024)},
		})).To(Succeed())
	}
	d, _ := s.startOnFirstRoot(s.options().Syncer())

	// A cache holds what it listed and watched: every list and watch of
	// Secrets dualca sends names one of its Secrets (a metadata.name field
	// selector): the root, the gateway, and the "-cacert" Secret that
	// would shadow the gateway's bundle in Istio (watched, never written);
	// and each is watched (client-go lists through the watch, its initial
	// events, where the API server allows).
	s.g.Eventually(func(g Gomega) {
		cached := map[string]bool{}
		for _, r := range d.Requests() {
			if r.Resource != "secrets" || r.Verb != "list" && r.Verb != "watch" {
				continue
			}
			g.Expect(r.Namespace).To(Equal(s.ns), "%s", r)
			g.Expect(r.Name).To(BeElementOf(s.root.Name, s.gateway.Name, s.gateway.Name+"-cacert"), "%s: restricted to one Secret by name", r)
			g.Expect(r.Code).To(Equal(http.StatusOK), "%s", r)
			cached[r.Verb+" "+r.Name] = true
		}
		g.Expect(cached).To(HaveKey("watch " + s.root.Name))
		g.Expect(cached).To(HaveKey("watch " + s.gateway.Name))
		g.Expect(cached).To(HaveKey("watch " + s.gateway.Name + "-cacert"))
	}).Should(Succeed())
}

func TestReadyOnlyOnceTheGatewayIsInSync(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.HealthProbeBindAddress = s.freeAddress()
	s.start(o.Syncer())
	probe := func(path string) func() (int, error) {
		return func() (int, error) {
			resp, err := http.Get("http://" + o.HealthProbeBindAddress + path)
			if err != nil {
				return 0, err
			}
			return resp.StatusCode, resp.Body.Close()
		}
	}
	// Alive, but not ready while there is no root to sync from.
	s.g.Eventually(probe("/healthz")).Should(Equal(http.StatusOK))
	s.g.Consistently(probe("/readyz"), 500*time.Millisecond).Should(Equal(http.StatusInternalServerError))

	s.putRoot(s.newRoot("root-1"))
	s.g.Eventually(probe("/readyz")).Should(Equal(http.StatusOK))
	s.g.Expect(s.view()).To(HaveField("Roots", []string{"root-1"}))
}

// TestReadyDoesNotWaitForTheReport: readiness comes with the gateway's
// write, not after what reports it (metrics, events, log lines, the
// status ConfigMap), which with many clients took longer than the write.
// The report is held at its first line; the gateway holds the root and
// the probe answers 200 meanwhile.
func TestReadyDoesNotWaitForTheReport(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.HealthProbeBindAddress = s.freeAddress()
	so := o.Syncer()
	hold := newHoldAt(ctrlzap.New(ctrlzap.WriteTo(io.Discard)).GetSink(), "gateway secret written")
	so.Logger = logr.New(hold)
	s.putRoot(s.newRoot("root-1"))
	s.start(so)
	t.Cleanup(hold.release) // before the manager stops: its reconcile is held

	s.g.Eventually(hold.reached).Should(BeClosed(), "the report logs the write")
	s.g.Expect(s.view()).To(HaveField("Roots", []string{"root-1"}))
	s.g.Eventually(func() (int, error) {
		resp, err := http.Get("http://" + o.HealthProbeBindAddress + "/readyz")
		if err != nil {
			return 0, err
		}
		return resp.StatusCode, resp.Body.Close()
	}).Should(Equal(http.StatusOK), "ready while the report is held")
	hold.release()
}

// holdAt is a log sink that holds the first goroutine to log msg until
// release, and tells when one reached it.
type holdAt struct {
	logr.LogSink
	msg      string
	arrived  chan struct{}
	released chan struct{}
	once     *sync.Once
	freeOnce *sync.Once
}

func newHoldAt(sink logr.LogSink, msg string) holdAt {
	return holdAt{LogSink: sink, msg: msg, arrived: make(chan struct{}), released: make(chan struct{}),
		once: &sync.Once{}, freeOnce: &sync.Once{}}
}

func (h holdAt) reached() <-chan struct{} { return h.arrived }

func (h holdAt) release() { h.freeOnce.Do(func() { close(h.released) }) }

func (h holdAt) Info(level int, msg string, kv ...any) {
	if msg == h.msg {
		h.once.Do(func() { close(h.arrived) })
		<-h.released
	}
	h.LogSink.Info(level, msg, kv...)
}

func (h holdAt) WithValues(kv ...any) logr.LogSink {
	h.LogSink = h.LogSink.WithValues(kv...)
	return h
}

func (h holdAt) WithName(name string) logr.LogSink {
	h.LogSink = h.LogSink.WithName(name)
	return h
}

func TestWithLeaderElectionTheLeaderKeepsTheGatewayInSync(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.LeaderElect = true
	s.startOnFirstRoot(o.Syncer())
	lease := &coordinationv1.Lease{}
	s.g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: s.ns, Name: syncer.LeaseName(s.gateway)}, lease)).To(Succeed())
	s.g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))

	// A second replica waits as a standby: it syncs nothing, yet it is
	// ready, so a rolling update does not stall on it.
	standby := o
	standby.HealthProbeBindAddress = s.freeAddress()
	d := s.start(standby.Syncer())
	s.g.Eventually(func() (int, error) {
		resp, err := http.Get("http://" + standby.HealthProbeBindAddress + "/readyz")
		if err != nil {
			return 0, err
		}
		return resp.StatusCode, resp.Body.Close()
	}).Should(Equal(http.StatusOK))
	s.g.Consistently(d.Synced, time.Second).Should(BeFalse(), "the standby does not reconcile")
	s.g.Expect(d.polls()).To(BeZero(), "the standby does not read the root")
}

// withoutSeal is a target's annotations but its seal, which each write
// makes anew for the record version it started from.
func withoutSeal(a map[string]string) map[string]string {
	out := maps.Clone(a)
	delete(out, syncer.AnnotationSeal)
	return out
}
