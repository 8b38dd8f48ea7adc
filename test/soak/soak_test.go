package soak

import (
	"context"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/monitor"
	"github.com/dualca/dualca/test/lib/mtls"
	"github.com/dualca/dualca/test/lib/run"
)

// span is a range of durations given as "lo-hi" ("30s-120s"), drawn from
// uniformly.
type span struct{ lo, hi time.Duration }

func (s *span) String() string { return s.lo.String() + "-" + s.hi.String() }

func (s *span) Set(v string) error {
	lo, hi, ok := strings.Cut(v, "-")
	if !ok {
		return fmt.Errorf("%q is no range lo-hi", v)
	}
	l, err := time.ParseDuration(lo)
	if err != nil {
		return err
	}
	h, err := time.ParseDuration(hi)
	if err != nil {
		return err
	}
	if l < 0 || h < l {
		return fmt.Errorf("%q: need 0 <= lo <= hi", v)
	}
	s.lo, s.hi = l, h
	return nil
}

func (s span) draw() time.Duration {
	if s.hi <= s.lo {
		return s.lo
	}
	return s.lo + mrand.N(s.hi-s.lo+1)
}

var (
	duration = flag.Duration("soak.duration", 3*time.Minute, "how long rotations and faults go on")
	clients  = flag.Int("soak.clients", 20, "client Certificates, one TLS client each (one of them is the client whose issuer breaks)")
	lag      = span{time.Second, 10 * time.Second}
	// rotate is what `make soak` asks for too: rotations land in every
	// phase of the one before, also while its client issuances are in
	// flight. The clients' Issuer signs from dualca's issuing Secret, which
	// moves to a new root only once the gateway has had the propagation
	// delay to trust it, so even an issuance in flight as the root rotates
	// gives a leaf the lagging gateway trusts: no failed handshake is
	// excused.
	rotate = span{30 * time.Second, 2 * time.Minute}
	faults = span{20 * time.Second, 60 * time.Second}
	// kills off makes the run that judges leaks alone (`make soak-leaks`):
	// every fault but the kills, so that the leader lives the whole run.
	kills    = flag.Bool("soak.kills", true, "kill the leader and the standby among the faults")
	report   = flag.String("soak.report", "", "write the report (Markdown) to this file")
	plotTo   = flag.String("soak.plot", "", "the timeline plot (PNG) the report links, drawn from -soak.series by test/programs/figures")
	seriesTo = flag.String("soak.series", "", "write what the timeline plot shows (JSON) to this file")
)

func init() {
	flag.Var(&lag, "soak.lag", "the lag of each Secret version before the gateway or a client loads it, lo-hi")
	flag.Var(&rotate, "soak.rotate", "the time between two root rotations, lo-hi")
	flag.Var(&faults, "soak.faults", "the time between two faults, lo-hi")
}

const (
	namespace  = "soak"
	rootName   = "root-ca"
	issuerName = "agents-ca"
	// issuingName is dualca's issuing Secret (--issuing-secret), the one
	// the clients' Issuer signs with once dualca has created it.
	issuingName = rootName + "-issuing"
	gatewayName = "gateway-credential"
	clientLabel = "dualca.io/client"
	// interval is each client's time between two handshakes.
	interval = 500 * time.Millisecond
	// watchReconnect is how late a watch can deliver after kube-apiserver
	// comes back (client-go's backoff; see the e2e restart scenario).
	watchReconnect = 10 * time.Second
	// retryRotation is the wait before asking again for a rotation that
	// could not be requested.
	retryRotation = 5 * time.Second
	// switchGrace is long: a forced switch is for the broken client only.
	switchGrace = 3 * time.Minute
)

// propagationDelay is dualca's --trust-propagation-delay: above the
// longest reload lag and a watch's reconnection after an API outage.
func propagationDelay() time.Duration { return lag.hi + watchReconnect }

// soak is one run: what it started and what it saw.
type soak struct {
	t     *testing.T
	g     *WithT
	ctx   context.Context
	c     *cluster.Cluster
	kube  kubernetes.Interface
	begin time.Time
	end   time.Time // when rotations and faults stop

	clients []string
	broken  string // the client whose issuer breaks and heals
	mon     *monitor.Monitor
	gateway *mtls.Gateway
	fleet   *mtls.Fleet
	args    []string

	mu        sync.Mutex
	replicas  [2]*replica
	timeline  []event
	deletions int // gateway Secret deletions injected
	samples   []sample
	resources []resource
	// scrapeFailures are the failed scrapes of replicas that lived on.
	scrapeFailures []string
	// firstFailures are the healthy clients' first failed attempts, kept
	// to tell why the run failed (the fleet counts them all).
	firstFailures []mtls.Failure
}

