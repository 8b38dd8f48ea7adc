package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

const (
	rootName    = "root-ca"
	gatewayName = "gateway-credential"
	// rootSubject is every root's common name: cert-manager renews a root
	// with its subject and a new key, so the roots of a run cannot be told
	// apart by name.
	rootSubject = "bench-root-ca"
	// trustLabel selects the namespaces where trust-manager writes a world's
	// target, one world each.
	trustLabel = "bench.dualca.io/trust-target"
)

// world is one namespace with a root Secret, and watches of the Secrets the
// systems under test write there.
type world struct {
	b    *bench
	ns   string
	root *corev1.Secret // as last written
}

// newWorld creates the namespace ns holding root as its root Secret.
func (b *bench) newWorld(ctx context.Context, ns string, root *certs.CA) (*world, error) {
	_, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{trustLabel: ns}}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	w := &world{b: b, ns: ns}
	if _, err := w.writeRoot(ctx, root); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *world) rootFlag() string    { return "--root-secret=" + w.ns + "/" + rootName }
func (w *world) gatewayFlag() string { return "--gateway-secret=" + w.ns + "/" + gatewayName }

// newRoot is a root CA as cert-manager's CA issuer holds it: the same
// subject as every other root, a new key, valid for a day from a minute ago.
func newRoot() (*certs.CA, error) {
	now := time.Now()
	return certs.NewCA(rootSubject, now.Add(-time.Minute), now.Add(24*time.Hour))
}

// newRoots makes n roots before any clock starts: cert-manager makes the
// keys, not the systems measured.
func newRoots(n int) ([]*certs.CA, error) {
	roots := make([]*certs.CA, n)
	for i := range roots {
		var err error
		if roots[i], err = newRoot(); err != nil {
			return nil, err
		}
	}
	return roots, nil
}

// writeRoot creates or replaces the root Secret with ca and returns the
// moment the API server acknowledged the write (the call returned).
func (w *world) writeRoot(ctx context.Context, ca *certs.CA) (time.Time, error) {
	return writeCA(ctx, w.b.cs.CoreV1().Secrets(w.ns), rootName, &w.root, ca)
}

// writeCA creates the Secret name holding ca as a root Secret holds it,
// or replaces *last, its version last written, and keeps the version
// written in *last. It returns the moment the API server acknowledged the
// write (the call returned).
func writeCA(ctx context.Context, secrets typedcorev1.SecretInterface, name string, last **corev1.Secret, ca *certs.CA) (time.Time, error) {
	data := map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM, "ca.crt": ca.CertPEM}
	var written *corev1.Secret
	var err error
	if *last == nil {
		written, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
	} else {
		next := (*last).DeepCopy()
		next.Data = data
		written, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
	}
	acked := time.Now()
	if err != nil {
		return acked, fmt.Errorf("writing %s: %w", name, err)
	}
	*last = written
	return acked, nil
}

// watchSecret records every version of one Secret of the world with the
// moment it arrived through a watch, as a gateway receives them.
func (w *world) watchSecret(ctx context.Context, name string) (*secretWatch, error) {
	secrets := w.b.cs.CoreV1().Secrets(w.ns)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = sel
		return secrets.Watch(ctx, o)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		return nil, err
	}
	h := &secretWatch{changed: make(chan struct{})}
	for i := range list.Items {
		h.add(time.Now(), &list.Items[i])
	}
	go func() {
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-rw.ResultChan():
				if !ok {
					return
				}
				if s, isSecret := e.Object.(*corev1.Secret); isSecret && e.Type != watch.Deleted {
					h.add(time.Now(), s)
				}
			}
		}
	}()
	return h, nil
}

// version is a version of a watched Secret as it arrived.
type version struct {
	at    time.Time
	rv    string // the Secret's resourceVersion
	state bundle.State
	// trusts are the fingerprints of the certificates of ca.crt.
	trusts map[string]bool
	// chainBytes is the DER size of tls.crt, what a handshake carries, and
	// links the certificates after its first.
	chainBytes, links int
}

// secretWatch is the history of a Secret.
type secretWatch struct {
	mu       sync.Mutex
	versions []version
	changed  chan struct{} // closed and replaced at every version
}

func (g *secretWatch) add(at time.Time, s *corev1.Secret) {
	v := version{at: at, rv: s.ResourceVersion, state: bundle.ParseState(s.Annotations), trusts: map[string]bool{}}
	cas, _ := bundle.ParseCertificates("ca.crt", s.Data["ca.crt"])
	for _, c := range cas {
		v.trusts[bundle.Fingerprint(c)] = true
	}
	chain, _ := bundle.ParseCertificates(corev1.TLSCertKey, s.Data[corev1.TLSCertKey])
	for _, c := range chain {
		v.chainBytes += len(c.Raw)
	}
	v.links = max(0, len(chain)-1)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.versions = append(g.versions, v)
	close(g.changed)
	g.changed = make(chan struct{})
}

// mark is where the next wait starts looking.
func (g *secretWatch) mark() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.versions)
}

// since returns the versions from mark on.
func (g *secretWatch) since(mark int) []version {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]version(nil), g.versions[min(mark, len(g.versions)):]...)
}

// waitFor returns the first version at or after mark that satisfies ok.
func (g *secretWatch) waitFor(ctx context.Context, mark int, timeout time.Duration, what string, ok func(version) bool) (version, error) {
	deadline := time.After(timeout)
	for {
		g.mu.Lock()
		for _, v := range g.versions[min(mark, len(g.versions)):] {
			if ok(v) {
				g.mu.Unlock()
				return v, nil
			}
		}
		mark = len(g.versions)
		changed := g.changed
		g.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			return version{}, fmt.Errorf("no version with %s within %s", what, timeout)
		case <-ctx.Done():
			return version{}, ctx.Err()
		}
	}
}

// trusting waits for a version whose ca.crt holds root.
func (g *secretWatch) trusting(ctx context.Context, mark int, root *x509.Certificate) (version, error) {
	fp := bundle.Fingerprint(root)
	return g.waitFor(ctx, mark, time.Minute, "root "+bundle.Short(fp)+" in ca.crt", func(v version) bool { return v.trusts[fp] })
}

// trustingWhile waits for a version from mark on whose ca.crt holds root,
// and fails at once if p exits meanwhile.
func (g *secretWatch) trustingWhile(ctx context.Context, p *process, mark int, root *x509.Certificate) (version, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	v, err := g.trusting(ctx, mark, root)
	if err != nil {
		if aliveErr := p.alive(); aliveErr != nil {
			return v, aliveErr
		}
		return v, fmt.Errorf("%w\n%s", err, tailOf(p.log.String(), 20))
	}
	return v, nil
}

// steadyOn waits for a dualca gateway to rest on root: current, served, alone.
func (g *secretWatch) steadyOn(ctx context.Context, mark int, root *certs.CA) (version, error) {
	fp := bundle.Fingerprint(root.Cert)
	return g.waitFor(ctx, mark, time.Minute, "root "+bundle.Short(fp)+" steady", func(v version) bool {
		return v.state.Root == fp && v.state.Server == fp && v.state.Phase == bundle.PhaseSteady
	})
}
