package mtls_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/mtls"
)

// interval paces the test clients: fast enough for short tests, slow enough
// for a few of them under -race on two cores.
const interval = 20 * time.Millisecond

// All the tests but TestStopping run in parallel, each in a namespace of its own
// with its own gateway. TestStopping, which looks for left-over goroutines,
// runs first and alone: Go starts the parallel tests after it.

// Run must return when its context is cancelled, and nothing the package
// started may outlive Wait.
func TestStopping(t *testing.T) {
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	w.putPair("gateway", issue(t, r1, "gateway.mtls.svc"), r1)
	w.putPair("agent-1", issue(t, r1, "agent-1"), r1)
	w.putPair("agent-2", issue(t, r1, "agent-2"), r1)

	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	gw := mtls.NewGateway(w.secrets, "gateway")
	w.g.Expect(gw.Start(ctx)).To(Succeed())
	shared := mtls.NewSharedWatch(cs, w.ns)
	shared.Start(ctx)
	fleet := mtls.NewFleet(shared, []string{"agent-1"}, gw.Addr(), mtls.ClientOptions{Interval: interval})
	fleet.Start(ctx)
	alone := mtls.NewClient(w.secrets, "agent-2", gw.Addr(), mtls.ClientOptions{Interval: interval})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		alone.Run(ctx)
	}()
	w.g.Eventually(fleet.Stats).Should(HaveField("Total.Successes", BeNumerically(">=", 2)))
	w.g.Eventually(alone.Stats).Should(HaveField("Successes", BeNumerically(">=", 2)))
	w.g.Expect(ours()).NotTo(BeEmpty(), "the leak check below can see the package's goroutines")

	cancel()
	w.g.Eventually(returned).Should(BeClosed(), "Run returns once its context is cancelled")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		fleet.Wait()
		gw.Wait()
		shared.Wait()
	}()
	w.g.Eventually(stopped).Should(BeClosed())
	w.g.Expect(ours()).To(BeEmpty(), "no goroutine of the package is left")
}

func TestTrustedClientsAreAccepted(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	server, gw := w.serve(t, r1)
	w.g.Expect(gw.ServerChain()).To(HaveExactElements(equalCert(server.Cert)))
	w.g.Expect(gw.ClientCAs()).To(HaveExactElements(equalCert(r1.Cert)))

	w.putPair("agent-1", issue(t, r1, "agent-1"), r1)
	w.putPair("agent-2", issue(t, r1, "agent-2"), r1)
	ctx, cancel := context.WithCancel(w.ctx)
	shared := mtls.NewSharedWatch(cs, w.ns)
	shared.Start(ctx)
	// agent-3's Secret is written only once its client is running.
	fleet := mtls.NewFleet(shared, []string{"agent-1", "agent-2", "agent-3"}, gw.Addr(), mtls.ClientOptions{Interval: interval})
	fleet.Start(ctx)
	t.Cleanup(func() {
		cancel()
		fleet.Wait()
		shared.Wait()
	})

	w.g.Eventually(fleet.Stats).Should(HaveField("Clients", HaveKeyWithValue("agent-3", HaveField("NotReady", BeNumerically(">=", 2)))))
	w.putPair("agent-3", issue(t, r1, "agent-3"), r1)
	w.g.Eventually(fleet.Stats).Should(HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 3)),
		"every client succeeds")

	stats := fleet.Stats()
	w.g.Expect(stats.Total.Failures).To(BeZero(), "a client without its Secret yet is not ready, not failing: %v", stats.Total.Errors)
	w.g.Expect(stats.Failed()).To(BeEmpty())
	gs := gw.Stats()
	w.g.Expect(gs.Rejected).To(BeZero(), "%v", gs.Errors)
	w.g.Expect(gs.Peers).To(HaveKeyWithValue("agent-1", BeNumerically(">=", 3)))
	w.g.Expect(gs.Peers).To(HaveKeyWithValue("agent-2", BeNumerically(">=", 3)))
	w.g.Expect(gs.Peers).To(HaveKeyWithValue("agent-3", BeNumerically(">=", 3)))
}

