package chart

import (
	"context"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// TestTheChartInstallsUpgradesAndUninstalls is what a user does with helm
// on a real API server (the one of the Kubernetes version under test, which
// make test-compat varies): install with the ServiceMonitor and the
// PrometheusRule on, upgrade to the legacy strategy and back, uninstall.
// No kubelet runs, so nothing waits for the Pod: the objects are checked.
func TestTheChartInstallsUpgradesAndUninstalls(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	env, cfg := startAPIServer(t, g)
	kubeconfig := controlplane.AdminKubeconfig(t, env)
	c, err := client.New(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	for _, ns := range []string{"cert-manager", "istio-system"} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	helm := func(args ...string) string {
		out, err := controlplane.Helm(t, append(args, "--kubeconfig", kubeconfig, "--namespace", releaseNamespace)...)
		g.Expect(err).NotTo(HaveOccurred(), "helm %s", strings.Join(args, " "))
		return string(out)
	}
	legacy := func() bool {
		d := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "dualca"}, d)).To(Succeed())
		return slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--cert-management-legacy")
	}

	helm("install", "dualca", chartDir(t), "--create-namespace", "-f", valuesFile(t, monitoring))
	g.Expect(legacy()).To(BeFalse())
	for _, ns := range []string{"cert-manager", "istio-system"} {
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dualca"}, &rbacv1.Role{})).To(Succeed(), "the Role in %s", ns)
	}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: releaseNamespace, Name: "dualca"}, &corev1.ServiceAccount{})).To(Succeed())
	// The admission policy and its binding are cluster-scoped: the install
	// creates them (test/e2e/rbac_test.go shows the API server enforcing
	// them; type-checking is kube-controller-manager's, which is not here).
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "dualca." + releaseNamespace}, &admissionregistrationv1.ValidatingAdmissionPolicy{})).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "dualca." + releaseNamespace}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{})).To(Succeed())

	helm("upgrade", "dualca", chartDir(t), "--reuse-values", "--set", "certManagement.legacy=true")
	g.Expect(legacy()).To(BeTrue(), "upgraded to the legacy strategy")
	helm("upgrade", "dualca", chartDir(t), "--reuse-values", "--set", "certManagement.legacy=false")
	g.Expect(legacy()).To(BeFalse(), "and back")
	g.Expect(helm("history", "dualca")).To(ContainSubstring("deployed"))

	// To Istio's split form and back: the Role follows, naming the -cacert
	// Secret dualca then writes, and only reading it again after.
	cacert := func() []string {
		r := &rbacv1.Role{}
		g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "istio-system", Name: "dualca"}, r)).To(Succeed())
		var verbs []string
		for _, rule := range r.Rules {
			if slices.Contains(rule.ResourceNames, "agents-gateway-credential-cacert") {
				verbs = append(verbs, rule.Verbs...)
			}
		}
		return verbs
	}
	g.Expect(cacert()).To(ConsistOf("get", "list", "watch"), "combined: the -cacert Secret is watched, not written")
	helm("upgrade", "dualca", chartDir(t), "--reuse-values", "--set", "gatewaySecret.form=split")
	g.Expect(cacert()).To(ConsistOf("get", "list", "watch", "update"), "split: dualca writes the -cacert Secret")
	helm("upgrade", "dualca", chartDir(t), "--reuse-values", "--set", "gatewaySecret.form=combined")
	g.Expect(cacert()).To(ConsistOf("get", "list", "watch"), "and back")

	helm("uninstall", "dualca")
	err = c.Get(ctx, client.ObjectKey{Namespace: "istio-system", Name: "dualca"}, &rbacv1.Role{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the uninstall removed the Roles: %v", err)
	err = c.Get(ctx, client.ObjectKey{Name: "dualca." + releaseNamespace}, &admissionregistrationv1.ValidatingAdmissionPolicy{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the uninstall removed the cluster-scoped admission policy: %v", err)
}
