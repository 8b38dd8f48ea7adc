package gateways

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/test/lib/mtls"
	"github.com/dualca/dualca/test/lib/run"
)

const (
	rootName    = "root-ca"
	issuerName  = "agents-ca"
	gatewayName = "gateway-credential"
	clientLabel = "dualca.io/client"
	// trustPropagationDelay covers the slowest reader: a client's volume
	// (up to clientLag) and a gateway's volume and reload.
	trustPropagationDelay = 15 * time.Second
)

// Lags of the projected volumes: a gateway's, then a client's (the
// kubelet's sync period and an agent's reload, seconds and never the same).
var (
	gatewayLag = mtls.UniformLag(time.Second, 3*time.Second)
	clientLag  = mtls.UniformLag(time.Second, 10*time.Second)
)

// scenarios counts the namespaces made, so each is new.
var scenarios atomic.Int32

// TestGateways: every gateway (nginx and HAProxy reading projected files,
// Traefik reading Kubernetes) serves dualca's gateway credential in each
// shape to clients of every stack (curl, gnutls-cli) reading their own
// projected Secrets, while cert-manager rotates the root, with each root
// key algorithm: the zero-downtime strategy fails not one handshake of
// any pair; the legacy strategy cuts some pair off in every scenario, and
// every pair in some scenario. All scenarios run at once.
func TestGateways(t *testing.T) {
	// A pair handshakes every 2 s, and a legacy rotation's cut-off can be
	// shorter: one pair may miss all three of a scenario (seen once, haproxy
	// × curl, 20 handshakes). Over the legacy scenarios of the suite, each
	// pair must have been cut off at least once. A cleanup of the parent
	// runs after all its parallel subtests.
	t.Cleanup(func() {
		for _, pair := range results.uncutByLegacy() {
			t.Errorf("the legacy strategy cut %s off in none of the suite's scenarios", pair)
		}
	})
	for _, shape := range Shapes {
		algorithms := shape.Algorithms
		if algorithms == nil {
			algorithms = Algorithms
		}
		for _, alg := range algorithms {
			for _, legacy := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/%s", shortName(shape.Name), alg.Name, strategyName(legacy))
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					runScenario(t, shape, alg, legacy)
				})
			}
		}
	}
}

// scenario is one namespace: a root, its issuer, a client per gateway and
// stack, dualca, the gateways and the pairs.
type scenario struct {
	t      *testing.T
	g      *WithT
	ctx    context.Context
	cancel context.CancelFunc
	kube   kubernetes.Interface
	ns     string
	shape  Shape
	alg    Algorithm
	legacy bool

	servers map[string]Server
	// gatewayVols are the file gateways' volumes, by gateway.
	gatewayVols map[string]*Projector
	pairs       []*Pair
	// clientVols are the pairs' volumes, in the order of pairs.
	clientVols []*Projector
	clients    []string
}

func runScenario(t *testing.T, shape Shape, alg Algorithm, legacy bool) {
	s := newScenario(t, shape, alg, legacy)
	s.startDualca()
	s.startGateways()
	s.startPairs()
	s.servedEveryPair()
	for _, p := range s.pairs {
		if warm := p.Mark(); warm.Failures > 0 {
			t.Logf("%s × %s: %d of %d handshakes failed while the servers started (not counted): %v", p.Gateway, p.Stack, warm.Failures, warm.Attempts, warm.Errors)
		}
	}
	for i := range *rotations {
		root := s.rotate()
		s.converged(root)
		t.Logf("%s: rotation %d of %d converged", s.ns, i+1, *rotations)
	}
	s.check()
}

func newScenario(t *testing.T, shape Shape, alg Algorithm, legacy bool) *scenario {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(2 * time.Minute)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &scenario{t: t, g: g, ctx: ctx, cancel: cancel, kube: kubernetes.NewForConfigOrDie(shared.RESTConfig),
		ns:    fmt.Sprintf("gw-%s-%s-%d", strings.ToLower(strings.Fields(alg.Name)[0]), strategyName(legacy), scenarios.Add(1)),
		shape: shape, alg: alg, legacy: legacy, servers: map[string]Server{}, gatewayVols: map[string]*Projector{}}
	g.Expect(shared.CreateNamespace(ctx, s.ns)).To(Succeed())
	g.Expect(s.createRoot()).To(Succeed())
	g.Expect(shared.CreateCAIssuer(ctx, s.ns, issuerName, rootName)).To(Succeed())
	return s
}

