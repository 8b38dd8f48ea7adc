package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/issuance"
	"github.com/dualca/dualca/test/lib/mtls"
)

// handshakes is what none of the others does, measured: for each system, a
// TLS gateway that reads the system's target Secret, and one client on the
// old root (its leaf and its ca.crt from it) handshaking every 100 ms; the
// root rotates once. The same client, the same gateway, the same rotation,
// and the same stand-in for cert-manager's issuing controller: when the
// client's Certificate turns Issuing, it is issued a leaf from the root
// the root Secret holds then. Only dualca turns it Issuing.
//
// dualca runs with short timings (handshakeDelay, handshakeGrace), so that
// the window covers its whole rotation: the new root trusted, the client
// renewed after the propagation delay, the server switched once the client
// is on the new root, the old root retired when no client uses it. The
// window lasts until dualca rests on the new root alone, and
// handshakeSettled more; the other systems get a window as long.
func (b *bench) handshakes(ctx context.Context) error {
	roots, err := newRoots(2)
	if err != nil {
		return err
	}
	after := time.Duration(0)
	for _, s := range b.systems() {
		res, err := b.handshakeRun(ctx, s, roots[0], roots[1], after)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		if s.name == systemDualca {
			after = res.after
		}
		b.report.handshakes = append(b.report.handshakes, res)
		b.log("handshakes through %s: %d of %d failed (%d before the rotation) over %s after it", s.name, res.failed, res.attempts, res.failedBefore, res.after.Round(time.Millisecond))
	}
	return nil
}

const (
	// handshakeBefore is how long the client handshakes before the
	// rotation.
	handshakeBefore = 2 * time.Second
	// handshakeDelay and handshakeGrace are dualca's
	// --trust-propagation-delay and --server-switch-grace here.
	handshakeDelay = time.Second
	handshakeGrace = 10 * time.Second
	// handshakeSettled is how long the client goes on after dualca rests
	// on the new root alone; handshakeLongest bounds the wait for that.
	handshakeSettled = 2 * time.Second
	handshakeLongest = time.Minute
	// handshakeAfter is the window after the rotation of a system measured
	// without dualca's before it (-only handshakes measures all three).
	handshakeAfter = 8 * time.Second
)

