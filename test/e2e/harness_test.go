// Package e2e is the end-to-end suite: everything runs for real,
// kube-apiserver and etcd, cert-manager's controller issuing the root and
// the clients, dualca, and a TLS gateway and clients that reload their
// credentials from their Secrets and handshake all the time. Timings are
// compressed to seconds.
//
// Each test is a scenario (harness_test.go): a namespace of its own with a
// root CA, its CA issuer, the client Certificates, dualca, the gateway, the
// clients and a monitor (monitor_test.go) that checks every gateway version
// against the roots in use. Scenarios share one cluster unless a test needs
// one of its own (the API server restart).
package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/mtls"
	"github.com/dualca/dualca/test/lib/run"
)

var (
	// shared is the cluster the scenarios run on unless they start their own.
	shared    *cluster.Cluster
	scenarios atomic.Int32
)

func TestMain(m *testing.M) {
	c, err := cluster.Start(context.Background(), cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		os.Exit(1)
	}
	shared = c
	code := m.Run()
	// cert-manager's, not dualca's: counted so that a run shows them.
	fmt.Printf("cert-manager issuances that failed and were triggered again by the harness: %d\n", c.Retriggers())
	fmt.Printf("cert-manager issuances beyond the one a rotation triggered: %d\n", c.Reissues())
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

// clients is the size of each scenario's fleet.
const clients = 20

// scenario is one namespace of a cluster with a root CA, its CA issuer, the
// client Certificates, dualca, the gateway and the clients.
type scenario struct {
	t       *testing.T
	g       *WithT
	c       *cluster.Cluster
	kube    kubernetes.Interface
	ns      string
	clients []string
	ctx     context.Context

	dualca  *run.Dualca
	gateway *mtls.Gateway
	fleet   *mtls.Fleet
	watch   watcher
	// propagationDelay is the running dualca's --trust-propagation-delay.
	propagationDelay time.Duration
}

// newScenario is a scenario of n clients on the shared cluster.
func newScenario(t *testing.T, n int) *scenario {
	t.Helper()
	return newScenarioOn(t, shared, n)
}

// newScenarioOn is a scenario of n clients on cluster c, its monitor
// watching from before dualca starts.
func newScenarioOn(t *testing.T, c *cluster.Cluster, n int) *scenario {
	t.Helper()
	return newScenarioKeyed(t, c, n, nil)
}

// newScenarioKeyed is newScenarioOn with the root's key of rootKey (nil:
// cert-manager's ECDSA P-256 of CreateRootCA).
func newScenarioKeyed(t *testing.T, c *cluster.Cluster, n int, rootKey *cmapi.CertificatePrivateKey) *scenario {
	t.Helper()
	return newScenarioWith(t, c, rootKey, func(s *scenario) ([]string, error) {
		return c.CreateClients(s.ctx, s.ns, issuerName, "agent", n, map[string]string{clientLabel: "agent"})
	})
}

// newScenarioWith is a scenario on cluster c: its namespace, a root of
// rootKey, its CA Issuer, the clients makeClients creates (their names),
// and a monitor watching from before dualca starts.
func newScenarioWith(t *testing.T, c *cluster.Cluster, rootKey *cmapi.CertificatePrivateKey, makeClients func(*scenario) ([]string, error)) *scenario {
	t.Helper()
	g := NewWithT(t)
	// Generous by default: CI machines are slower and busier than this one.
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	g.SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	s := &scenario{t: t, g: g, c: c, kube: kubernetes.NewForConfigOrDie(c.RESTConfig), ctx: ctx,
		ns: strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))}
	if len(s.ns) > 50 {
		s.ns = s.ns[:50]
	}
	// Unique, so that -count=N runs each scenario in a fresh namespace.
	s.ns = fmt.Sprintf("%s-%d", strings.Trim(s.ns, "-"), scenarios.Add(1))
	g.Expect(c.CreateNamespace(ctx, s.ns)).To(Succeed())
	var err error
	if rootKey == nil {
		_, err = c.CreateRootCA(ctx, s.ns, rootName)
	} else {
		_, err = c.CreateRootCAWith(ctx, s.ns, rootName, rootKey)
	}
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.CreateCAIssuer(ctx, s.ns, issuerName, rootName)).To(Succeed())
	s.clients, err = makeClients(s)
	g.Expect(err).NotTo(HaveOccurred())
	s.watch = startMonitor(ctx, t, s.kube, s.ns, len(s.clients))
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