// The timeline's kinds besides the faults.
const (
	rotationRequested = "rotation"
	rotationSkipped   = "rotation skipped"
)

// event is a rotation, a fault or a phase of the run, at a moment.
type event struct {
	at     time.Time
	kind   string // "rotation", or a fault kind
	detail string
}

// record adds an event to the timeline and logs it.
func (s *soak) record(kind, detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := time.Now()
	s.timeline = append(s.timeline, event{at: at, kind: kind, detail: detail})
	s.t.Logf("%8s  %-16s %s", minutes(at.Sub(s.begin)), kind, detail)
}

func TestSoak(t *testing.T) {
	s := setUp(t)
	s.record("phase", fmt.Sprintf("rotations and faults for %v", *duration))
	s.end = time.Now().Add(*duration)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.sample(done) }()
	go func() { defer wg.Done(); s.rotations() }()
	s.faults() // in the test's goroutine: starting a replica may end the test
	s.record("phase", "no more rotations or faults: draining")
	s.drain()
	close(done)
	wg.Wait()
	if now := measured(); now != binaryAtStart {
		t.Errorf("the dualca binary changed during the run: %s at the start, %s at the end (a replica started again ran the new one): the run measured neither", binaryAtStart, now)
	}
	s.check()
}

// setUp starts the cluster, the root, the clients, the monitor, two dualca
// replicas, the gateway and the clients, and returns once every client gets
// through.
func setUp(t *testing.T) *soak {
	g := NewWithT(t)
	g.Expect(lag.hi).To(BeNumerically("<", propagationDelay()), "the propagation delay covers the lag")
	// Without a logger set, controller-runtime's client prints a warning
	// with a stack on its first log line.
	logf.SetLogger(logr.Discard())
	c := cluster.StartT(t, cluster.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &soak{t: t, g: g, ctx: ctx, c: c, kube: kubernetes.NewForConfigOrDie(c.RESTConfig), begin: time.Now()}
	binaryAtStart = measured()
	g.Expect(c.CreateNamespace(ctx, namespace)).To(Succeed())
	_, err := c.CreateRootCA(ctx, namespace, rootName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.CreateCAIssuer(ctx, namespace, issuerName, rootName)).To(Succeed())
	s.args = s.dualcaArgs()
	for i := range s.replicas {
		s.startReplica(i)
	}
	if judgesLeaks() {
		s.rememberMaxKnown()
	}
	s.clients, err = c.CreateClients(ctx, namespace, issuerName, "agent", *clients, map[string]string{clientLabel: "agent"})
	g.Expect(err).NotTo(HaveOccurred())
	s.broken = s.clients[len(s.clients)-1]
	g.Expect(s.createBrokenIssuer()).To(Succeed())
	s.mon, err = monitor.Start(ctx, s.kube, namespace, monitor.Options{Root: rootName, Gateway: gatewayName, Clients: len(s.clients),
		IsClient: func(l map[string]string) bool { return l[clientLabel] != "" }})
	g.Expect(err).NotTo(HaveOccurred())
	// Its failures are counted apart, from the start: its issuer breaks at
	// a random moment and heals at another.
	s.mon.Excuse(s.broken)
	s.useIssuingSecret()
	s.startTraffic()
	s.record("phase", fmt.Sprintf("set up in %v: %d clients, 2 dualca replicas, reload lag %v, --trust-propagation-delay=%v, the clients' Issuer on the issuing Secret %s",
		time.Since(s.begin).Round(time.Second), len(s.clients), lag.String(), propagationDelay(), issuingName))
	return s
}

// rememberMaxKnown rotates the root until dualca's record remembers
// bundle.MaxKnown roots, before the clients, the monitor and the traffic
// exist, and checks that it does. dualca keeps every root it read from the
// root Secret, up to MaxKnown, parsed, in its record and in memory: a
// year of weekly rotations. The soak rotates every minute or so, so
// without this its leader would still be filling that set when the leak
// judge fits its memory (45 roots in an hour), and growth that ends at
// MaxKnown by design would be extrapolated over 30 days. From here on,
// each rotation adds one root and drops the oldest: what the judge then
// sees growing is not bounded by design. Each rotation waits until the
// gateway trusts the new root, so that dualca read every one.
func (s *soak) rememberMaxKnown() {
	began := time.Now()
	for n := 1; n <= bundle.MaxKnown; n++ {
		r, err := s.c.RotateRootThrough(s.ctx, namespace, rootName)
		s.g.Expect(err).NotTo(HaveOccurred(), "rotation %d of %d before the run", n, bundle.MaxKnown)
		s.g.Eventually(func() ([]string, error) {
			return s.fingerprints(gatewayName, "ca.crt")
		}).WithTimeout(time.Minute).WithPolling(50*time.Millisecond).Should(ContainElement(bundle.Fingerprint(r.Root)),
			"the gateway trusts the root of rotation %d before the run", n)
	}
	state := flags.DefaultStateSecret(types.NamespacedName{Namespace: namespace, Name: gatewayName}).Name
	s.g.Eventually(func() ([]string, error) {
		return s.fingerprints(state, "roots.pem")
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(HaveLen(bundle.MaxKnown),
		"dualca's record remembers MaxKnown roots")
	s.record("phase", fmt.Sprintf("%d rotations before the clients in %v: dualca's record remembers %d roots, as many as it keeps",
		bundle.MaxKnown, time.Since(began).Round(time.Second), bundle.MaxKnown))
}

// fingerprints are the fingerprints of the certificates in the Secret
// name's field key.
func (s *soak) fingerprints(name, key string) ([]string, error) {
	sec, err := s.get(name)
	if err != nil {
		return nil, err
	}
	certs, err := bundle.ParseCertificates(key, sec.Data[key])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	fps := make([]string, len(certs))
	for i, c := range certs {
		fps[i] = bundle.Fingerprint(c)
	}
	return fps, nil
}

// useIssuingSecret makes the operator's one-line change once dualca has
// created its issuing Secret: the clients' CA Issuer signs from it instead
// of from the root Secret, and is Ready again on it. From then on every
// client issuance comes from a root the gateway has had the propagation
// delay to trust.
func (s *soak) useIssuingSecret() {
	s.g.Eventually(func() error {
		_, err := s.get(issuingName)
		return err
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(Succeed(), "dualca created the issuing Secret")
	key := types.NamespacedName{Namespace: namespace, Name: issuerName}
	s.g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		issuer := &cmapi.Issuer{}
		if err := s.c.Client.Get(s.ctx, key, issuer); err != nil {
			return err
		}
		issuer.Spec.CA.SecretName = issuingName
		return s.c.Client.Update(s.ctx, issuer)
	})).To(Succeed(), "the Issuer points at the issuing Secret")
	s.g.Eventually(func(g Gomega) {
		issuer := &cmapi.Issuer{}
		g.Expect(s.c.Client.Get(s.ctx, key, issuer)).To(Succeed())
		g.Expect(issuer.Spec.CA.SecretName).To(Equal(issuingName))
		g.Expect(issuer.Status.Conditions).To(ContainElement(And(
			HaveField("Type", cmapi.IssuerConditionReady),
			HaveField("Status", cmmeta.ConditionTrue),
			HaveField("ObservedGeneration", issuer.Generation))), "the Issuer is Ready on its current spec")
	}).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).Should(Succeed(), "cert-manager made the Issuer Ready on the issuing Secret")
	s.record("phase", fmt.Sprintf("Issuer %s signs from the issuing Secret %s (was %s)", issuerName, issuingName, rootName))
}

// dualcaArgs are the replicas' flags but the metrics address.
func (s *soak) dualcaArgs() []string {
	o := flags.Defaults()
	o.RootSecret = types.NamespacedName{Namespace: namespace, Name: rootName}
	o.GatewaySecret = types.NamespacedName{Namespace: namespace, Name: gatewayName}
	o.PollInterval = 30 * time.Second
	o.TrustPropagationDelay = propagationDelay()
	o.IssuingSecret = types.NamespacedName{Namespace: namespace, Name: issuingName}
	o.ServerSwitchGrace = switchGrace
	o.ClientSelector = labels.SelectorFromSet(labels.Set{clientLabel: "agent"})
	o.ClientNamespaces = []string{namespace}
	o.RenewalQPS, o.RenewalBurst = 10, 5
	o.LeaderElect = true
	o.MetricsBindAddress = ""
	o.Server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)} // the gateway is dialled there
	return append(o.Args(), "--zap-log-level=info")
}

