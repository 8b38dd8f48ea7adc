package chart

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// warnings collects the API server's warnings (deprecated APIs, Pod
// Security violations), which a successful request may still carry.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list...)
}

// TestTheAPIServerAcceptsEveryRenderedObject creates every object of each
// value set with a server-side dry run against a real kube-apiserver, in
// namespaces that enforce the restricted Pod Security Standard, and a Pod
// made from the Deployment's template, which that standard is enforced on.
// ServiceMonitor and PrometheusRule are served by stand-in CRDs
// (testdata/crds) that accept any content: their schema is not checked.
func TestTheAPIServerAcceptsEveryRenderedObject(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	_, cfg := startAPIServer(t, g)
	w := &warnings{}
	cfg.WarningHandler = w
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()

	for name, values := range map[string]string{
		"minimal":                      minimal,
		"clients and legacy":           clientsLegacy,
		"clients beside the gateway":   clientsBesideGateway,
		"leader election":              leaderElection,
		"leader election of its own":   leaderElection + "\nleaderElection: {enabled: true, namespace: dualca-election}\n",
		"service monitor and rules on": monitoring,
		"a sidecar's RBAC":             minimal + "\ndeployment: {enabled: false}\nleaderElection: {enabled: true}\n",
		"the split form":               splitForm,
		"a bundle-only ConfigMap":      bundleOnlyConfigMap,
		"a bundle-only nginx.org/ca":   bundleOnlyNginxCA,
		"combined and a ConfigMap":     combinedAndAConfigMap,
		"an issuing Secret":            combinedWithIssuing,
	} {
		m, err := render(t, "", values)
		g.Expect(err).NotTo(HaveOccurred(), name)
		for _, obj := range m {
			if obj.GetNamespace() != "" { // the admission policy and its binding are cluster-scoped
				ensureRestrictedNamespace(g, c, obj.GetNamespace())
			}
			g.Expect(c.Create(ctx, obj.DeepCopy(), client.DryRunAll)).To(Succeed(), "%s: %s %s/%s", name, obj.GetKind(), obj.GetNamespace(), obj.GetName())
		}
		for _, d := range all[appsv1.Deployment](g, m, "Deployment") {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, GenerateName: d.Name + "-", Labels: d.Spec.Template.Labels},
				Spec:       d.Spec.Template.Spec,
			}
			g.Expect(c.Create(ctx, pod, client.DryRunAll)).To(Succeed(), "%s: the pod meets the restricted Pod Security Standard", name)
		}
	}
	g.Expect(w.get()).To(BeEmpty(), "no warning from the API server")
}

// ensureRestrictedNamespace creates ns, enforcing the restricted Pod
// Security Standard, unless it exists.
func ensureRestrictedNamespace(g *WithT, c client.Client, ns string) {
	err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}})
	if !apierrors.IsAlreadyExists(err) {
		g.Expect(err).NotTo(HaveOccurred())
	}
}

// startAPIServer starts a kube-apiserver of the version under test with the
// stand-in monitoring CRDs (testdata/crds), stopped when t ends.
func startAPIServer(t *testing.T, g Gomega) (*envtest.Environment, *rest.Config) {
	t.Helper()
	assets, err := controlplane.Assets()
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join("testdata", "crds")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: time.Minute,
	}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred(), "starting the control plane from %s (run `make control-plane`)", assets)
	t.Cleanup(func() { _ = env.Stop() })
	g.Expect(controlplane.ExpectKubeVersion(cfg)).To(Succeed())
	return env, cfg
}