// A gateway is started when it serves: Start waits for the first usable
// version of its Secret, however late it comes, so a client that dials
// the moment Start returns is never refused for want of a credential.
func TestGatewayStartReturnsOnceItServes(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	ctx, cancel := context.WithCancel(w.ctx)
	gw := mtls.NewGateway(w.secrets, "gateway")
	started := make(chan error, 1)
	go func() { started <- gw.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		gw.Wait()
	})
	w.g.Consistently(started).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "no Secret yet: not started")
	w.put("gateway", []byte("not a certificate"), []byte("not a key"), certs.Bundle(r1))
	w.g.Eventually(gw.Stats).Should(HaveField("LoadErrors", 1))
	w.g.Consistently(started).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "an unusable Secret: not started")
	server := issue(t, r1, "gateway.mtls.svc")
	w.putPair("gateway", server, r1)
	w.g.Eventually(started).Should(Receive(BeNil()))
	w.g.Expect(gw.ServerChain()).To(HaveExactElements(equalCert(server.Cert)), "it serves the Secret once started")

	w.gw = gw
	c := w.client(w.putPair("agent", issue(t, r1, "agent"), r1))
	w.g.Eventually(c.Stats).Should(HaveField("Successes", BeNumerically(">=", 3)))
	w.g.Expect(c.Stats().Failures).To(BeZero(), "%v", c.Stats().Errors)
	w.g.Expect(gw.Stats()).To(And(HaveField("Rejected", BeZero()), HaveField("Reloads", 1)))
}

// A gateway whose Secret never comes is not started: Start fails when its
// context ends, and what it started stops.
func TestGatewayStartFailsWithoutASecret(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(w.ctx, 500*time.Millisecond)
	defer cancel()
	gw := mtls.NewGateway(w.secrets, "never-written")
	w.g.Expect(gw.Start(ctx)).To(MatchError(And(ContainSubstring("never-written"), ContainSubstring("before a credential was loaded"))))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		gw.Wait()
	}()
	w.g.Eventually(stopped).Should(BeClosed(), "the watch and the listener stopped")
}

func TestRefusedHandshakesAreCountedOnBothSides(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	other := certs.MustCA(t, "other root", time.Hour)
	_, gw := w.serve(t, r1)
	now := time.Now()

	tests := map[string]struct {
		leaf      *certs.CA
		trusts    *certs.CA
		clientErr string // part of the client's error
		serverErr string // part of the gateway's error
	}{
		"a client whose leaf is from an untrusted CA is rejected by the gateway": {
			leaf:      issue(t, other, "stranger"),
			trusts:    r1,
			clientErr: "waiting for the gateway's byte: remote error: tls: unknown certificate authority",
			serverErr: "tls: failed to verify certificate: x509: certificate signed by unknown authority",
		},
		"a client with an expired leaf is rejected by the gateway": {
			leaf:      certs.MustNew(t, "expired", now.Add(-2*time.Hour), now.Add(-time.Hour), certs.Options{}, r1),
			trusts:    r1,
			clientErr: "remote error: tls: expired certificate",
			serverErr: "x509: certificate has expired",
		},
		"a client that does not trust the gateway's root refuses the gateway": {
			leaf:      issue(t, r1, "suspicious"),
			trusts:    other,
			clientErr: "handshake: verifying the gateway: x509: certificate signed by unknown authority",
			serverErr: "remote error: tls: bad certificate",
		},
	}
	i := 0
	for name, tc := range tests {
		i++
		secret := fmt.Sprintf("agent-%d", i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			w := w.on(t)
			g := w.g
			c := w.client(w.putPair(secret, tc.leaf, tc.trusts))
			g.Eventually(c.Stats).Should(And(
				HaveField("Failures", BeNumerically(">=", 2)),
				HaveField("Errors", HaveKey(ContainSubstring(tc.clientErr))),
			))
			g.Expect(c.Stats().Successes).To(BeZero())
			g.Eventually(gw.Stats).Should(HaveField("Errors", HaveKey(ContainSubstring(tc.serverErr))))
			g.Expect(gw.Stats().Peers).NotTo(HaveKey(tc.leaf.Cert.Subject.CommonName))
		})
	}
}

