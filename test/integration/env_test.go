package integration

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/controlplane"
	dualcarun "github.com/dualca/dualca/test/lib/run"
)

var nsCounter atomic.Int64

// setup is one test's world: its own namespace, root and gateway keys.
type setup struct {
	t       *testing.T
	g       *WithT
	ns      string
	root    types.NamespacedName
	gateway types.NamespacedName
	issued  int
}

func newSetup(t *testing.T) *setup {
	t.Helper()
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second)
	g.SetDefaultEventuallyPollingInterval(20 * time.Millisecond)
	g.SetDefaultConsistentlyDuration(time.Second)
	ns := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(ns) > 60 {
		ns = ns[:60]
	}
	ns = strings.TrimRight(ns, "-")
	g.Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	return &setup{t: t, g: g, ns: ns,
		root:    types.NamespacedName{Namespace: ns, Name: "root-ca"},
		gateway: types.NamespacedName{Namespace: ns, Name: "gateway-credential"},
	}
}

// options are dualca's flags for this world, as the binary would get them.
// freeAddress is a local address for a health endpoint.
func (s *setup) freeAddress() string {
	s.t.Helper()
	addr, err := controlplane.FreeAddress()
	s.g.Expect(err).NotTo(HaveOccurred())
	return addr
}

func (s *setup) options() flags.Options {
	o := flags.Defaults()
	o.RootSecret, o.GatewaySecret = s.root, s.gateway
	o.MetricsBindAddress, o.HealthProbeBindAddress = "0", "0"
	o.TrustPropagationDelay = time.Second
	o.ServerSwitchGrace = time.Hour
	o.Server.DNSNames = []string{"gateway.example.com"}
	s.g.Expect(o.Validate()).To(Succeed())
	return o
}

// dualca is a running manager; stop ends it and waits until it returned.
type dualca struct {
	*dualcarun.Dualca
	root types.NamespacedName
}

// polls counts the times dualca read the root Secret from the API server,
// which it does at every poll and at no other time (events read its cache).
func (d *dualca) polls() int {
	n := 0
	for _, r := range d.Requests() {
		if r.Verb == "get" && r.Resource == "secrets" && r.Namespace == d.root.Namespace && r.Name == d.root.Name {
			n++
		}
	}
	return n
}

// writes counts the requests that write Secrets (create, update, patch,
// delete), counted at the transport: a write that changes nothing leaves
// no trace on the API server's side.
func (d *dualca) writes() int { return d.writesOf("secrets") }

// configMapWrites counts dualca's writes of ConfigMaps (the status).
func (d *dualca) configMapWrites() int { return d.writesOf("configmaps") }

// writesOf counts the requests that write objects of resource.
func (d *dualca) writesOf(resource string) int {
	n := 0
	for _, r := range d.Requests() {
		if r.Resource == resource && r.Writes() {
			n++
		}
	}
	return n
}

func (s *setup) start(o syncer.Options) *dualca {
	s.t.Helper()
	d := dualcarun.Start(context.Background(), s.t, restConfig, o)
	return &dualca{Dualca: d, root: o.RootSecret}
}

// startOnFirstRoot writes root-1, starts dualca and waits until the gateway
// holds it and the reconcile that wrote it is done (its record, written
// after the gateway, included): the starting point of most scenarios.
func (s *setup) startOnFirstRoot(o syncer.Options) (*dualca, *certs.CA) {
	s.t.Helper()
	r1 := s.newRoot("root-1")
	s.putRoot(r1)
	d := s.start(o)
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-1"}))
	s.g.Eventually(d.Synced).Should(BeTrue())
	return d, r1
}

// newRoot makes a root CA as cert-manager's self-signed issuer would. Each
// is issued a second after the previous one, as rotations are, so the
// newest-first order of the bundle is known.
func (s *setup) newRoot(cn string) *certs.CA {
	s.t.Helper()
	s.issued++
	notBefore := time.Now().Add(-time.Hour).Add(time.Duration(s.issued) * time.Second)
	ca, err := certs.NewCA(cn, notBefore, notBefore.Add(48*time.Hour))
	s.g.Expect(err).NotTo(HaveOccurred())
	return ca
}