// createRoot creates the root CA Certificate, its key of the scenario's
// algorithm, its DNS name ServerName (what the legacy strategy's plain copy
// presents; the zero-downtime server leaf's comes from --server-dns-names),
// issued by a SelfSigned Issuer, and waits until it is Ready.
func (s *scenario) createRoot() error {
	selfSigned := rootName + "-selfsigned"
	if err := shared.Client.Create(s.ctx, &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: selfSigned},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}); err != nil {
		return err
	}
	if err := shared.Client.Create(s.ctx, &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: rootName},
		Spec: cmapi.CertificateSpec{
			CommonName: rootName,
			DNSNames:   []string{ServerName},
			SecretName: rootName,
			IsCA:       true,
			Duration:   &metav1.Duration{Duration: 2160 * time.Hour},
			Usages:     []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: s.alg.Key, Size: s.alg.Size, RotationPolicy: cmapi.RotationPolicyAlways},
			IssuerRef:  cmmeta.IssuerReference{Name: selfSigned, Kind: cmapi.IssuerKind, Group: "cert-manager.io"},
		},
	}); err != nil {
		return err
	}
	return shared.WaitReady(s.ctx, s.ns, rootName)
}

// startDualca creates a client Certificate per gateway and stack, then
// runs dualca for the scenario's shape and strategy.
func (s *scenario) startDualca() {
	for _, gw := range gatewaysFor(s.shape) {
		for _, st := range Stacks {
			name := fmt.Sprintf("%s-%s", gw, strings.Fields(st.Name)[0])
			if err := shared.Client.Create(s.ctx, shared.ClientCertificate(s.ns, issuerName, name, map[string]string{clientLabel: "agent"})); err != nil {
				s.t.Fatalf("creating client %s: %v", name, err)
			}
			s.clients = append(s.clients, name)
		}
	}
	s.g.Expect(shared.WaitReady(s.ctx, s.ns, s.clients...)).To(Succeed())
	o := flags.Defaults()
	o.RootSecret = types.NamespacedName{Namespace: s.ns, Name: rootName}
	o.GatewaySecret = types.NamespacedName{Namespace: s.ns, Name: gatewayName}
	o.Legacy = s.legacy
	o.PollInterval = 10 * time.Second
	o.TrustPropagationDelay = trustPropagationDelay
	o.ServerSwitchGrace = 2 * time.Minute
	o.ClientSelector = labels.SelectorFromSet(labels.Set{clientLabel: "agent"})
	o.ClientNamespaces = []string{s.ns}
	o.RenewalQPS, o.RenewalBurst = 20, 5
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	// The name the clients check is the server leaf's, from dualca's flag.
	o.Server.DNSNames = []string{ServerName}
	if s.shape.Configure != nil {
		s.shape.Configure(&o)
	}
	run.Start(s.ctx, s.t, shared.RESTConfig, o.Syncer())
}

// fileGateways are the gateways that read files.
var fileGateways = []FileGateway{Nginx, HAProxy}

// gatewayNames are every gateway's name.
func gatewayNames() []string {
	names := []string{}
	for _, gw := range fileGateways {
		names = append(names, gw.Name)
	}
	return append(names, TraefikName)
}

// gatewaysFor are the names of the gateways that can read shape: a file
// gateway reads whatever a projected volume can hold; Traefik reads only
// what its CRDs can name.
func gatewaysFor(shape Shape) []string {
	if CheckTraefikShape(shape) == nil {
		return gatewayNames()
	}
	var names []string
	for _, gw := range fileGateways {
		names = append(names, gw.Name)
	}
	return names
}