// handshakeRun measures system s across the rotation r1 → r2; after is
// the window after the rotation, 0 for dualca's own (until it settles).
func (b *bench) handshakeRun(ctx context.Context, s system, r1, r2 *certs.CA, after time.Duration) (handshakeResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.newWorld(ctx, "handshake-"+s.name, r1)
	if err != nil {
		return handshakeResult{}, err
	}
	// The client: a selected Certificate with its Secret, from the old root.
	if err := b.createClients(ctx, w.ns, r1, 1); err != nil {
		return handshakeResult{}, err
	}
	var extra []string
	if s.name == systemDualca {
		extra = []string{"--client-selector=" + clientLabel + "=agent", "--client-namespaces=" + w.ns,
			"--trust-propagation-delay=" + handshakeDelay.String(), "--server-switch-grace=" + handshakeGrace.String()}
	}
	target, err := w.watchSecret(ctx, s.target(w))
	if err != nil {
		return handshakeResult{}, err
	}
	p, err := s.start(ctx, w, b.cluster.Kubeconfig, extra...)
	if err != nil {
		return handshakeResult{}, err
	}
	defer p.stop()
	if _, err := target.trustingWhile(ctx, p, 0, r1.Cert); err != nil {
		return handshakeResult{}, err
	}
	secrets := mtls.OneObjectWatches(b.cs, w.ns)
	if s.name == systemTrustManager {
		// trust-manager writes ca.crt only: the gateway's own credential is
		// a certificate from the old root, as cert-manager issued it.
		if secrets, err = b.serverBeside(ctx, w, secrets, r1); err != nil {
			return handshakeResult{}, err
		}
	}
	gateway := mtls.NewGateway(secrets, s.target(w))
	if err := gateway.Start(ctx); err != nil {
		return handshakeResult{}, err
	}
	client := mtls.NewClient(mtls.OneObjectWatches(b.cs, w.ns), clientName(0), gateway.Addr(), mtls.ClientOptions{Interval: 100 * time.Millisecond})
	issuer := &standInIssuer{b: b, ns: w.ns, name: clientName(0)}
	issuer.root.Store(r1)
	var wg sync.WaitGroup
	wg.Go(func() { client.Run(ctx) })
	issuerCtx, stopIssuer := context.WithCancel(ctx)
	defer stopIssuer()
	wg.Go(func() { issuer.run(issuerCtx) })
	time.Sleep(handshakeBefore)
	before := client.Stats()
	mark := target.mark()
	issuer.root.Store(r2)
	rotated, err := w.writeRoot(ctx, r2)
	if err != nil {
		return handshakeResult{}, err
	}
	res := handshakeResult{system: s.name, after: after}
	if s.name == systemDualca {
		// Until dualca rests on the new root alone, then a little more.
		old := bundle.Fingerprint(r1.Cert)
		v, err := target.waitFor(ctx, mark, handshakeLongest, "the new root steady, the old one retired", func(v version) bool {
			return v.state.Phase == bundle.PhaseSteady && v.state.Server == bundle.Fingerprint(r2.Cert) && !v.trusts[old]
		})
		if err != nil {
			return handshakeResult{}, fmt.Errorf("dualca did not complete the rotation within %s: %w", handshakeLongest, err)
		}
		time.Sleep(time.Until(v.at.Add(handshakeSettled)))
		res.after = time.Since(rotated)
	} else {
		if res.after == 0 {
			res.after = handshakeAfter
		}
		time.Sleep(time.Until(rotated.Add(res.after)))
	}
	after2 := client.Stats()
	stopIssuer()
	cancel()
	wg.Wait()
	gateway.Wait()
	res.attempts, res.failed, res.failedBefore = after2.Attempts, after2.Failures, before.Failures
	res.notReady, res.lastError = after2.NotReady, after2.LastError
	res.timeline = timelineOf(target.since(mark), rotated, r1, r2)
	res.timeline.triggered, res.timeline.reissued = issuer.moments(rotated)
	if issuer.err != nil {
		return res, fmt.Errorf("the stand-in issuer: %w", issuer.err)
	}
	return res, nil
}

// moment is a time since the rotation; negative when it did not happen.
type moment time.Duration

const never = moment(-1)

func since(t, rotated time.Time) moment {
	if t.IsZero() {
		return never
	}
	return moment(t.Sub(rotated))
}

// ms is the moment in whole milliseconds, -1 for never.
func (m moment) ms() int64 {
	if m < 0 {
		return -1
	}
	return time.Duration(m).Milliseconds()
}

func (m moment) String() string {
	if m < 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f s", time.Duration(m).Seconds())
}

// rotationTimeline is when each step of the rotation reached the target
// (the watch event of its first version showing it), from the root's PUT
// returned; never for what did not happen in the window.
type rotationTimeline struct {
	trusted, triggered, reissued, switched, retired moment
}

// timelineOf reads the target's versions after the rotation.
func timelineOf(versions []version, rotated time.Time, r1, r2 *certs.CA) rotationTimeline {
	oldFP, newFP := bundle.Fingerprint(r1.Cert), bundle.Fingerprint(r2.Cert)
	var trusted, switched, retired time.Time
	for _, v := range versions {
		if trusted.IsZero() && v.trusts[newFP] {
			trusted = v.at
		}
		if switched.IsZero() && v.state.Server == newFP {
			switched = v.at
		}
		if retired.IsZero() && v.trusts[newFP] && !v.trusts[oldFP] {
			retired = v.at
		}
	}
	return rotationTimeline{trusted: since(trusted, rotated), triggered: never, reissued: never,
		switched: since(switched, rotated), retired: since(retired, rotated)}
}

