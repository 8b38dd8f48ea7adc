package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
)

const (
	rootName    = "root-ca"
	gatewayName = "gateway-credential"
)

// world is one namespace with a root Secret and the gateway dualca keeps.
type world struct {
	b    *bench
	ns   string
	root *corev1.Secret // as last written
	gw   *gatewayWatch
	// rootSeen is the history of the root Secret, as watchers see it.
	rootSeen *gatewayWatch
}

// newWorld creates the namespace ns holding root as its root Secret, and
// starts watching the root and the gateway Secret there.
func (b *bench) newWorld(ctx context.Context, ns string, root *certs.CA) (*world, error) {
	_, err := b.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	w := &world{b: b, ns: ns}
	if _, err := w.writeRoot(ctx, root); err != nil {
		return nil, err
	}
	return w, w.watchGateway(ctx)
}

func (w *world) rootFlag() string    { return "--root-secret=" + w.ns + "/" + rootName }
func (w *world) gatewayFlag() string { return "--gateway-secret=" + w.ns + "/" + gatewayName }

// newRoot is a root CA as cert-manager's CA issuer would hold it, valid for
// a day from a minute ago.
func newRoot(cn string) (*certs.CA, error) {
	now := time.Now()
	return certs.NewCA(cn, now.Add(-time.Minute), now.Add(24*time.Hour))
}

// writeRoot creates or replaces the root Secret with ca and returns the
// moment the write was sent.
func (w *world) writeRoot(ctx context.Context, ca *certs.CA) (time.Time, error) {
	data := map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM, "ca.crt": ca.CertPEM}
	secrets := w.b.cs.CoreV1().Secrets(w.ns)
	sent := time.Now()
	var err error
	if w.root == nil {
		w.root, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: rootName}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
	} else {
		next := w.root.DeepCopy()
		next.Data = data
		w.root, err = secrets.Update(ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		return sent, fmt.Errorf("writing the root: %w", err)
	}
	return sent, nil
}

// watchGateway starts recording every version of the gateway Secret with
// the moment it arrived, and of the root Secret.
func (w *world) watchGateway(ctx context.Context) (err error) {
	if w.gw, err = w.watchSecret(ctx, gatewayName); err != nil {
		return err
	}
	w.rootSeen, err = w.watchSecret(ctx, rootName)
	return err
}

// watchSecret records every version of one Secret with the moment it
// arrived through a watch, as dualca and the gateway receive them.
func (w *world) watchSecret(ctx context.Context, name string) (*gatewayWatch, error) {
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
	h := &gatewayWatch{changed: make(chan struct{})}
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

// gatewayVersion is a version of the gateway Secret as it arrived.
type gatewayVersion struct {
	at    time.Time
	state bundle.State
	roots int
	// cert is the fingerprint of the first certificate of tls.crt.
	cert string
}

// gatewayWatch is the history of the gateway Secret.
type gatewayWatch struct {
	mu       sync.Mutex
	versions []gatewayVersion
	changed  chan struct{} // closed and replaced at every version
}

func (g *gatewayWatch) add(at time.Time, s *corev1.Secret) {
	v := gatewayVersion{at: at, state: bundle.ParseState(s.Annotations)}
	v.roots = strings.Count(string(s.Data["ca.crt"]), "-----BEGIN CERTIFICATE-----")
	if cs, err := bundle.ParseCertificates(corev1.TLSCertKey, s.Data[corev1.TLSCertKey]); err == nil {
		v.cert = bundle.Fingerprint(cs[0])
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.versions = append(g.versions, v)
	close(g.changed)
	g.changed = make(chan struct{})
}

// mark is where the next wait starts looking.
func (g *gatewayWatch) mark() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.versions)
}

// waitFor returns the first version at or after mark that satisfies ok.
func (g *gatewayWatch) waitFor(ctx context.Context, mark int, timeout time.Duration, what string, ok func(gatewayVersion) bool) (gatewayVersion, error) {
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
			return gatewayVersion{}, fmt.Errorf("no gateway version with %s within %s", what, timeout)
		case <-ctx.Done():
			return gatewayVersion{}, ctx.Err()
		}
	}
}

// steadyOn waits for the gateway to rest on root: current, served, alone.
func (g *gatewayWatch) steadyOn(ctx context.Context, mark int, root *certs.CA) (gatewayVersion, error) {
	fp := bundle.Fingerprint(root.Cert)
	return g.waitFor(ctx, mark, 30*time.Second, "root "+bundle.Short(fp)+" steady", func(v gatewayVersion) bool {
		return v.state.Root == fp && v.state.Server == fp && v.state.Phase == bundle.PhaseSteady
	})
}

// holds waits for the gateway to name root as current.
func (g *gatewayWatch) holds(ctx context.Context, mark int, root *certs.CA) (gatewayVersion, error) {
	fp := bundle.Fingerprint(root.Cert)
	return g.waitFor(ctx, mark, 30*time.Second, "root "+bundle.Short(fp), func(v gatewayVersion) bool {
		return v.state.Root == fp
	})
}
