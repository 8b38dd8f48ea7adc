package chart

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// The issuing Secret (issuingSecret.name, --issuing-secret): the root's
// credential, kept by dualca beside the root Secret for the clients' CA
// Issuer. TestTheTargetShapes has its Roles and creates exactly; these
// tests add what is particular to it.

const issuingName = "agents-issuing-ca"

// issuingLegacyTogether is root, gateway and clients in one namespace under
// the legacy strategy, where dualca's Role may delete Secrets: never the
// issuing Secret.
const issuingLegacyTogether = oneNamespace + `
certManagement: {legacy: true}
issuingSecret: {name: agents-issuing-ca}
`

// TestTheIssuingSecret renders the chart with an issuing Secret: the flag
// in the root Secret's namespace, which dualca's parser accepts; the Roles
// read and write it by name and delete no Secret but the legacy strategy's
// client Secrets, which the admission policy keeps off the issuing Secret;
// the notes tell the Issuer's one-line change.
func TestTheIssuingSecret(t *testing.T) {
	t.Parallel()
	want := types.NamespacedName{Namespace: "cert-manager", Name: issuingName}
	t.Run("the flag, in the root Secret's namespace, as dualca parses it", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		m, err := render(t, "", combinedWithIssuing)
		g.Expect(err).NotTo(HaveOccurred())
		args := m.deployment(g).Spec.Template.Spec.Containers[0].Args
		g.Expect(args).To(ContainElement("--issuing-secret=cert-manager/" + issuingName))
		o := parseArgs(g, args)
		g.Expect(o.IssuingSecret).To(Equal(want))
		g.Expect(o.Syncer().IssuingSecret).To(Equal(want), "dualca keeps it")

		off, err := render(t, "", minimal)
		g.Expect(err).NotTo(HaveOccurred())
		offArgs := off.deployment(g).Spec.Template.Spec.Containers[0].Args
		g.Expect(offArgs).NotTo(ContainElement(HavePrefix("--issuing-secret")))
		g.Expect(parseArgs(g, offArgs).IssuingSecret).To(BeZero(), "off by default")
		secrets, _ := creatable(g, off)
		g.Expect(secrets).NotTo(ContainElement(HavePrefix("cert-manager/")), "without it, nothing may be created beside the root")
	})
	t.Run("no Role deletes it, and the legacy deletes exclude it", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		m, err := render(t, "", combinedWithIssuing)
		g.Expect(err).NotTo(HaveOccurred())
		for ns, rs := range m.roleRules(g) {
			for _, r := range rs {
				g.Expect(grants(r, "", "secrets", "delete", "deletecollection", "patch")).To(BeFalse(), "%s: %+v", ns, r)
			}
		}

		legacy, err := render(t, "", issuingLegacyTogether)
		g.Expect(err).NotTo(HaveOccurred())
		roles := legacy.roleRules(g)
		g.Expect(roles["istio-system"]).To(ContainElements(secretsNamed(issuingName, "get", "list", "watch", "update"), rule("", "secrets", "delete")),
			"the issuing Secret by name beside the client Secrets the legacy strategy deletes")
		expectNoUnnamedReadOrWrite(g, roles)
		policies := all[admissionregistrationv1.ValidatingAdmissionPolicy](g, legacy, "ValidatingAdmissionPolicy")
		g.Expect(policies).To(HaveLen(1))
		var deletes []admissionregistrationv1.Validation
		for _, v := range policies[0].Spec.Validations {
			if strings.HasPrefix(v.Expression, `request.operation != "DELETE"`) {
				deletes = append(deletes, v)
			}
		}
		g.Expect(deletes).To(HaveLen(1))
		g.Expect(deletes[0].Expression).To(ContainSubstring(`!(request.namespace == "istio-system" && oldObject.metadata.name == "` + issuingName + `") &&`))
		g.Expect(deletes[0].Message).To(ContainSubstring("nor the issuing Secret istio-system/" + issuingName))
		secrets, _ := creatable(g, legacy)
		g.Expect(secrets).To(ContainElement("istio-system/" + issuingName))
	})
	t.Run("the notes tell the Issuer's change", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		notes := func(values string) string {
			out, err := controlplane.Helm(t, "install", "dualca", chartDir(t), "--dry-run=client", "--namespace", releaseNamespace, "-f", valuesFile(t, values))
			g.Expect(err).NotTo(HaveOccurred())
			_, n, ok := strings.Cut(string(out), "\nNOTES:\n")
			g.Expect(ok).To(BeTrue(), "helm prints the notes")
			return n
		}
		on := notes(combinedWithIssuing)
		g.Expect(on).To(ContainSubstring("spec.ca.secretName: " + issuingName))
		g.Expect(on).To(ContainSubstring("dualca keeps cert-manager/" + issuingName))
		g.Expect(on).To(ContainSubstring("rotation.trustPropagationDelay (2m)"))
		g.Expect(notes(minimal)).NotTo(ContainSubstring("spec.ca.secretName"))
	})
}

