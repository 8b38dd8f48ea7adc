package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/test/cluster"
	"github.com/dualca/dualca/test/mtls"
	"github.com/dualca/dualca/test/run"
)

// The end-to-end tests run everything for real: kube-apiserver and etcd,
// cert-manager's controller issuing the root and the clients, dualca, and a
// TLS gateway and clients that reload their credentials from their Secrets
// and handshake all the time. Timings are compressed to seconds.

var (
	cl        *cluster.Cluster
	kube      kubernetes.Interface
	scenarios atomic.Int32
)

func TestMain(m *testing.M) {
	c, err := cluster.Start(context.Background(), cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		os.Exit(1)
	}
	cl = c
	kube = kubernetes.NewForConfigOrDie(c.RESTConfig)
	code := m.Run()
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
	}
	os.Exit(code)
}

const (
	rootName    = "root-ca"
	issuerName  = "agents-ca"
	gatewayName = "gateway-credential"
	clientLabel = "dualca.io/client"
)

// scenario is one namespace with a root CA, its CA issuer, the client
// Certificates, dualca, the gateway and the clients.
type scenario struct {
	t       *testing.T
	g       *WithT
	ns      string
	clients []string
	ctx     context.Context

	dualca  *run.Dualca
	gateway *mtls.Gateway
	fleet   *mtls.Fleet
	watch   *monitor
}

func newScenario(t *testing.T, clients int) *scenario {
	t.Helper()
	g := NewWithT(t)
	// Generous by default: CI machines are slower and busier than this one.
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	g.SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	s := &scenario{t: t, g: g, ctx: ctx, ns: strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))}
	if len(s.ns) > 50 {
		s.ns = s.ns[:50]
	}
	// Unique, so that -count=N runs each scenario in a fresh namespace.
	s.ns = fmt.Sprintf("%s-%d", strings.Trim(s.ns, "-"), scenarios.Add(1))
	g.Expect(cl.CreateNamespace(ctx, s.ns)).To(Succeed())
	_, err := cl.CreateRootCA(ctx, s.ns, rootName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cl.CreateCAIssuer(ctx, s.ns, issuerName, rootName)).To(Succeed())
	s.clients, err = cl.CreateClients(ctx, s.ns, issuerName, "agent", clients, map[string]string{clientLabel: "agent"})
	g.Expect(err).NotTo(HaveOccurred())
	s.watch = startMonitor(ctx, t, s.ns, len(s.clients))
	t.Cleanup(func() {
		cancel()
		if s.fleet != nil {
			s.fleet.Wait()
		}
		if s.gateway != nil {
			s.gateway.Wait()
		}
		// dualca stops, and shows its log on failure, through run.Start.
	})
	return s
}

// options are dualca's flags for the scenario, timings in seconds.
func (s *scenario) options(legacy bool) flags.Options {
	o := flags.Defaults()
	o.RootSecret = types.NamespacedName{Namespace: s.ns, Name: rootName}
	o.GatewaySecret = types.NamespacedName{Namespace: s.ns, Name: gatewayName}
	o.Legacy = legacy
	o.PollInterval = 10 * time.Second
	o.TrustPropagationDelay = time.Second
	o.ServerSwitchGrace = time.Minute
	o.ClientSelector = labels.SelectorFromSet(labels.Set{clientLabel: "agent"})
	o.ClientNamespaces = []string{s.ns}
	o.RenewalQPS, o.RenewalBurst = 20, 5
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	return o
}

// startDualca runs dualca in this process with o, replacing the one running.
func (s *scenario) startDualca(o flags.Options) {
	s.t.Helper()
	s.startDualcaAs(cl.RESTConfig, o)
}

// startDualcaAs is startDualca talking to the API server with cfg, for
// instance as a ServiceAccount through impersonation.
func (s *scenario) startDualcaAs(cfg *rest.Config, o flags.Options) {
	s.t.Helper()
	if s.dualca != nil {
		s.dualca.Stop()
	}
	s.dualca = run.Start(s.ctx, s.t, cfg, o.Syncer())
}

// startTraffic starts the gateway on the gateway Secret and every client
// on its own Secret, and waits until every client gets through.
func (s *scenario) startTraffic() {
	s.t.Helper()
	s.g.Eventually(func() error {
		return cl.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, &corev1.Secret{})
	}).
		WithTimeout(30 * time.Second).Should(Succeed())
	s.gateway = mtls.NewGateway(mtls.OneObjectWatches(kube, s.ns), gatewayName)
	s.g.Expect(s.gateway.Start(s.ctx)).To(Succeed())
	s.fleet = mtls.NewFleet(mtls.OneObjectWatches(kube, s.ns), s.clients, s.gateway.Addr(), mtls.ClientOptions{Interval: 100 * time.Millisecond})
	s.fleet.Start(s.ctx)
	s.g.Eventually(s.fleet.Stats).WithTimeout(30 * time.Second).Should(HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 3)))
}

