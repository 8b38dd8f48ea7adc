package image

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/controlplane"
)

// Where the release puts dualca and what it syncs.
const (
	releaseNamespace = "dualca"
	releaseName      = "dualca"
)

var (
	rootKey    = types.NamespacedName{Namespace: "cert-manager", Name: "agents-root-ca"}
	gatewayKey = types.NamespacedName{Namespace: "istio-system", Name: "agents-gateway-credential"}
)

// cluster is a real kube-apiserver (envtest) with an admin kubeconfig for
// helm.
type cluster struct {
	cfg        *rest.Config
	c          client.Client
	kubeconfig string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	g := NewWithT(t)
	assets, err := controlplane.Assets()
	g.Expect(err).NotTo(HaveOccurred())
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred(), "starting the control plane from %s (run `make control-plane`)", assets)
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := controlplane.AdminKubeconfig(t, env)
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	return &cluster{cfg: cfg, c: c, kubeconfig: kubeconfig}
}

// helm runs bin/helm against the cluster with no user configuration.
func (cl *cluster) helm(t *testing.T, args ...string) string {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(tool(t, "helm"), append(args, "--kubeconfig", cl.kubeconfig)...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestTheChartInstallsFromTheRegistryAndTheImageRuns is the path of the
// README's install section, on 127.0.0.1: the chart is pushed to the
// registry as an OCI artifact and installed from it onto a real API server
// with the pushed image's digest; the release is upgraded to the legacy
// strategy and back; then the pulled image runs, with runc, as the
// Deployment would run it (uid 65532, read-only root, the chart's
// arguments, the ServiceAccount's token and RBAC) and syncs the gateway
// Secret.
func TestTheChartInstallsFromTheRegistryAndTheImageRuns(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r, b, p := pushedImage(t)
	cl := startCluster(t)
	ctx := context.Background()

	chartRef := pushChart(t, cl, r)
	for _, ns := range []string{releaseNamespace, rootKey.Namespace, gatewayKey.Namespace} {
		g.Expect(cl.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	version := chartField(t, "version")
	image := r.addr + "/dualca"
	out := cl.helm(t, "install", releaseName, chartRef, "--version", version, "--plain-http", "--namespace", releaseNamespace,
		"--set", "rootSecret.namespace="+rootKey.Namespace, "--set", "rootSecret.name="+rootKey.Name,
		"--set", "gatewaySecret.namespace="+gatewayKey.Namespace, "--set", "gatewaySecret.name="+gatewayKey.Name,
		"--set", "server.ipAddresses={127.0.0.1}",
		"--set", "image.repository="+image, "--set", "image.digest="+b.digest)
	t.Logf("helm install %s --version %s:\n%s", chartRef, version, out)

	d := deployment(g, cl.c)
	g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(image+"@"+b.digest), "the Deployment runs the pushed digest")
	g.Expect(d.Labels).To(HaveKeyWithValue("app.kubernetes.io/version", p.configs["linux/amd64"].Config.Labels["org.opencontainers.image.version"]),
		"the chart's appVersion is the image's version")
	opts := parseArgs(g, d)
	g.Expect(opts.Legacy).To(BeFalse())
	g.Expect(cl.c.Get(ctx, client.ObjectKey{Namespace: rootKey.Namespace, Name: releaseName}, &rbacv1.Role{})).To(Succeed(), "the release created its Roles")

	cl.helm(t, "upgrade", releaseName, chartRef, "--version", version, "--plain-http", "--namespace", releaseNamespace,
		"--reuse-values", "--set", "certManagement.legacy=true")
	g.Expect(parseArgs(g, deployment(g, cl.c)).Legacy).To(BeTrue(), "upgraded to the legacy strategy")
	cl.helm(t, "upgrade", releaseName, chartRef, "--version", version, "--plain-http", "--namespace", releaseNamespace,
		"--reuse-values", "--set", "certManagement.legacy=false")
	d = deployment(g, cl.c)
	g.Expect(parseArgs(g, d).Legacy).To(BeFalse(), "and back")
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(image+"@"+b.digest), "the upgrades kept the digest")
	t.Logf("helm history:\n%s", cl.helm(t, "history", releaseName, "--namespace", releaseNamespace))

	root := certs.MustCA(t, "agents root", time.Hour)
	g.Expect(cl.c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: rootKey.Namespace, Name: rootKey.Name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": root.CertPEM, "tls.key": root.KeyPEM, "ca.crt": root.CertPEM},
	})).To(Succeed())
	runImage(t, cl, p, d, root)
}

// pushChart packages charts/dualca and pushes it to the registry, as
// `make push` does, returning the chart's oci:// reference.
func pushChart(t *testing.T, cl *cluster, r *registry) string {
	dir := t.TempDir()
	cl.helm(t, "package", filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca"), "--destination", dir)
	tgz := filepath.Join(dir, "dualca-"+chartField(t, "version")+".tgz")
	out := cl.helm(t, "push", tgz, "oci://"+r.addr+"/charts", "--plain-http")
	t.Logf("helm push:\n%s", out)
	return "oci://" + r.addr + "/charts/dualca"
}

func deployment(g *WithT, c client.Client) *appsv1.Deployment {
	d := &appsv1.Deployment{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: releaseNamespace, Name: releaseName}, d)).To(Succeed())
	return d
}

// parseArgs parses the container's arguments with dualca's own parser.
func parseArgs(g *WithT, d *appsv1.Deployment) flags.Options {
	opts, err := flags.Parse("dualca", d.Spec.Template.Spec.Containers[0].Args)
	g.Expect(err).NotTo(HaveOccurred(), "dualca accepts the chart's arguments %q", d.Spec.Template.Spec.Containers[0].Args)
	g.Expect(opts.RootSecret).To(Equal(rootKey))
	g.Expect(opts.GatewaySecret).To(Equal(gatewayKey))
	return opts
}

// serviceAccountKubeconfig is a kubeconfig for the API server with a token
// of the release's ServiceAccount, so that the image runs with exactly the
// chart's RBAC.
func serviceAccountKubeconfig(t *testing.T, cl *cluster) []byte {
	g := NewWithT(t)
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: releaseNamespace, Name: releaseName}}
	g.Expect(cl.c.SubResource("token").Create(context.Background(), sa, tr)).To(Succeed())
	g.Expect(tr.Status.Token).NotTo(BeEmpty())
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: envtest, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: dualca, user: {token: %q}}]
contexts: [{name: dualca, context: {cluster: envtest, user: dualca}}]
current-context: dualca
`, cl.cfg.Host, base64.StdEncoding.EncodeToString(cl.cfg.CAData), tr.Status.Token))
}

func ptr[T any](v T) *T { return &v }