// propagationDelay is the trust propagation delay of the scenarios: the
// time the gateway is given to load a new root before dualca moves any
// client to it. The test's gateway loads a version of its Secret within
// milliseconds of the monitor seeing it (40 ms at most over the first
// three runs that logged it, on a two-core machine busy with a cold
// build), but a busier machine can hold it back longer: issue 27 flagged
// the 1 s this suite gave before as too short for that. Three seconds keep
// a zero-downtime test from failing handshakes for the machine's slowness
// (a rotation waits out the delay three times: before renewing, before
// the switch, before the retirement); each run logs the loads
// (logGatewayLoads) and expectStrictlyClean asserts their order (the
// gateway had the root before dualca moved clients), not their speed.
const propagationDelay = 3 * time.Second

// options are dualca's flags for the scenario, timings in seconds.
func (s *scenario) options(legacy bool) flags.Options {
	o := flags.Defaults()
	o.RootSecret = types.NamespacedName{Namespace: s.ns, Name: rootName}
	o.GatewaySecret = types.NamespacedName{Namespace: s.ns, Name: gatewayName}
	o.Legacy = legacy
	o.PollInterval = 10 * time.Second
	o.TrustPropagationDelay = propagationDelay
	o.ServerSwitchGrace = time.Minute
	o.ClientSelector = labels.SelectorFromSet(labels.Set{clientLabel: "agent"})
	o.ClientNamespaces = []string{s.ns}
	o.RenewalQPS, o.RenewalBurst = 20, 5
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	o.Server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)} // the gateway is dialled there
	return o
}

// startDualca runs dualca in this process with o, replacing the one running.
func (s *scenario) startDualca(o flags.Options) {
	s.t.Helper()
	s.startDualcaAs(s.c.RESTConfig, o)
}

// startDualcaAs is startDualca talking to the API server with cfg, for
// instance as a ServiceAccount through impersonation.
func (s *scenario) startDualcaAs(cfg *rest.Config, o flags.Options) {
	s.t.Helper()
	if s.dualca != nil {
		s.dualca.Stop()
	}
	s.propagationDelay = o.TrustPropagationDelay
	s.dualca = run.Start(s.ctx, s.t, cfg, o.Syncer())
}

// startTraffic starts the gateway on the gateway Secret, which returns once
// it serves dualca's first version, then every client on its own Secret,
// and waits until every client gets through.
func (s *scenario) startTraffic() {
	s.t.Helper()
	s.startTrafficWithGatewayLag(0)
}

// startTrafficWithGatewayLag is startTraffic with a gateway that loads each
// version of its Secret lag late (a kubelet volume sync, an SDS push); the
// clients load theirs at once.
func (s *scenario) startTrafficWithGatewayLag(lag time.Duration) {
	s.t.Helper()
	var delay func() time.Duration // nil: no lag
	if lag > 0 {
		delay = func() time.Duration { return lag }
	}
	s.gateway = mtls.NewGateway(mtls.Lagged(mtls.OneObjectWatches(s.kube, s.ns), delay), gatewayName)
	s.g.Expect(s.gateway.Start(s.ctx)).To(Succeed())
	s.fleet = mtls.NewFleet(mtls.OneObjectWatches(s.kube, s.ns), s.clients, s.gateway.Addr(), mtls.ClientOptions{Interval: 100 * time.Millisecond})
	s.fleet.Start(s.ctx)
	s.g.Eventually(s.fleet.Stats).WithTimeout(30*time.Second + lag).Should(HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 3)))
}

// rotate makes cert-manager issue a new root and returns it.
func (s *scenario) rotate() *x509.Certificate {
	s.t.Helper()
	return s.rotateThrough().Root
}

// rotateThrough is rotate that also returns the roots cert-manager issued
// on the way, if it issued more than once (cluster.Rotation).
func (s *scenario) rotateThrough() cluster.Rotation {
	s.t.Helper()
	r, err := s.c.RotateRootThrough(s.ctx, s.ns, rootName)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Logf("%s: root rotated to %s", s.ns, bundle.Short(bundle.Fingerprint(r.Root)))
	for _, p := range r.Passed {
		s.t.Logf("%s: cert-manager issued twice for the one trigger; the root Secret held %s on the way", s.ns, bundle.Short(bundle.Fingerprint(p)))
	}
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
		g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
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
			g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, sec)).To(Succeed())
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

// polls counts the times the running dualca read the root Secret from the
// API server, which it does at every poll and at no other time (events
// read its cache).
func (s *scenario) polls() int {
	n := 0
	for _, r := range s.dualca.Requests() {
		if r.Verb == "get" && r.Resource == "secrets" && r.Namespace == s.ns && r.Name == rootName {
			n++
		}
	}
	return n
}