func TestGatewayReloadsItsSecret(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	r2 := certs.MustCA(t, "R2", time.Hour)
	server, gw := w.serve(t, r1)
	old := w.client(w.putPair("old", issue(t, r1, "old"), r1))
	early := w.client(w.putPair("early", issue(t, r2, "early"), r1))
	w.g.Eventually(old.Stats).Should(HaveField("ConsecutiveSuccesses", BeNumerically(">=", 3)))
	w.g.Eventually(early.Stats).Should(HaveField("ConsecutiveFailures", BeNumerically(">=", 2)),
		"a client issued under R2 is rejected while the gateway trusts R1 only")

	w.put("gateway", server.CertPEM, server.KeyPEM, certs.Bundle(r1, r2))
	w.g.Eventually(gw.ClientCAs).Should(HaveExactElements(equalCert(r1.Cert), equalCert(r2.Cert)))
	w.g.Expect(gw.Stats().Reloads).To(Equal(2))
	w.g.Eventually(early.Stats).Should(HaveField("ConsecutiveSuccesses", BeNumerically(">=", 3)),
		"the gateway trusts R2 without a restart")

	// The client's own Secret re-issued under R2, under a new name so that
	// the gateway tells whose handshakes it accepted.
	w.putPair("old", issue(t, r2, "old-reissued"), r1)
	w.g.Eventually(gw.Stats).Should(HaveField("Peers", HaveKeyWithValue("old-reissued", BeNumerically(">=", 3))))
	w.g.Expect(old.Certificate().Issuer.CommonName).To(Equal("R2"))
	w.g.Expect(old.Stats()).To(And(HaveField("Reloads", 2), HaveField("Failures", BeZero())))
}

func TestGatewayKeepsItsLastGoodCredential(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	server, gw := w.serve(t, r1)
	c := w.client(w.putPair("agent", issue(t, r1, "agent"), r1))
	w.g.Eventually(c.Stats).Should(HaveField("Successes", BeNumerically(">=", 1)))

	tests := []struct {
		name   string
		change func()
		want   types.GomegaMatcher
	}{
		{"a key that does not parse", func() { w.put("gateway", server.CertPEM, []byte("not a key"), certs.Bundle(r1)) },
			And(HaveField("LoadErrors", 1), HaveField("LastLoadError", ContainSubstring("tls.key")))},
		{"an empty ca.crt", func() { w.put("gateway", server.CertPEM, server.KeyPEM, nil) },
			And(HaveField("LoadErrors", 2), HaveField("LastLoadError", ContainSubstring("ca.crt")))},
		{"a deleted Secret", func() { w.delete("gateway") },
			HaveField("Deletions", 1)},
	}
	// Steps of one story, in order: each leaves the gateway serving the first
	// version.
	for _, step := range tests {
		step.change()
		w.g.Eventually(gw.Stats).Should(step.want, step.name)
		w.g.Expect(gw.ServerChain()).To(HaveExactElements(equalCert(server.Cert)), step.name)
		w.g.Expect(gw.ClientCAs()).To(HaveExactElements(equalCert(r1.Cert)), step.name)
		before := c.Stats().Successes
		w.g.Eventually(c.Stats).Should(HaveField("Successes", BeNumerically(">=", before+3)), step.name)
	}
	w.g.Expect(gw.Stats()).To(And(HaveField("Reloads", 1), HaveField("Rejected", BeZero())))
	w.g.Expect(c.Stats().Failures).To(BeZero())
}

// The trick dualca uses during a rotation: the gateway serves its leaf
// (issued by R1) followed by R1 cross-signed by R2, the same subject and key
// as R1 but issued by R2. Clients that trust only R1 and clients that trust
// only R2 both accept it.
func TestCrossSignedChainSatisfiesBothRoots(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	r2 := certs.MustCA(t, "R2", time.Hour)
	r3 := certs.MustCA(t, "R3", time.Hour)
	now := time.Now()
	cross := certs.MustNew(t, "R1", now.Add(-time.Minute), now.Add(time.Hour), certs.Options{IsCA: true, Key: r1.Key}, r2)
	w.g.Expect(cross.Cert.RawSubject).To(Equal(r1.Cert.RawSubject))
	w.g.Expect(cross.Cert.CheckSignatureFrom(r2.Cert)).To(Succeed())

	server, gw := w.serve(t, r1)
	trustsR1 := w.client(w.putPair("trusts-r1", issue(t, r1, "trusts-r1"), r1))
	trustsR2 := w.client(w.putPair("trusts-r2", issue(t, r1, "trusts-r2"), r2))
	trustsR3 := w.client(w.putPair("trusts-r3", issue(t, r1, "trusts-r3"), r3))
	w.g.Eventually(trustsR2.Stats).Should(And(
		HaveField("ConsecutiveFailures", BeNumerically(">=", 2)),
		HaveField("LastError", ContainSubstring("verifying the gateway: x509: certificate signed by unknown authority")),
	), "without the cross-certificate a client that trusts only R2 refuses the gateway")

	w.put("gateway", append(server.CertPEM, cross.CertPEM...), server.KeyPEM, certs.Bundle(r1))
	w.g.Eventually(gw.ServerChain).Should(HaveExactElements(equalCert(server.Cert), equalCert(cross.Cert)))
	w.g.Eventually(trustsR2.Stats).Should(HaveField("ConsecutiveSuccesses", BeNumerically(">=", 3)))
	w.g.Eventually(trustsR1.Stats).Should(HaveField("ConsecutiveSuccesses", BeNumerically(">=", 3)))
	w.g.Expect(trustsR1.Stats().Failures).To(BeZero(), "the longer chain never disturbs a client of R1")
	w.g.Expect(trustsR3.Stats()).To(And(HaveField("Successes", BeZero()), HaveField("Failures", BeNumerically(">=", 3))),
		"a client that trusts neither root still refuses the gateway")
}