// startGateways starts every gateway on the gateway credential; each
// returns once it serves.
func (s *scenario) startGateways() {
	for _, gw := range fileGateways {
		dir := filepath.Join(s.t.TempDir(), gw.Name)
		s.g.Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
		server, stop, err := StartFile(s.ctx, s.kube, s.ns, gw, s.shape, gatewayName, dir, gatewayLag)
		s.g.Expect(err).NotTo(HaveOccurred(), "starting %s", gw.Name)
		s.t.Cleanup(stop)
		s.servers[gw.Name] = server
		s.gatewayVols[gw.Name] = server.(*fileServer).vol
	}
	if err := CheckTraefikShape(s.shape); err != nil {
		s.t.Logf("Traefik is not run on this shape: %v", err)
		for _, st := range Stacks {
			results.unsupported(row{Gateway: TraefikName, Stack: st.Name, Shape: s.shape.Name, Algorithm: s.alg.Name})
		}
		return
	}
	tr, err := StartTraefik(s.ctx, shared.Client, shared.Kubeconfig, traefikBinary, s.ns, s.shape, gatewayName, s.t.TempDir())
	s.g.Expect(err).NotTo(HaveOccurred(), "starting Traefik")
	s.t.Cleanup(tr.Stop)
	s.servers[TraefikName] = tr
}

// startPairs projects each client's Secret into a volume of its own and
// starts its pair.
func (s *scenario) startPairs() {
	var wg sync.WaitGroup
	s.t.Cleanup(func() {
		s.cancel()
		wg.Wait()
	})
	i := 0
	for _, gw := range gatewaysFor(s.shape) {
		for _, st := range Stacks {
			name := s.clients[i]
			i++
			items := []Item{
				{Kind: KindSecret, Name: name, Key: "tls.crt", Path: "tls.crt"},
				{Kind: KindSecret, Name: name, Key: "tls.key", Path: "tls.key"},
				{Kind: KindSecret, Name: name, Key: "ca.crt", Path: "ca.crt"},
			}
			vol := NewProjector(s.kube, s.ns, items, filepath.Join(s.t.TempDir(), name), clientLag)
			s.g.Expect(vol.Start(s.ctx)).To(Succeed())
			s.g.Expect(vol.Wait(s.ctx, time.Minute)).To(Succeed())
			p := NewPair(gw, st, vol.Dir(), s.servers[gw])
			s.pairs = append(s.pairs, p)
			s.clientVols = append(s.clientVols, vol)
			wg.Go(func() { p.Run(s.ctx, *interval, 100000) })
		}
	}
}

// servedEveryPair waits until every pair got through twice in a row: every
// server serves and every client has its files.
func (s *scenario) servedEveryPair() {
	for _, p := range s.pairs {
		s.g.Eventually(p.Stats).Should(HaveField("ConsecutiveOK", BeNumerically(">=", 2)), s.explain(p, "gets through before any rotation"))
	}
}

// rotate makes cert-manager issue a new root.
func (s *scenario) rotate() *x509.Certificate {
	r, err := shared.RotateRoot(s.ctx, s.ns, rootName)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Logf("%s: root rotated to %s", s.ns, bundle.Short(bundle.Fingerprint(r)))
	return r
}

// converged waits until the rotation to root is over everywhere: dualca
// records it done (zero-downtime: Steady with the server on root; legacy:
// the copy), the bundle holds root alone, every client Secret is on root;
// then every volume holds the new version (the gateways' bundles and the
// clients' certificates), and every pair got through twice in a row since.
func (s *scenario) converged(root *x509.Certificate) {
	fp := bundle.Fingerprint(root)
	s.g.Eventually(func(g Gomega) {
		gw := &corev1.Secret{}
		g.Expect(shared.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
		if s.legacy {
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy))
		} else {
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseSteady)))
			g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationServer, fp))
		}
		ca, err := s.read(s.shape.Bundle(gatewayName))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rootsIn(ca)).To(Equal([]string{fp}), "the bundle holds the new root alone")
		for _, name := range s.clients {
			crt, err := s.read(Source{Kind: KindSecret, Name: name, Key: "tls.crt"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(chainsTo(crt, root)).To(BeTrue(), "client %s is on the new root", name)
		}
	}).Should(Succeed())
	s.g.Eventually(func(g Gomega) {
		for name, vol := range s.gatewayVols {
			ca, _ := os.ReadFile(vol.Path(bundleFile(name)))
			g.Expect(rootsIn(ca)).To(Equal([]string{fp}), "%s's volume holds the new bundle", name)
		}
		for _, vol := range s.clientVols {
			crt, _ := os.ReadFile(vol.Path("tls.crt"))
			g.Expect(chainsTo(crt, root)).To(BeTrue(), "%s holds the new client certificate", vol.Dir())
		}
	}).Should(Succeed())
	base := make([]int, len(s.pairs))
	for i, p := range s.pairs {
		base[i] = p.Stats().Attempts
	}
	for i, p := range s.pairs {
		s.g.Eventually(p.Stats).Should(And(
			HaveField("Attempts", BeNumerically(">=", base[i]+2)),
			HaveField("ConsecutiveOK", BeNumerically(">=", 2))), s.explain(p, "gets through after the rotation"))
	}
}