// TestTheContainerTemplatePassesTheIssuingSecret: the sidecar template
// passes the flag as the Deployment does, and the chart's RBAC follows.
func TestTheContainerTemplatePassesTheIssuingSecret(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	gateway := t.TempDir()
	g.Expect(os.CopyFS(filepath.Join(gateway, "charts", "dualca"), os.DirFS(chartDir(t)))).To(Succeed())
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: gateway\nversion: 1.0.0\ndependencies:\n  - name: dualca\n    version: \">=0.0.0-0\"\n",
		"values.yaml": `
dualca:
  deployment: {enabled: false}
  leaderElection: {enabled: true}
  rootSecret: {namespace: cert-manager, name: agents-root-ca}
  gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
  server: {ipAddresses: [10.0.0.10]}
  issuingSecret: {name: agents-issuing-ca}
`,
		"templates/pod.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: gateway
  namespace: {{ .Release.Namespace }}
spec:
  containers:
    {{- include "dualca.container" .Subcharts.dualca | nindent 4 }}
`,
	}
	for name, content := range files {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(gateway, name)), 0o750)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(gateway, name), []byte(content), 0o600)).To(Succeed())
	}
	m, err := render(t, gateway, "")
	g.Expect(err).NotTo(HaveOccurred())
	pods := all[corev1.Pod](g, m, "Pod")
	g.Expect(pods).To(HaveLen(1))
	g.Expect(pods[0].Spec.Containers).To(HaveLen(1))
	args := pods[0].Spec.Containers[0].Args
	g.Expect(args).To(ContainElement("--issuing-secret=cert-manager/" + issuingName))
	g.Expect(parseArgs(g, args).IssuingSecret).To(Equal(types.NamespacedName{Namespace: "cert-manager", Name: issuingName}))
	g.Expect(m.roleRules(g)["cert-manager"]).To(ConsistOf(rules(rootRules, issuingRules, eventRules)))

	values := strings.Replace(files["values.yaml"], "name: agents-issuing-ca", "name: agents-root-ca", 1)
	g.Expect(os.WriteFile(filepath.Join(gateway, "values.yaml"), []byte(values), 0o600)).To(Succeed())
	_, err = render(t, gateway, "")
	g.Expect(err).To(MatchError(ContainSubstring("issuingSecret.name: cert-manager/agents-root-ca is rootSecret")), "the sidecar's render refuses it too")
}

// TestTheAPIServerHoldsDualcaToTheIssuingSecret installs the chart's
// ServiceAccount, Roles and admission policy on a real kube-apiserver and
// asks it, as dualca's ServiceAccount (impersonated), what dualca may do
// beside the root Secret: create, get, list and watch by name, and update
// the issuing Secret; create no other Secret there (the policy), delete or
// patch none (RBAC), nor create the issuing Secret's name elsewhere. Under
// the legacy strategy, whose Role deletes Secrets cert-manager wrote, the
// policy refuses the issuing Secret's deletion even carrying cert-manager's
// annotation. test/e2e/rbac_test.go does the same for the other creates.
func TestTheAPIServerHoldsDualcaToTheIssuingSecret(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	_, cfg := startAPIServer(t, g)
	admin, err := client.NewWithWatch(cfg, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()

	dualca := installRBAC(t, g, admin, cfg, releaseNamespace, combinedWithIssuing)
	root := "cert-manager"
	awaitPolicy(g, dualca, root)
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: {}, corev1.TLSPrivateKeyKey: {}}}
	}
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: root, Name: issuingName,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	byPolicy := map[string]error{
		"another Secret beside the root":                       dualca.Create(ctx, secret(root, "other"), client.DryRunAll),
		"a token Secret of the issuing Secret's name":          dualca.Create(ctx, token, client.DryRunAll),
		"the issuing Secret's name in the gateway's namespace": dualca.Create(ctx, secret("istio-system", issuingName), client.DryRunAll),
	}
	for what, err := range byPolicy {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating %s is refused, got %v", what, err)
		g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "%s: by the admission policy", what)
	}

	issuing := secret(root, issuingName)
	g.Expect(dualca.Create(ctx, issuing)).To(Succeed(), "dualca creates the issuing Secret")
	got := &corev1.Secret{}
	g.Expect(dualca.Get(ctx, client.ObjectKeyFromObject(issuing), got)).To(Succeed())
	got.Labels = map[string]string{"updated-by": "dualca"}
	g.Expect(dualca.Update(ctx, got)).To(Succeed(), "dualca updates it")
	byName := client.MatchingFields{"metadata.name": issuingName}
	list := &corev1.SecretList{}
	g.Expect(dualca.List(ctx, list, client.InNamespace(root), byName)).To(Succeed(), "dualca lists it by name")
	g.Expect(list.Items).To(ConsistOf(HaveField("ObjectMeta.Name", issuingName)))
	w, err := dualca.Watch(ctx, &corev1.SecretList{}, client.InNamespace(root), byName)
	g.Expect(err).NotTo(HaveOccurred(), "dualca watches it by name")
	w.Stop()

	other := secret(root, "other")
	g.Expect(admin.Create(ctx, other)).To(Succeed())
	byRBAC := map[string]error{
		"deleting the issuing Secret":           dualca.Delete(ctx, issuing.DeepCopy(), client.DryRunAll),
		"deleting every Secret beside the root": dualca.DeleteAllOf(ctx, &corev1.Secret{}, client.InNamespace(root), client.DryRunAll),
		"patching the issuing Secret": dualca.Patch(ctx, issuing.DeepCopy(),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`)), client.DryRunAll),
		"reading another Secret beside the root":  dualca.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{}),
		"listing the Secrets beside the root":     dualca.List(ctx, &corev1.SecretList{}, client.InNamespace(root)),
		"updating another Secret beside the root": dualca.Update(ctx, other.DeepCopy(), client.DryRunAll),
		"creating a ConfigMap beside the root": dualca.Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: root, Name: issuingName}}, client.DryRunAll),
	}
	for what, err := range byRBAC {
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s is forbidden, got %v", what, err)
		g.Expect(err).NotTo(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "%s: by RBAC, which grants no such right", what)
	}

	// The legacy strategy, root, gateway and clients in one namespace: a
	// release of its own, with namespaces of its own.
	together := "together"
	legacy := installRBAC(t, g, admin, cfg, "dualca-legacy", strings.ReplaceAll(issuingLegacyTogether, "istio-system", together))
	awaitPolicy(g, legacy, together)
	annotated := func(name string) *corev1.Secret {
		s := secret(together, name)
		s.Annotations = map[string]string{"cert-manager.io/certificate-name": name}
		return s
	}
	for _, s := range []*corev1.Secret{annotated(issuingName), annotated("agent-0")} {
		g.Expect(admin.Create(ctx, s)).To(Succeed())
	}
	err = legacy.Delete(ctx, annotated(issuingName), client.DryRunAll)
	g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the issuing Secret is never deleted, even carrying cert-manager's annotation, got %v", err)
	g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "by the admission policy: RBAC grants the legacy deletes")
	g.Expect(legacy.Delete(ctx, annotated("agent-0"), client.DryRunAll)).To(Succeed(), "a client Secret cert-manager wrote may be deleted")
}