// putRoot writes the root Secret the way cert-manager does: tls.crt,
// tls.key and ca.crt (the same root, self-signed).
func (s *setup) putRoot(ca *certs.CA) {
	s.t.Helper()
	s.putRootData(corev1.SecretTypeTLS, map[string][]byte{
		corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: ca.KeyPEM, "ca.crt": ca.CertPEM,
	})
}

// putRootData writes arbitrary root content; a change of type needs the
// Secret recreated, since the type is immutable.
func (s *setup) putRootData(typ corev1.SecretType, data map[string][]byte) {
	s.t.Helper()
	ctx := context.Background()
	cur := &corev1.Secret{}
	err := k8s.Get(ctx, s.root, cur)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		s.t.Fatal(err)
	case cur.Type == typ:
		cur.Data = data
		s.g.Expect(k8s.Update(ctx, cur)).To(Succeed())
		return
	default:
		s.g.Expect(k8s.Delete(ctx, cur)).To(Succeed())
	}
	s.g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.root.Namespace, Name: s.root.Name},
		Type:       typ, Data: data,
	})).To(Succeed())
}

func (s *setup) deleteRoot() {
	s.t.Helper()
	err := k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.root.Namespace, Name: s.root.Name}})
	s.g.Expect(client.IgnoreNotFound(err)).To(Succeed())
}

func (s *setup) gatewaySecret() *corev1.Secret {
	s.t.Helper()
	gw := &corev1.Secret{}
	s.g.Expect(k8s.Get(context.Background(), s.gateway, gw)).To(Succeed())
	return gw
}

// getGateway is for Eventually: the gateway Secret, or an error while absent.
func (s *setup) getGateway() (*corev1.Secret, error) {
	gw := &corev1.Secret{}
	return gw, k8s.Get(context.Background(), s.gateway, gw)
}

// rootsOf returns the subjects of the roots in a PEM bundle, in order.
func rootsOf(pemData []byte) []string {
	cs, err := bundle.ParseCertificates("ca.crt", pemData)
	if err != nil {
		return []string{"unparseable: " + err.Error()}
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Subject.CommonName
	}
	return names
}

// gatewayView is what the assertions look at.
type gatewayView struct {
	Roots  []string // ca.crt subjects, in order
	Server string   // the root tls.crt is or chains to
	Phase  string
}

func (s *setup) view() (gatewayView, error) {
	gw, err := s.getGateway()
	if err != nil {
		return gatewayView{}, err
	}
	return viewOf(gw), nil
}

// viewOf is the view of a gateway Secret in the combined form.
func viewOf(gw *corev1.Secret) gatewayView {
	v := gatewayView{Roots: rootsOf(gw.Data["ca.crt"]), Phase: gw.Annotations[bundle.AnnotationPhase]}
	// The server is named by the root in ca.crt its certificate is or
	// chains to: a leaf dualca issued from it, or the root itself (legacy).
	v.Server = "no root in ca.crt"
	chain, _ := bundle.ParseCertificates("tls.crt", gw.Data[corev1.TLSCertKey])
	roots, _ := bundle.ParseCertificates("ca.crt", gw.Data["ca.crt"])
	for _, r := range roots {
		if len(chain) > 0 && bundle.ChainsTo(chain[0], r) {
			v.Server = r.Subject.CommonName
			break
		}
	}
	if !bundle.KeyMatches(gw.Data[corev1.TLSCertKey], gw.Data[corev1.TLSPrivateKeyKey]) {
		v.Server = "mismatched key"
	}
	return v
}

// events returns reason: note of the events in the test's namespace.
func (s *setup) events() ([]string, error) {
	var list eventsv1.EventList
	if err := k8s.List(context.Background(), &list, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(list.Items))
	for _, e := range list.Items {
		out = append(out, e.Reason+": "+e.Note)
	}
	return out, nil
}

func fingerprint(c *x509.Certificate) string { return bundle.Fingerprint(c) }