// rotate makes cert-manager issue a new root and returns it.
func (s *scenario) rotate() *x509.Certificate {
	s.t.Helper()
	r, err := cl.RotateRoot(s.ctx, s.ns, rootName)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Logf("%s: root rotated to %s", s.ns, bundle.Short(bundle.Fingerprint(r)))
	return r
}

// converged waits until the rotation to root is over: the gateway serves
// from it and trusts it alone, every client is on it, and every client
// gets through again.
func (s *scenario) converged(root *x509.Certificate, legacy bool, timeout time.Duration) {
	s.t.Helper()
	fp := bundle.Fingerprint(root)
	s.g.Eventually(func(g Gomega) {
		gw := &corev1.Secret{}
		g.Expect(cl.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
		roots, err := bundle.ParseCertificates("ca.crt", gw.Data["ca.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fingerprints(roots)).To(Equal([]string{fp}), "the gateway trusts the new root alone")
		if legacy {
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy))
		} else {
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseSteady)))
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationServer, fp))
		}
		for _, name := range s.clients {
			sec := &corev1.Secret{}
			g.Expect(cl.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, sec)).To(Succeed())
			leaf, err := bundle.ParseCertificates("tls.crt", sec.Data["tls.crt"])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bundle.ChainsTo(leaf[0], root)).To(BeTrue(), "client %s is on the new root", name)
		}
	}).WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
	base := s.fleet.Stats().Total.Successes
	s.g.Eventually(s.fleet.Stats).WithTimeout(timeout).Should(And(
		HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 2)),
		HaveField("Total.Successes", BeNumerically(">", base+2*len(s.clients)))), "every client gets through")
}

// annotations are the gateway Secret's, nil when it cannot be read.
func (s *scenario) annotations() map[string]string {
	gw := &corev1.Secret{}
	_ = cl.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)
	return gw.Annotations
}

// waitPhase waits until the gateway records phase for root.
func (s *scenario) waitPhase(root *x509.Certificate, phase bundle.Phase) {
	s.t.Helper()
	s.g.Eventually(s.annotations).WithTimeout(30 * time.Second).WithPolling(20 * time.Millisecond).Should(And(
		HaveKeyWithValue(bundle.AnnotationRoot, bundle.Fingerprint(root)),
		HaveKeyWithValue(bundle.AnnotationPhase, string(phase))))
}

// report logs the handshake figures of the scenario and returns them.
func (s *scenario) report(what string) (attempts, failures int) {
	f, gw := s.fleet.Stats(), s.gateway.Stats()
	s.t.Logf("%s: %d clients, handshakes attempted %d, failed %d (client side), gateway accepted %d rejected %d; renewals %v",
		what, len(s.clients), f.Total.Attempts, f.Total.Failures, gw.Accepted, gw.Rejected, s.dualca.Renewals())
	if f.Total.Failures > 0 {
		s.t.Logf("%s: client errors %v; gateway errors %v", what, f.Total.Errors, gw.Errors)
	}
	return f.Total.Attempts, f.Total.Failures
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}

// monitor watches every Secret of the namespace through one informer, so
// it sees their versions in the order the API server made them, and checks
// after each one that the gateway trusts every root in use: the server's
// and that of every client's unexpired leaf. It also times the phases.
type monitor struct {
	mu         sync.Mutex
	leaves     map[string]*x509.Certificate // client Secret name -> leaf
	gateway    *corev1.Secret
	root       *x509.Certificate // the root Secret's current root
	violations []string
	// expected is the number of clients: all of them on a root is timed.
	expected int
	// races counts client leaves issued by a root that the root Secret
	// already holds but that dualca has not yet written to the gateway:
	// cert-manager issuing from a root it just rotated, inside dualca's
	// propagation time. Not dualca's to prevent; the window is measured.
	races    int
	versions int
	// history holds the annotations of every gateway version, in order.
	history []map[string]string
	// firsts records when something was first seen: "root <fp>",
	// "phase <Phase> <root fp>", "server <fp>".
	firsts map[string]time.Time
}