// world is one test's namespace and what runs in it until the test ends.
type world struct {
	t       *testing.T
	g       *WithT
	ns      string
	ctx     context.Context
	secrets mtls.Secrets  // one-object watches in ns
	gw      *mtls.Gateway // the gateway clients dial
}

var namespaces atomic.Int64

func newWorld(t *testing.T) *world {
	t.Helper()
	g := newG(t)
	ns := fmt.Sprintf("mtls-%d", namespaces.Add(1))
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &world{t: t, g: g, ns: ns, ctx: ctx, secrets: mtls.OneObjectWatches(cs, ns)}
}

func newG(t *testing.T) *WithT {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second)
	g.SetDefaultEventuallyPollingInterval(10 * time.Millisecond)
	return g
}

// serve writes the gateway's Secret as cert-manager would, a server
// certificate from root and root as ca.crt, and starts the gateway on it.
func (w *world) serve(t *testing.T, root *certs.CA) (*certs.CA, *mtls.Gateway) {
	t.Helper()
	server := issue(t, root, "gateway.mtls.svc")
	w.putPair("gateway", server, root)
	return server, w.gateway("gateway")
}

// gateway starts a gateway for the Secret name, which Start returns only
// once it has loaded; the test's end stops it.
func (w *world) gateway(name string) *mtls.Gateway {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	gw := mtls.NewGateway(w.secrets, name)
	w.g.Expect(gw.Start(ctx)).To(Succeed())
	w.t.Cleanup(func() {
		cancel()
		gw.Wait()
	})
	w.g.Expect(gw.Stats()).To(HaveField("Reloads", 1), "a started gateway has loaded its Secret")
	w.gw = gw
	return gw
}

// on is w for a subtest: failures and cleanups go to t.
func (w *world) on(t *testing.T) *world {
	sub := *w
	sub.t, sub.g = t, newG(t)
	return &sub
}

// client runs a client of the Secret name against the only gateway of the
// world until the test ends.
func (w *world) client(name string) *mtls.Client {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	c := mtls.NewClient(w.secrets, name, w.gw.Addr(), mtls.ClientOptions{Interval: interval})
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	w.t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

// putPair writes a Secret as cert-manager would for leaf, trusting ca, and
// returns its name.
func (w *world) putPair(name string, leaf, ca *certs.CA) string {
	w.t.Helper()
	w.put(name, leaf.CertPEM, leaf.KeyPEM, ca.CertPEM)
	return name
}

// put creates or updates the kubernetes.io/tls Secret name.
func (w *world) put(name string, tlsCrt, tlsKey, caCrt []byte) {
	w.t.Helper()
	secrets := cs.CoreV1().Secrets(w.ns)
	data := map[string][]byte{corev1.TLSCertKey: tlsCrt, corev1.TLSPrivateKeyKey: tlsKey, "ca.crt": caCrt}
	s, err := secrets.Get(w.ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = secrets.Create(w.ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}, metav1.CreateOptions{})
		w.g.Expect(err).NotTo(HaveOccurred())
		return
	}
	w.g.Expect(err).NotTo(HaveOccurred())
	s.Data = data
	_, err = secrets.Update(w.ctx, s, metav1.UpdateOptions{})
	w.g.Expect(err).NotTo(HaveOccurred())
}

func (w *world) delete(name string) {
	w.t.Helper()
	w.g.Expect(cs.CoreV1().Secrets(w.ns).Delete(w.ctx, name, metav1.DeleteOptions{})).To(Succeed())
}