// installRBAC renders values as release "dualca" in namespace release and
// creates the namespaces, the ServiceAccount, the Roles and RoleBindings,
// and the admission policy and its binding. It returns a client acting as
// that ServiceAccount.
func installRBAC(t *testing.T, g *WithT, admin client.Client, cfg *rest.Config, release, values string) client.WithWatch {
	t.Helper()
	out, err := controlplane.Helm(t, "template", "dualca", chartDir(t), "--namespace", release, "-f", valuesFile(t, values))
	g.Expect(err).NotTo(HaveOccurred())
	m, err := parse(out)
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	sa := ""
	for _, obj := range m {
		switch obj.GetKind() {
		case "ServiceAccount":
			sa = obj.GetName()
		case "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
		default:
			continue
		}
		if ns := obj.GetNamespace(); ns != "" {
			err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
			if !apierrors.IsAlreadyExists(err) {
				g.Expect(err).NotTo(HaveOccurred())
			}
		}
		g.Expect(admin.Create(ctx, obj.DeepCopy())).To(Succeed(), "%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	}
	g.Expect(sa).NotTo(BeEmpty())
	as := rest.CopyConfig(cfg)
	as.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + release + ":" + sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + release, "system:authenticated"}}
	c, err := client.NewWithWatch(as, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	return c
}

// awaitPolicy waits until the API server enforces the admission policy on
// c's creates in ns, which it loads asynchronously: a dry-run create of a
// Secret that RBAC allows there and the policy refuses.
func awaitPolicy(g *WithT, c client.Client, ns string) {
	g.Eventually(func() error {
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "admission-policy-probe"}}
		return c.Create(context.Background(), probe, client.DryRunAll)
	}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(
		MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "the API server enforces the chart's admission policy in %s", ns)
}