func startMonitor(ctx context.Context, t *testing.T, ns string, clients int) *monitor {
	m := &monitor{leaves: map[string]*x509.Certificate{}, firsts: map[string]time.Time{}, expected: clients}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Secrets().Informer()
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.seen(obj.(*corev1.Secret), false) },
		UpdateFunc: func(_, obj any) { m.seen(obj.(*corev1.Secret), false) },
		DeleteFunc: func(obj any) {
			if s, ok := obj.(*corev1.Secret); ok {
				m.seen(s, true)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	return m
}

func (m *monitor) seen(s *corev1.Secret, deleted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	first := func(k string) {
		if _, ok := m.firsts[k]; !ok {
			m.firsts[k] = now
		}
	}
	switch {
	case s.Name == rootName:
		if cs, err := bundle.ParseCertificates("tls.crt", s.Data["tls.crt"]); err == nil && !deleted {
			first("root " + bundle.Fingerprint(cs[0]))
			m.root = cs[0]
		}
		return
	case s.Name == gatewayName:
		if deleted {
			m.gateway = nil
			return
		}
		m.gateway = s
		m.versions++
		m.history = append(m.history, maps.Clone(s.Annotations))
		a := s.Annotations
		first("bundle " + a[bundle.AnnotationRoot])
		first("phase " + a[bundle.AnnotationPhase] + " " + a[bundle.AnnotationRoot])
		first("server " + a[bundle.AnnotationServer])
	case s.Labels[clientLabel] != "":
		delete(m.leaves, s.Name)
		if cs, err := bundle.ParseCertificates("tls.crt", s.Data["tls.crt"]); err == nil && !deleted {
			m.leaves[s.Name] = cs[0]
		}
		if m.root != nil && len(m.leaves) == m.expected && !slices.ContainsFunc(slices.Collect(maps.Values(m.leaves)), func(l *x509.Certificate) bool {
			return !bundle.ChainsTo(l, m.root)
		}) {
			first("clients " + bundle.Fingerprint(m.root))
		}
	default:
		return
	}
	m.check(now)
}

// check is the invariant: only for versions the zero-downtime strategy
// wrote; the legacy one drops the old root by design.
func (m *monitor) check(now time.Time) {
	if m.gateway == nil || m.gateway.Annotations[bundle.AnnotationStrategy] != bundle.StrategyZeroDowntime {
		return
	}
	roots, err := bundle.ParseCertificates("ca.crt", m.gateway.Data["ca.crt"])
	if err != nil {
		m.violations = append(m.violations, "gateway "+m.gateway.ResourceVersion+": "+err.Error())
		return
	}
	trusted := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(roots, func(r *x509.Certificate) bool { return bundle.ChainsTo(c, r) })
	}
	if chain, err := bundle.ParseCertificates("tls.crt", m.gateway.Data["tls.crt"]); err != nil || !trusted(chain[0]) {
		m.violations = append(m.violations, "gateway "+m.gateway.ResourceVersion+": the server's root is not in ca.crt")
	}
	for name, leaf := range m.leaves {
		if !now.Before(leaf.NotAfter) || trusted(leaf) {
			continue
		}
		if m.root != nil && bundle.ChainsTo(leaf, m.root) && m.gateway.Annotations[bundle.AnnotationRoot] != bundle.Fingerprint(m.root) {
			m.races++
			continue
		}
		m.violations = append(m.violations, fmt.Sprintf("gateway %s does not trust the root of client %s", m.gateway.ResourceVersion, name))
	}
}

// firstGateway returns the annotations of the first gateway version that
// satisfies match, nil if none did.
func (m *monitor) firstGateway(match func(map[string]string) bool) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.history {
		if match(a) {
			return a
		}
	}
	return nil
}

// result returns the gateway versions seen, the races (see monitor) and
// the violations of the invariant.
func (m *monitor) result() (versions, races int, violations []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.versions, m.races, slices.Clone(m.violations)
}

// phases returns how long after the root changed the gateway first
// trusted it, moved to Renewing, every client was on it, the server
// switched to it, and the gateway was Steady with it alone (zero when not
// seen).
func (m *monitor) phases(root *x509.Certificate) (bundled, renewing, clients, switched, steady time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fp := bundle.Fingerprint(root)
	start, ok := m.firsts["root "+fp]
	if !ok {
		return
	}
	since := func(k string) time.Duration {
		if t, ok := m.firsts[k]; ok {
			return t.Sub(start).Round(time.Millisecond)
		}
		return 0
	}
	return since("bundle " + fp), since("phase Renewing " + fp), since("clients " + fp), since("server " + fp), since("phase Steady " + fp)
}