// replica is one dualca process and where it serves its metrics.
type replica struct {
	*run.Process
	metrics string
	pprof   string // where it serves Go's profiling endpoints; "" without -soak.profiles
	started time.Time
}

// leads reports whether the replica had acquired the lease.
func (r *replica) leads() bool { return strings.Contains(r.Log(), leaseAcquired) }

// startReplica starts replica i (again), which returns once it is ready.
func (s *soak) startReplica(i int) {
	addr, err := controlplane.FreeAddress()
	s.g.Expect(err).NotTo(HaveOccurred())
	env, pprof, err := profileEnv()
	s.g.Expect(err).NotTo(HaveOccurred())
	p := run.StartProcessEnv(s.t, s.c.Kubeconfig, env, append(s.args, "--metrics-bind-address="+addr)...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas[i] = &replica{Process: p, metrics: addr, pprof: pprof, started: time.Now()}
}

// startTraffic starts the lagging gateway and clients and waits until every
// client gets through.
func (s *soak) startTraffic() {
	delay := mtls.UniformLag(lag.lo, lag.hi)
	// Cleanups run last first: this one stops the traffic itself before
	// waiting for it.
	ctx, stop := context.WithCancel(s.ctx)
	s.gateway = mtls.NewGateway(mtls.Lagged(mtls.OneObjectWatches(s.kube, namespace), delay), gatewayName)
	s.g.Expect(s.gateway.Start(ctx)).To(Succeed())
	shared := mtls.NewSharedWatch(s.kube, namespace)
	shared.Start(ctx)
	s.fleet = mtls.NewFleet(mtls.Lagged(shared, delay), s.clients, s.gateway.Addr(), mtls.ClientOptions{Interval: interval, OnFailure: s.failed})
	s.fleet.Start(ctx)
	s.t.Cleanup(func() {
		stop()
		s.fleet.Wait()
		s.gateway.Wait()
		shared.Wait()
	})
	s.g.Eventually(s.fleet.Stats).WithTimeout(lag.hi+2*time.Minute).WithPolling(time.Second).
		Should(HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 2)), "every client gets through")
}