// explain is what a failed wait for p says: its errors and its server's
// refusals.
func (s *scenario) explain(p *Pair, what string) func() string {
	return func() string {
		server := s.servers[p.Gateway]
		return fmt.Sprintf("%s × %s %s; its errors: %v; %s refused %d reloads (%s)",
			p.Gateway, p.Stack, what, p.Stats().Errors, p.Gateway, server.Refused(), server.Problems())
	}
}

// bundleFile is the name of the bundle in the volume of the file gateway
// called name.
func bundleFile(name string) string {
	for _, gw := range fileGateways {
		if gw.Name == name {
			_, _, ca := gw.Layout()
			return ca
		}
	}
	return ""
}

// check asserts each pair's count and records the figures for the report
// (results); some pair of a legacy scenario must fail.
func (s *scenario) check() {
	for name, server := range s.servers {
		s.g.Expect(server.Refused()).To(BeZero(), "%s refused no reload: %s", name, server.Problems())
	}
	failed := 0
	for _, p := range s.pairs {
		st := p.Stats()
		s.t.Logf("%s × %s, %s, %s root, %s: %d handshakes, %d failed %v; %d loads of the client's files read again after a swap", p.Gateway, p.Stack, shortName(s.shape.Name), s.alg.Name, strategyName(s.legacy), st.Attempts, st.Failures, st.Errors, st.TornLoads)
		results.add(row{Gateway: p.Gateway, Stack: p.Stack, Shape: s.shape.Name, Algorithm: s.alg.Name},
			s.legacy, cell{Handshakes: st.Attempts, Failed: st.Failures, Rotations: *rotations, Refused: s.servers[p.Gateway].Refused()})
		// At one handshake every 2 s, a legacy rotation that converges in
		// ten seconds gives five: the floor says the pair kept handshaking.
		s.g.Expect(st.Attempts).To(BeNumerically(">=", 5*(*rotations)), "%s × %s handshook throughout", p.Gateway, p.Stack)
		if s.legacy {
			failed += st.Failures
		} else {
			s.g.Expect(st.Failures).To(BeZero(), "no handshake of %s × %s failed: %v", p.Gateway, p.Stack, st.Errors)
		}
	}
	if s.legacy {
		s.g.Expect(failed).To(BeNumerically(">", 0), "the legacy strategy cut some pair off")
	}
}

// read is the value of src, nil if the object or the key is missing.
func (s *scenario) read(src Source) ([]byte, error) {
	key := types.NamespacedName{Namespace: s.ns, Name: src.Name}
	switch src.Kind {
	case KindSecret:
		sec := &corev1.Secret{}
		if err := shared.Client.Get(s.ctx, key, sec); err != nil {
			return nil, err
		}
		return sec.Data[src.Key], nil
	case KindConfigMap:
		cm := &corev1.ConfigMap{}
		if err := shared.Client.Get(s.ctx, key, cm); err != nil {
			return nil, err
		}
		if v, ok := cm.BinaryData[src.Key]; ok {
			return v, nil
		}
		return []byte(cm.Data[src.Key]), nil
	}
	return nil, errors.New("unknown kind " + string(src.Kind))
}

// rootsIn are the fingerprints of the certificates of a PEM bundle.
func rootsIn(pemBytes []byte) []string {
	cs, err := bundle.ParseCertificates("bundle", pemBytes)
	if err != nil {
		return nil
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}

// chainsTo is whether the first certificate of pemBytes chains to root.
func chainsTo(pemBytes []byte, root *x509.Certificate) bool {
	cs, err := bundle.ParseCertificates("tls.crt", pemBytes)
	return err == nil && len(cs) > 0 && bundle.ChainsTo(cs[0], root)
}

func strategyName(legacy bool) string {
	if legacy {
		return "legacy"
	}
	return "zero-downtime"
}

// shortName is a shape's name up to its first space.
func shortName(s string) string { return strings.Fields(s)[0] }