// annotations are the gateway Secret's, nil when it cannot be read.
func (s *scenario) annotations() map[string]string {
	gw := &corev1.Secret{}
	_ = s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)
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
	s.logGatewayLoads()
	return f.Total.Attempts, f.Total.Failures
}

// logPhases logs how long each phase of the rotation to root took to come.
func (s *scenario) logPhases(what string, root *x509.Certificate) {
	b, r, c, sw, st := s.watch.phases(root)
	s.t.Logf("%s: root changed -> gateway trusts it %v, renewing %v, every client on it %v, server switched %v, steady %v", what, b, r, c, sw, st)
}

// rootCert is the root in the root Secret.
func (s *scenario) rootCert() *x509.Certificate {
	s.t.Helper()
	sec := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: rootName}, sec)).To(Succeed())
	cs, err := bundle.ParseCertificates("tls.crt", sec.Data[corev1.TLSCertKey])
	s.g.Expect(err).NotTo(HaveOccurred())
	return cs[0]
}

// trustedRoots are the fingerprints of the gateway's ca.crt.
func (s *scenario) trustedRoots() []string {
	gw := &corev1.Secret{}
	_ = s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)
	cs, _ := bundle.ParseCertificates("ca.crt", gw.Data["ca.crt"])
	return fingerprints(cs)
}

// clientsOn counts the clients whose Secret holds a leaf from root.
func (s *scenario) clientsOn(root *x509.Certificate) int {
	n := 0
	for _, name := range s.clients {
		sec := &corev1.Secret{}
		if s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, sec) != nil {
			continue
		}
		if leaf, err := bundle.ParseCertificates("tls.crt", sec.Data["tls.crt"]); err == nil && bundle.ChainsTo(leaf[0], root) {
			n++
		}
	}
	return n
}

// clientsOnFingerprint counts the clients whose leaf chains to the root
// with fingerprint fp, which must be the root Secret's.
func (s *scenario) clientsOnFingerprint(fp string) int {
	root := s.rootCert()
	if bundle.Fingerprint(root) != fp {
		return 0
	}
	return s.clientsOn(root)
}

// clientCertificates are the client Certificates of the scenario.
func (s *scenario) clientCertificates() ([]cmapi.Certificate, error) {
	var list cmapi.CertificateList
	if err := s.c.Client.List(s.ctx, &list, client.InNamespace(s.ns), client.MatchingLabels{clientLabel: "agent"}); err != nil {
		return nil, err
	}
	return list.Items, nil
}

// clientRevisions are the status revisions of the client Certificates, by
// name: a re-issuance increments one.
func (s *scenario) clientRevisions() (map[string]int, error) {
	crts, err := s.clientCertificates()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, crt := range crts {
		if crt.Status.Revision != nil {
			out[crt.Name] = *crt.Status.Revision
		}
	}
	return out, nil
}

// reissues counts the clients by how many times cert-manager issued them
// since they were created (status revision - 1).
func (s *scenario) reissues() map[int]int {
	crts, err := s.clientCertificates()
	s.g.Expect(err).NotTo(HaveOccurred())
	out := map[int]int{}
	for _, crt := range crts {
		if crt.Status.Revision != nil {
			out[*crt.Status.Revision-1]++
		}
	}
	return out
}

// leaseHolder is who holds dualca's Lease, "" when nobody does.
func (s *scenario) leaseHolder() string {
	lease := &coordinationv1.Lease{}
	if err := s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: syncer.LeaseName(types.NamespacedName{Namespace: s.ns, Name: gatewayName})}, lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// dualcaEvents lists "Type Reason" of the events dualca reported in the
// scenario's namespace.
func (s *scenario) dualcaEvents() ([]string, error) {
	var list eventsv1.EventList
	if err := s.c.Client.List(s.ctx, &list, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == "dualca" {
			out = append(out, e.Type+" "+e.Reason)
		}
	}
	return out, nil
}

// progress reads the clients annotation, "renewed=N pending=N failed=N";
// -1 each when it cannot be read.
func progress(a map[string]string) (renewed, pending, failed int) {
	if _, err := fmt.Sscanf(a[bundle.AnnotationClients], "renewed=%d pending=%d failed=%d", &renewed, &pending, &failed); err != nil {
		return -1, -1, -1
	}
	return renewed, pending, failed
}

// pause waits a random moment, so rotations land at different points of
// whatever dualca, cert-manager and the clients are doing.
func pause(min, max time.Duration) {
	<-time.After(min + mrand.N(max-min))
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}