// issue makes a leaf named cn, signed by ca, valid for the test.
func issue(t *testing.T, ca *certs.CA, cn string) *certs.CA {
	now := time.Now()
	return certs.MustNew(t, cn, now.Add(-time.Minute), now.Add(time.Hour), certs.Options{}, ca)
}

// equalCert matches the same certificate, byte for byte.
func equalCert(want *x509.Certificate) types.GomegaMatcher {
	return Satisfy(func(c *x509.Certificate) bool { return c.Equal(want) })
}

// ours returns the stacks of the goroutines running the package's code or
// started by it.
func ours() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "dualca/dualca/test/lib/mtls.") {
			found = append(found, g)
		}
	}
	return found
}

// A lagged gateway takes each version into use late, and in order: a
// version that came later but drew a shorter lag waits for the one before.
func TestLaggedVersionsArriveLateAndInOrder(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r1 := certs.MustCA(t, "R1", time.Hour)
	r2 := certs.MustCA(t, "R2", time.Hour)
	server := issue(t, r1, "gateway.mtls.svc")
	w.putPair("gateway", server, r1)
	lags := make(chan time.Duration, 3)
	lags <- 0
	lags <- 2 * time.Second
	lags <- 0
	w.secrets = mtls.Lagged(w.secrets, func() time.Duration {
		select {
		case l := <-lags:
			return l
		default:
			return 0
		}
	})
	gw := w.gateway("gateway")
	// The second version's lag runs from its arrival, which may come before
	// the third is written: the bound holds from the second's write.
	written := time.Now()
	w.put("gateway", server.CertPEM, server.KeyPEM, certs.Bundle(r1, r2))
	w.put("gateway", server.CertPEM, server.KeyPEM, certs.Bundle(r2, r1))
	w.g.Eventually(gw.ClientCAs).Should(HaveExactElements(equalCert(r2.Cert), equalCert(r1.Cert)))
	w.g.Expect(time.Since(written)).To(BeNumerically(">=", 2*time.Second), "the second version waited its lag, the third waited for it")
	w.g.Consistently(gw.ClientCAs).WithTimeout(500*time.Millisecond).Should(HaveExactElements(equalCert(r2.Cert), equalCert(r1.Cert)),
		"the slow version never overwrote the newer one")
	w.g.Expect(gw.Stats().Reloads).To(Equal(3))
}

func TestFailuresAreReportedWithTheLeafAndRootsWithWhenLoaded(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	g := w.g
	r1 := certs.MustCA(t, "R1", time.Hour)
	r2 := certs.MustCA(t, "R2", time.Hour)
	server, gw := w.serve(t, r1)
	g.Expect(gw.RootLoaded(bundle.Fingerprint(r1.Cert))).NotTo(BeZero(), "the gateway verifies clients with R1")
	g.Expect(gw.RootLoaded(bundle.Fingerprint(r2.Cert))).To(BeZero(), "the gateway has never had R2")

	var mu sync.Mutex
	var failures []mtls.Failure
	leaf := issue(t, r2, "early")
	w.putPair("early", leaf, r1)
	before := time.Now()
	ctx, cancel := context.WithCancel(w.ctx)
	c := mtls.NewClient(w.secrets, "early", gw.Addr(), mtls.ClientOptions{Interval: interval, OnFailure: func(f mtls.Failure) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, f)
	}})
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	g.Eventually(c.Stats).Should(HaveField("Failures", BeNumerically(">=", 2)))

	// The gateway takes R2 in: the client gets through, and the gateway
	// says when it took R2.
	both := append(slices.Clone(r1.CertPEM), r2.CertPEM...)
	w.put("gateway", server.CertPEM, server.KeyPEM, both)
	g.Eventually(c.Stats).Should(HaveField("ConsecutiveSuccesses", BeNumerically(">=", 1)))
	loaded := gw.RootLoaded(bundle.Fingerprint(r2.Cert))
	g.Expect(loaded).To(BeTemporally(">", before))
	mu.Lock()
	defer mu.Unlock()
	g.Expect(failures).To(HaveLen(c.Stats().Failures), "every failure was reported")
	for _, f := range failures {
		g.Expect(f.Client).To(Equal("early"))
		g.Expect(f.Leaf).To(equalCert(leaf.Cert))
		g.Expect(f.Err).To(MatchError(ContainSubstring("unknown certificate authority")))
		g.Expect(f.Start).To(And(BeTemporally(">=", before), BeTemporally("<", loaded)))
	}
}
