package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dualca/dualca/test/certs"
	"github.com/dualca/dualca/test/mtls"
)

// handshakes is what none of the others does, measured: for each system, a
// TLS gateway that reads the system's target Secret, and one client on the
// old root (its leaf and its ca.crt from it, never renewed) handshaking
// every 100 ms; the root rotates once. The same client, the same gateway,
// the same rotation.
func (b *bench) handshakes(ctx context.Context) error {
	roots, err := newRoots(2)
	if err != nil {
		return err
	}
	for _, s := range b.systems() {
		res, err := b.handshakeRun(ctx, s, roots[0], roots[1])
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		b.report.handshakes = append(b.report.handshakes, res)
		b.log("handshakes through %s: %d of %d failed (%d before the rotation)", s.name, res.failed, res.attempts, res.failedBefore)
	}
	return nil
}

// handshakeBefore and handshakeAfter are how long the client handshakes
// before and after the rotation.
const (
	handshakeBefore = 2 * time.Second
	handshakeAfter  = 6 * time.Second
)

func (b *bench) handshakeRun(ctx context.Context, s system, r1, r2 *certs.CA) (handshakeResult, error) {
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
		extra = []string{"--client-selector=" + clientLabel + "=agent", "--client-namespaces=" + w.ns}
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
	var wg sync.WaitGroup
	wg.Go(func() { client.Run(ctx) })
	time.Sleep(handshakeBefore)
	before := client.Stats()
	if _, err := w.writeRoot(ctx, r2); err != nil {
		return handshakeResult{}, err
	}
	time.Sleep(handshakeAfter)
	after := client.Stats()
	cancel()
	wg.Wait()
	gateway.Wait()
	res := handshakeResult{system: s.name, attempts: after.Attempts, failed: after.Failures, failedBefore: before.Failures,
		notReady: after.NotReady, lastError: after.LastError}
	return res, nil
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

// handshakeResult is one system's row.
type handshakeResult struct {
	system                                   string
	attempts, failed, failedBefore, notReady int
	lastError                                string
}