// rotations has cert-manager re-issue the root at random moments until the
// end.
func (s *soak) rotations() {
	wait := rotate.draw()
	for n := 1; ; n++ {
		if !s.pause(wait) {
			return
		}
		if err := s.c.Trigger(s.ctx, namespace, rootName); err != nil {
			// kube-apiserver away, or the root still being issued: soon again.
			s.record(rotationSkipped, fmt.Sprintf("%d not requested: %v", n, err))
			wait = retryRotation
			continue
		}
		wait = rotate.draw()
		s.record(rotationRequested, fmt.Sprintf("%d requested (phase %s)", n, s.mon.Current()[bundle.AnnotationPhase]))
	}
}

// pause waits d, or less up to the end; it reports whether the run goes
// on after it.
func (s *soak) pause(d time.Duration) bool {
	left := time.Until(s.end)
	if d >= left {
		<-time.After(max(left, 0))
		return false
	}
	select {
	case <-s.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// drain heals the broken client and waits until the last rotation has
// converged: the gateway Steady on the root Secret's root, the issuing
// Secret and every client on it, and every client through again.
func (s *soak) drain() {
	s.heal()
	s.reapReplicas()
	timeout := 2*switchGrace + 2*time.Minute
	s.g.Eventually(func(g Gomega) {
		root := &corev1.Secret{}
		g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: namespace, Name: rootName}, root)).To(Succeed())
		cs, err := bundle.ParseCertificates("tls.crt", root.Data["tls.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		fp := bundle.Fingerprint(cs[0])
		g.Expect(s.mon.Current()).To(And(HaveKeyWithValue(bundle.AnnotationRoot, fp), HaveKeyWithValue(bundle.AnnotationServer, fp),
			HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseSteady))))
		issuing, err := s.get(issuingName)
		g.Expect(err).NotTo(HaveOccurred())
		is, err := bundle.ParseCertificates("tls.crt", issuing.Data["tls.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bundle.Fingerprint(is[0])).To(Equal(fp), "the issuing Secret holds the last root")
		for _, name := range s.clients {
			sec := &corev1.Secret{}
			g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: namespace, Name: name}, sec)).To(Succeed())
			leaf, err := bundle.ParseCertificates("tls.crt", sec.Data["tls.crt"])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(bundle.ChainsTo(leaf[0], cs[0])).To(BeTrue(), "client %s is on the last root", name)
		}
	}).WithTimeout(timeout).WithPolling(time.Second).Should(Succeed(), "the last rotation converges")
	s.record("phase", "converged: Steady on the last root, the issuing Secret and every client on it")
	// Every client loads its last Secret (lag) and gets through again.
	base := s.fleet.Stats().Total.Successes
	s.g.Eventually(s.fleet.Stats).WithTimeout(lag.hi+time.Minute).WithPolling(time.Second).Should(And(
		HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 2)),
		HaveField("Total.Successes", BeNumerically(">", base+2*len(s.clients)))), "every client gets through")
	s.record("phase", "every client through again: end")
}

// minutes formats a moment of the run: "12:04".
func minutes(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// get reads a Secret of the namespace.
func (s *soak) get(name string) (*corev1.Secret, error) {
	return s.kube.CoreV1().Secrets(namespace).Get(s.ctx, name, metav1.GetOptions{})
}
