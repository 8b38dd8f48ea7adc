package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/dualca/dualca/bundle"
)

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

// startMonitor starts the monitor of namespace ns and returns once its
// watch has listed the namespace: every version after that is seen, in
// order, and none before it is left out of the first list.
func startMonitor(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, clients int) *monitor {
	t.Helper()
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
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatalf("the monitor's watch of namespace %s did not sync within 30s", ns)
	}
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

// bundleRegressions lists the gateway versions that name as current a root
// that an earlier version had already moved on from: once a root became
// current, no later version may go back to an earlier one.
func (m *monitor) bundleRegressions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	var current string
	seen := map[string]bool{}
	for i, a := range m.history {
		fp := a[bundle.AnnotationRoot]
		if fp == "" || fp == current {
			continue
		}
		if seen[fp] {
			out = append(out, fmt.Sprintf("version %d: root %s is current again after %s", i+1, bundle.Short(fp), bundle.Short(current)))
		}
		seen[fp], current = true, fp
	}
	return out
}