// standInIssuer is cert-manager's issuing controller for one client, as far
// as the handshakes need it: when the client's Certificate turns Issuing,
// it issues it a new leaf from the root the root Secret holds (root), with
// that root as ca.crt, through test/lib/issuance (cert-manager's writes). It
// looks every 50 ms.
type standInIssuer struct {
	b        *bench
	ns, name string
	root     atomic.Pointer[certs.CA]

	mu                  sync.Mutex
	triggered, reissued time.Time // the first of each
	err                 error
}

func (s *standInIssuer) run(ctx context.Context) {
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, false, func(ctx context.Context) (bool, error) {
		return false, s.once(ctx)
	})
	if err != nil && ctx.Err() == nil {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}
}

func (s *standInIssuer) once(ctx context.Context) error {
	crt := &cmapi.Certificate{}
	if err := s.b.cluster.Client.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: s.name}, crt); err != nil {
		return err
	}
	if !isIssuing(crt) {
		return nil
	}
	s.mu.Lock()
	if s.triggered.IsZero() {
		s.triggered = time.Now()
	}
	s.mu.Unlock()
	root := s.root.Load()
	now := time.Now()
	leaf, err := certs.New(s.name, now.Add(-time.Minute), now.Add(24*time.Hour), certs.Options{}, root)
	if err != nil {
		return err
	}
	if err := issuance.Issue(ctx, s.b.cluster.Client, crt, leaf.CertPEM, leaf.KeyPEM, root.CertPEM); err != nil {
		return err
	}
	s.mu.Lock()
	if s.reissued.IsZero() {
		s.reissued = time.Now()
	}
	s.mu.Unlock()
	return nil
}

// moments are when the client was first seen Issuing and first re-issued.
func (s *standInIssuer) moments(rotated time.Time) (triggered, reissued moment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return since(s.triggered, rotated), since(s.reissued, rotated)
}

// serverBeside returns Secrets that give the gateway the Secret it asks
// for with tls.crt and tls.key of a server certificate from root, kept in
// a Secret of their own.
func (b *bench) serverBeside(ctx context.Context, w *world, base mtls.Secrets, root *certs.CA) (mtls.Secrets, error) {
	now := time.Now()
	leaf, err := certs.New("gateway", now.Add(-time.Minute), now.Add(24*time.Hour), certs.Options{}, root)
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gateway-server"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM}}
	if _, err := b.cs.CoreV1().Secrets(w.ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return merged{base: base, server: s.Name}, nil
}

// merged is Secrets whose Secrets carry the server pair of another one.
type merged struct {
	base   mtls.Secrets
	server string
}

func (m merged) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	var mu sync.Mutex
	var pair, trust *corev1.Secret
	send := func() {
		if pair == nil || trust == nil {
			return
		}
		out := trust.DeepCopy()
		out.Data[corev1.TLSCertKey], out.Data[corev1.TLSPrivateKeyKey] = pair.Data[corev1.TLSCertKey], pair.Data[corev1.TLSPrivateKeyKey]
		update(out)
	}
	waitPair := m.base.Watch(ctx, m.server, func(s *corev1.Secret) {
		mu.Lock()
		defer mu.Unlock()
		pair = s
		send()
	})
	waitTrust := m.base.Watch(ctx, name, func(s *corev1.Secret) {
		mu.Lock()
		defer mu.Unlock()
		trust = s
		send()
	})
	return func() { waitPair(); waitTrust() }
}

// isIssuing reports whether cert-manager is to issue crt (Issuing=True).
func isIssuing(crt *cmapi.Certificate) bool {
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return true
		}
	}
	return false
}

// handshakeResult is one system's row.
type handshakeResult struct {
	system                                   string
	attempts, failed, failedBefore, notReady int
	lastError                                string
	// after is the window after the rotation; timeline what reached the
	// target when.
	after    time.Duration
	timeline rotationTimeline
}
