package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/apirequest"
	"github.com/dualca/dualca/test/lib/controlplane"
)

// The chart's RBAC, for real: dualca runs a rotation as the chart's
// ServiceAccount (impersonated), with only the Roles the chart renders for
// the scenario. Enough: the rotation converges without a failed handshake,
// the events are recorded, and the API server refuses none of dualca's
// requests. No more: every permission the Roles grant is used by dualca
// during the rotation (but two, see expectEveryPermissionUsed), and the
// writes and reads dualca has no business doing are refused.

func TestChartRBACIsEnoughAndNoMore(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	roles, sa := s.installChartRBAC(false)
	requests := &apirequest.Log{}
	s.startDualcaAs(s.impersonating(sa, requests), s.options(false))
	s.startTraffic()

	r2 := s.rotate()
	s.converged(r2, false, 60*time.Second)
	_, failures := s.report("zero-downtime, as the chart's ServiceAccount")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).WithTimeout(10*time.Second).Should(ContainElements(
		"Normal "+bundle.ReasonRootRotated, "Normal "+bundle.ReasonBundleUpdated, "Normal "+bundle.ReasonClientRenewalTriggered,
		"Normal "+bundle.ReasonServerSwitched, "Normal "+bundle.ReasonRootRetired), "dualca's events were recorded")
	s.expectEveryPermissionUsed(roles, requests)

	// With the same identity, what dualca must not do is refused.
	c := s.clientAs(sa)
	unrelated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "unrelated"}, StringData: map[string]string{"k": "v"}}
	s.g.Expect(s.c.Client.Create(s.ctx, unrelated.DeepCopy())).To(Succeed())
	other := "other-" + s.ns
	s.g.Expect(s.c.CreateNamespace(s.ctx, other)).To(Succeed())
	elsewhere := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "elsewhere"}}
	s.g.Expect(s.c.Client.Create(s.ctx, elsewhere.DeepCopy())).To(Succeed())
	forbidden := map[string]error{
		"reading an unrelated Secret by name":      c.Get(s.ctx, client.ObjectKeyFromObject(unrelated), &corev1.Secret{}),
		"updating an unrelated Secret":             c.Update(s.ctx, edited(s, unrelated)),
		"updating the root Secret":                 c.Update(s.ctx, edited(s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: rootName}})),
		"deleting a client Secret":                 c.Delete(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.clients[0]}}),
		"changing a client Certificate's spec":     c.Update(s.ctx, clientCertificate(s)),
		"reading a Secret of another namespace":    c.Get(s.ctx, client.ObjectKeyFromObject(elsewhere), &corev1.Secret{}),
		"listing the Secrets of another namespace": c.List(s.ctx, &corev1.SecretList{}, client.InNamespace(other)),
		"creating a Secret in another namespace":   c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "x"}}, client.DryRunAll),
	}
	for what, err := range forbidden {
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s is forbidden, got %v", what, err)
	}
	// What RBAC cannot narrow, create, the chart's admission policy does:
	// a Secret of any other name in the gateway's namespace is refused
	// (TestChartAdmissionPolicyPinsWhatDualcaCreates has the rest).
	s.awaitAdmissionPolicy(c)
	err := c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "any-name"}}, client.DryRunAll)
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating a Secret of any other name in the gateway's namespace is refused, got %v", err)
}

// TestChartAdmissionPolicyPinsWhatDualcaCreates: RBAC grants dualca's
// ServiceAccount create of Secrets in the gateway's namespace (and the
// release's), with no name, which would let it mint a token Secret for any
// ServiceAccount there. The chart's ValidatingAdmissionPolicy, loaded by
// the API server, lets it create the gateway Secret, the state Secret and
// the status ConfigMap, and nothing else. The operator Role's holder reads
// no Secret, and reads and annotates the status ConfigMap. dualca does not
// run here: only the API server's answers to each identity are checked.
func TestChartAdmissionPolicyPinsWhatDualcaCreates(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 1)
	operator := "oncall-" + s.ns
	_, sa := s.installChartRBAC(false, fmt.Sprintf("operatorRole: {subjects: [{kind: User, name: %s, apiGroup: rbac.authorization.k8s.io}]}", operator))
	c := s.clientAs(sa)
	s.awaitAdmissionPolicy(c)

	state := flags.DefaultStateSecret(types.NamespacedName{Namespace: s.ns, Name: gatewayName})
	status := flags.DefaultStatusConfigMap(types.NamespacedName{Namespace: s.ns, Name: gatewayName}, state)
	tokenFor := func(name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name,
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	}
	secret := func(key types.NamespacedName) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Type: corev1.SecretTypeOpaque}
	}
	configMap := func(key types.NamespacedName) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	annotatedOnly := secret(types.NamespacedName{Namespace: s.ns, Name: gatewayName})
	annotatedOnly.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
	create := func(obj client.Object) error { return c.Create(s.ctx, obj, client.DryRunAll) }

	denied := map[string]error{
		"a Secret of another name in the gateway's namespace": create(secret(types.NamespacedName{Namespace: s.ns, Name: "other"})),
		"a token Secret of another name":                      create(tokenFor("minted-token")),
		"a token Secret named as the gateway Secret":          create(tokenFor(gatewayName)),
		"a token Secret named as the state Secret":            create(tokenFor(state.Name)),
		"an Opaque Secret naming a ServiceAccount":            create(annotatedOnly),
		"a ConfigMap of another name":                         create(configMap(types.NamespacedName{Namespace: s.ns, Name: "other"})),
	}
	for what, err := range denied {
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "creating %s is refused, got %v", what, err)
		s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "%s: refused by the admission policy, not RBAC", what)
	}
	for what, obj := range map[string]client.Object{
		"the gateway Secret":   secret(types.NamespacedName{Namespace: s.ns, Name: gatewayName}),
		"the state Secret":     secret(state),
		"the status ConfigMap": configMap(status),
	} {
		s.g.Expect(create(obj)).To(Succeed(), "dualca may create %s", what)
	}
	// The policy binds dualca's ServiceAccount only: the admin is not held to it.
	s.g.Expect(s.c.Client.Create(s.ctx, tokenFor("admins-token"), client.DryRunAll)).To(Succeed(), "the policy matches dualca's account alone")

	// The operator reads no Secret, and steers through the status ConfigMap.
	s.g.Expect(s.c.Client.Create(s.ctx, configMap(status))).To(Succeed())
	s.g.Expect(s.c.Client.Create(s.ctx, configMap(types.NamespacedName{Namespace: s.ns, Name: "other"}))).To(Succeed())
	ops := s.operatorClient(operator)
	for _, name := range []string{gatewayName, rootName, state.Name} {
		_, err := ops.CoreV1().Secrets(s.ns).Get(s.ctx, name, metav1.GetOptions{})
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator cannot get Secret %s, got %v", name, err)
	}
	_, err := ops.CoreV1().Secrets(s.ns).List(s.ctx, metav1.ListOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator cannot list Secrets, got %v", err)
	_, err = ops.CoreV1().Secrets(s.ns).List(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + gatewayName})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "nor the gateway Secret by name, got %v", err)
	cms := ops.CoreV1().ConfigMaps(s.ns)
	_, err = cms.Get(s.ctx, status.Name, metav1.GetOptions{})
	s.g.Expect(err).NotTo(HaveOccurred(), "the operator reads the status ConfigMap")
	patched, err := cms.Patch(s.ctx, status.Name, types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":"true"}}}`), metav1.PatchOptions{})
	s.g.Expect(err).NotTo(HaveOccurred(), "the operator annotates the status ConfigMap")
	s.g.Expect(patched.Annotations).To(HaveKeyWithValue("dualca.io/paused", "true"))
	_, err = cms.Get(s.ctx, "other", metav1.GetOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator cannot read another ConfigMap, got %v", err)
	_, err = cms.Create(s.ctx, configMap(types.NamespacedName{Namespace: s.ns, Name: "x"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator cannot create a ConfigMap, got %v", err)
}

// awaitAdmissionPolicy waits until the API server enforces the chart's
// admission policy for c, dualca's ServiceAccount: policies take effect
// asynchronously after their creation. It probes with a dry-run create of
// a Secret the policy refuses, which RBAC alone allows.
func (s *scenario) awaitAdmissionPolicy(c client.Client) {
	s.t.Helper()
	s.g.Eventually(func() error {
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "admission-policy-probe"}}
		return c.Create(s.ctx, probe, client.DryRunAll)
	}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(
		And(HaveOccurred(), WithTransform(apierrors.IsForbidden, BeTrue())), "the API server enforces the chart's admission policy")
}

// TestChartRBACIsEnoughForTheLegacyStrategy: the legacy strategy's Roles,
// which let dualca delete client Secrets and no longer touch Certificates.
func TestChartRBACIsEnoughForTheLegacyStrategy(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	roles, sa := s.installChartRBAC(true)
	requests := &apirequest.Log{}
	s.startDualcaAs(s.impersonating(sa, requests), s.options(true))
	s.startTraffic()

	r2 := s.rotate()
	s.converged(r2, true, 60*time.Second)
	s.report("legacy, as the chart's ServiceAccount")
	s.g.Expect(s.dualca.Renewals()).To(HaveKeyWithValue("triggered", BeNumerically(">=", clients)), "client Secrets were deleted")
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).WithTimeout(10 * time.Second).Should(ContainElements(
		"Normal "+bundle.ReasonRootRotated, "Normal "+bundle.ReasonClientRenewalTriggered))
	s.expectEveryPermissionUsed(roles, requests)
	s.g.Expect(apierrors.IsForbidden(s.clientAs(sa).Status().Update(s.ctx, clientCertificate(s)))).To(BeTrue(),
		"the legacy strategy cannot touch a Certificate's status")
}

// TestChartRBACIsEnoughForLeaderElection: with leader election, the Lease
// (by name) and the core events client-go's election records.
func TestChartRBACIsEnoughForLeaderElection(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients/4)
	roles, sa := s.installChartRBAC(false, "leaderElection: {enabled: true}")
	requests := &apirequest.Log{}
	o := s.options(false)
	o.LeaderElect = true
	s.startDualcaAs(s.impersonating(sa, requests), o)
	s.startTraffic()

	r2 := s.rotate()
	s.converged(r2, false, 60*time.Second)
	_, failures := s.report("zero-downtime with leader election, as the chart's ServiceAccount")
	s.g.Expect(failures).To(BeZero())
	lease := &coordinationv1.Lease{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: syncer.LeaseName(types.NamespacedName{Namespace: s.ns, Name: gatewayName})}, lease)).To(Succeed())
	s.g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Not(BeEmpty())), "dualca holds the Lease")
	s.g.Eventually(func(g Gomega) {
		var events corev1.EventList
		g.Expect(s.c.Client.List(s.ctx, &events, client.InNamespace(s.ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(HaveField("Reason", "LeaderElection"), HaveField("InvolvedObject.Kind", "Lease"))))
	}).WithTimeout(10*time.Second).Should(Succeed(), "the election's event was recorded")
	s.expectEveryPermissionUsed(roles, requests)
}

// installChartRBAC renders the chart for the scenario with bin/helm and
// creates its ServiceAccount, Roles and RoleBindings, and its admission
// policy and binding (cluster-scoped, named after the scenario's namespace,
// deleted when the test ends). It returns dualca's Roles (the operator's
// Role is created, not returned) and the ServiceAccount's name. extra are
// more values, YAML.
func (s *scenario) installChartRBAC(legacy bool, extra ...string) ([]*rbacv1.Role, string) {
	s.t.Helper()
	roles, sa := s.installChartRBACFor(legacy, nil, extra...)
	s.g.Expect(roles).To(HaveLen(1), "root, gateway and clients share the scenario's namespace: one Role")
	return roles, sa
}

// installChartRBACFor is installChartRBAC with the client namespaces
// clientNamespaces (clients.namespaces; none: the chart's default, the
// gateway's namespace), which must exist: a Role per namespace.
func (s *scenario) installChartRBACFor(legacy bool, clientNamespaces []string, extra ...string) ([]*rbacv1.Role, string) {
	s.t.Helper()
	namespaces := ""
	if len(clientNamespaces) > 0 {
		namespaces = ", namespaces: [" + strings.Join(clientNamespaces, ", ") + "]"
	}
	values := fmt.Sprintf(`
rootSecret: {namespace: %[1]s, name: %[2]s}
gatewaySecret: {namespace: %[1]s, name: %[3]s}
server: {ipAddresses: [127.0.0.1]}
clients: {selector: %[4]s=agent%[6]s}
certManagement: {legacy: %[5]t}
`, s.ns, rootName, gatewayName, clientLabel, legacy, namespaces) + strings.Join(extra, "\n")
	return s.installChartRBACValues(values)
}

// installChartRBACValues is installChartRBAC with the chart's values as
// given (YAML), the release namespace being the scenario's.
func (s *scenario) installChartRBACValues(values string) ([]*rbacv1.Role, string) {
	s.t.Helper()
	objs := renderChart(s.t, s.ns, values)
	var roles []*rbacv1.Role
	sa := ""
	for _, o := range objs {
		switch o.GetKind() {
		case "ServiceAccount":
			sa = o.GetName()
		case "Role":
			r := &rbacv1.Role{}
			s.g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r)).To(Succeed())
			if !strings.HasSuffix(r.Name, "-operator") { // the people's, not dualca's (control_test.go)
				roles = append(roles, r)
			}
		case "RoleBinding":
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			obj := o.DeepCopy()
			s.t.Cleanup(func() { _ = s.c.Client.Delete(context.Background(), obj) })
		default:
			continue
		}
		s.g.Expect(s.c.Client.Create(s.ctx, o)).To(Succeed(), "creating %s %s", o.GetKind(), o.GetName())
	}
	s.g.Expect(sa).NotTo(BeEmpty(), "the chart renders a ServiceAccount")
	return roles, sa
}

// renderChart runs `helm template` on charts/dualca as release "dualca" in
// namespace ns, with bin/helm ($HELM overrides it).
func renderChart(t *testing.T, ns, values string) []*unstructured.Unstructured {
	t.Helper()
	valuesFile := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(valuesFile, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := controlplane.Helm(t, "template", "dualca", filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca"), "--namespace", ns, "-f", valuesFile)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var obj map[string]any
		err := d.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(obj) > 0 { // not a document of comments only
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// impersonating is the admin's config acting as the scenario's
// ServiceAccount sa, recording every request into log unless it is nil.
func (s *scenario) impersonating(sa string, log *apirequest.Log) *rest.Config {
	cfg := rest.CopyConfig(s.c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + s.ns + ":" + sa}
	if log != nil {
		cfg.Wrap(log.Wrap)
	}
	return cfg
}

// clientAs is a client acting as the scenario's ServiceAccount sa.
func (s *scenario) clientAs(sa string) client.Client {
	c, err := client.New(s.impersonating(sa, nil), client.Options{Scheme: s.c.Client.Scheme()})
	s.g.Expect(err).NotTo(HaveOccurred())
	return c
}

// edited returns obj as the API server holds it, with a change to write.
func edited(s *scenario, obj *corev1.Secret) *corev1.Secret {
	cur := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, client.ObjectKeyFromObject(obj), cur)).To(Succeed())
	cur.StringData = map[string]string{"written-by": "dualca"}
	return cur
}

// clientCertificate is the first client's Certificate as the API server
// holds it, renewal forced by hand.
func clientCertificate(s *scenario) client.Object {
	crt := &unstructured.Unstructured{}
	crt.SetAPIVersion("cert-manager.io/v1")
	crt.SetKind("Certificate")
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: s.clients[0]}, crt)).To(Succeed())
	s.g.Expect(unstructured.SetNestedField(crt.Object, "1h", "spec", "renewBefore")).To(Succeed())
	return crt
}

// expectEveryPermissionUsed checks that the API server refused none of
// dualca's requests and that every verb the Roles grant was used, with two
// exceptions. events patch (either API) is for a repeated event only. list is what
// client-go's informers fall back to on API servers without streaming
// lists; this one has them, so a watch (sendInitialEvents) does the list.
func (s *scenario) expectEveryPermissionUsed(roles []*rbacv1.Role, log *apirequest.Log) {
	s.t.Helper()
	reqs := log.All()
	s.g.Expect(reqs).NotTo(BeEmpty())
	var refused []string
	for _, r := range reqs {
		if r.Code == http.StatusForbidden {
			refused = append(refused, r.String())
		}
	}
	s.g.Expect(refused).To(BeEmpty(), "the API server refused none of dualca's requests")
	var unused, excused []string
	for _, role := range roles {
		for _, rule := range role.Rules {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					usedOn := func(resource, verb string) bool {
						return slices.ContainsFunc(reqs, func(r apirequest.Request) bool {
							return r.Namespace == role.Namespace && r.Group == group && r.Resource == resource && r.Verb == verb &&
								(len(rule.ResourceNames) == 0 || slices.Contains(rule.ResourceNames, r.Name))
						})
					}
					used := func(verb string) bool { return usedOn(resource, verb) }
					for _, verb := range rule.Verbs {
						what := fmt.Sprintf("%s %s/%s %v", verb, group, resource, rule.ResourceNames)
						switch {
						case used(verb):
						// A client is triggered from the cached Certificate; it is read
						// with get only when that update conflicts.
						case verb == "list" && used("watch"), verb == "patch" && resource == "events",
							verb == "get" && resource == "certificates" && usedOn("certificates/status", "update"),
							// The Secret that would shadow the bundle and the status
							// ConfigMap are read from their caches (the poll reads the
							// root and the gateway alone); get only on a retry after a
							// conflict.
							verb == "get" && (resource == "secrets" || resource == "configmaps") && used("watch"):
							excused = append(excused, what)
						default:
							unused = append(unused, what)
						}
					}
				}
			}
		}
	}
	s.t.Logf("dualca's requests as the chart's ServiceAccount: %v; granted, not used here, as expected: %v", log.Summary(), excused)
	s.g.Expect(unused).To(BeEmpty(), "every permission granted is used")
}

// TestChartRBACReadsNoSecretInAClientNamespace is issue 25's must-show (d)
// under the zero-downtime strategy: the chart's ServiceAccount (impersonated,
// with the Roles and admission policy the chart renders) cannot read a
// Secret of a client namespace, neither by get nor by list nor by watch,
// nor the clients' own Secrets, which hold their private keys; it lists and
// watches the CertificateRequests there, whose status holds the clients'
// certificates; it may neither create nor delete a Secret there (but the
// gateway Secret, pinned by the policy, where the gateway's namespace is a
// client namespace). Both layouts: clients in the gateway's namespace (the
// chart's default) and in a namespace of their own. dualca does not run:
// only the API server's answers (access reviews and the requests
// themselves) are checked.
func TestChartRBACReadsNoSecretInAClientNamespace(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 1)
	apart := s.clientNamespaceApart()
	_, sa := s.installChartRBACFor(false, []string{s.ns, apart.ns})
	c := s.clientAs(sa)
	s.awaitAdmissionPolicy(c)
	here := s.clientNamespaceHere()
	for _, cn := range []clientNamespace{here, apart} {
		s.expectNoSecretReadable(sa, cn)
		s.expectCertificateRequestsReadable(sa, cn)
		s.expectNoCreateButThePolicys(sa, cn)
		for what, name := range map[string]string{"an unrelated Secret": cn.unrelated.Name, "a Secret cert-manager wrote": cn.issued} {
			s.expectAccess(sa, cn.ns, "secrets", name, "delete", false)
			err := c.Delete(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: name}}, client.DryRunAll)
			s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: deleting %s is forbidden, got %v", cn.ns, what, err)
			s.g.Expect(err).NotTo(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "%s: by RBAC, which grants no delete without the legacy strategy", cn.ns)
		}
	}
}

// TestChartRBACReadsNoSecretInAClientNamespaceUnderLegacy is must-show (d)
// under the legacy strategy, whose Roles grant delete of any Secret in a
// client namespace (RBAC cannot name the selected Certificates' Secrets):
// reads are refused as under zero-downtime, and the chart's admission
// policy lets dualca's account delete only Secrets cert-manager wrote for a
// Certificate (annotation cert-manager.io/certificate-name), never the root
// Secret: a DELETE with propagationPolicy Foreground or Orphan is answered
// with the Secret, data included, so an unpinned delete would read any
// Secret by destroying it (checked here on a Secret dualca may delete).
// Its creates stay pinned.
func TestChartRBACReadsNoSecretInAClientNamespaceUnderLegacy(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 1)
	apart := s.clientNamespaceApart()
	_, sa := s.installChartRBACFor(true, []string{s.ns, apart.ns})
	c := s.clientAs(sa)
	s.awaitAdmissionPolicy(c)
	here := s.clientNamespaceHere()
	refusedByThePolicy := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
	}
	// The policy is one object, enforced for creates already; its delete
	// rule is probed too, with a dry run, which RBAC alone would let through.
	s.g.Eventually(func() error {
		return c.Delete(s.ctx, here.unrelated.DeepCopy(), client.DryRunAll)
	}).Should(And(HaveOccurred(), WithTransform(refusedByThePolicy, BeTrue())), "the API server enforces the policy's delete rule")

	kube := kubernetes.NewForConfigOrDie(s.impersonating(sa, nil))
	for _, cn := range []clientNamespace{here, apart} {
		s.expectNoSecretReadable(sa, cn)
		s.expectCertificateRequestsReadable(sa, cn)
		s.expectNoCreateButThePolicys(sa, cn)

		// RBAC lets dualca delete any Secret here: the policy is what refuses.
		s.expectAccess(sa, cn.ns, "secrets", cn.unrelated.Name, "delete", true)
		refused := map[string]*corev1.Secret{
			"an unrelated Secret": cn.unrelated,
			"a Secret labelled as cert-manager's, without its annotation": s.createSecret(cn.ns, "labelled-only",
				map[string]string{"controller.cert-manager.io/fao": "true"}, nil),
			"a Secret annotated for another purpose": s.createSecret(cn.ns, "annotated-otherwise", nil,
				map[string]string{"cert-manager.io/issuer-name": issuerName}),
		}
		if cn.ns == s.ns {
			root := &corev1.Secret{}
			s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: rootName}, root)).To(Succeed())
			s.g.Expect(root.Annotations).To(HaveKey(cmapi.CertificateNameKey), "cert-manager wrote the root Secret too")
			refused["the root Secret, which cert-manager wrote"] = root
		}
		foreground := metav1.DeletePropagationForeground
		for what, sec := range refused {
			err := c.Delete(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: sec.Name}})
			s.g.Expect(refusedByThePolicy(err)).To(BeTrue(), "%s: deleting %s is refused by the admission policy, got %v", cn.ns, what, err)
			err = kube.CoreV1().Secrets(cn.ns).Delete(s.ctx, sec.Name, metav1.DeleteOptions{PropagationPolicy: &foreground})
			s.g.Expect(refusedByThePolicy(err)).To(BeTrue(), "%s: a Foreground delete of %s, answered with the Secret, is refused by the admission policy, got %v", cn.ns, what, err)
			still := &corev1.Secret{}
			s.g.Expect(s.c.Client.Get(s.ctx, client.ObjectKeyFromObject(sec), still)).To(Succeed(), "%s: %s is still there", cn.ns, what)
			s.g.Expect(still.UID).To(Equal(sec.UID))
		}

		// Why deletes are pinned: a Foreground delete, which dualca's
		// account may make of a Secret annotated as cert-manager's, is
		// answered with the Secret, data included.
		annotated := s.createSecret(cn.ns, "annotated-as-cert-managers", nil, map[string]string{cmapi.CertificateNameKey: "some-certificate"})
		raw, err := kube.CoreV1().RESTClient().Delete().Namespace(cn.ns).Resource("secrets").Name(annotated.Name).
			SetHeader("Accept", "application/json").Body(&metav1.DeleteOptions{PropagationPolicy: &foreground}).DoRaw(s.ctx)
		s.g.Expect(err).NotTo(HaveOccurred(), "%s: dualca may delete a Secret annotated as cert-manager's", cn.ns)
		answer := &corev1.Secret{}
		s.g.Expect(json.Unmarshal(raw, answer)).To(Succeed())
		s.g.Expect(answer.Data).To(HaveKeyWithValue("app.conf", []byte("not dualca's to read")), "%s: the answer to a Foreground delete holds the Secret's data", cn.ns)

		// A Secret cert-manager wrote for a Certificate is deleted (and
		// cert-manager issues it again).
		issued := &corev1.Secret{}
		s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: cn.ns, Name: cn.issued}, issued)).To(Succeed())
		s.g.Expect(issued.Annotations).To(HaveKey(cmapi.CertificateNameKey))
		s.g.Expect(c.Delete(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: cn.issued}})).To(Succeed(),
			"%s: dualca deletes a Secret cert-manager wrote for a Certificate", cn.ns)
		after := &corev1.Secret{}
		err = s.c.Client.Get(s.ctx, client.ObjectKeyFromObject(issued), after)
		s.g.Expect(apierrors.IsNotFound(err) || err == nil && after.UID != issued.UID).To(BeTrue(), "%s: the Secret was deleted, got %v", cn.ns, err)
	}
	// The policy holds dualca's account alone: the admin deletes as it likes.
	s.g.Expect(s.c.Client.Delete(s.ctx, here.unrelated.DeepCopy(), client.DryRunAll)).To(Succeed())

	// Under legacy the creates are pinned as under zero-downtime
	// (TestChartAdmissionPolicyPinsWhatDualcaCreates): the delete rule
	// leaves the create rules whole.
	token := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: gatewayName,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "default"}}, Type: corev1.SecretTypeServiceAccountToken}
	s.g.Expect(refusedByThePolicy(c.Create(s.ctx, token, client.DryRunAll))).To(BeTrue(), "no token Secret, even named as the gateway Secret")
	s.g.Expect(c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: gatewayName}}, client.DryRunAll)).To(Succeed(),
		"the gateway Secret may be created")
}

// clientNamespace is a client namespace of a test and what it holds.
type clientNamespace struct {
	ns string
	// unrelated is a Secret of no concern to dualca, holding some data.
	unrelated *corev1.Secret
	// issued names a Secret cert-manager wrote for a Certificate of the
	// same name, holding its private key.
	issued string
	// request names the CertificateRequest cert-manager made for it.
	request string
}

// clientNamespaceHere is the scenario's namespace as a client namespace:
// the gateway's, the chart's default; issued is the first client's Secret.
func (s *scenario) clientNamespaceHere() clientNamespace {
	s.t.Helper()
	return clientNamespace{ns: s.ns, issued: s.clients[0], request: s.requestOf(s.ns, s.clients[0]),
		unrelated: s.createSecret(s.ns, "unrelated", nil, nil)}
}

// clientNamespaceApart creates a client namespace of its own, beside the
// scenario's, with a Certificate that cert-manager issues there (a
// self-signed CA, so that no Issuer of the scenario's namespace is needed)
// and an unrelated Secret.
func (s *scenario) clientNamespaceApart() clientNamespace {
	s.t.Helper()
	ns := "apart-" + s.ns
	s.g.Expect(s.c.CreateNamespace(s.ctx, ns)).To(Succeed())
	_, err := s.c.CreateRootCA(s.ctx, ns, "apart-issued")
	s.g.Expect(err).NotTo(HaveOccurred())
	return clientNamespace{ns: ns, issued: "apart-issued", request: s.requestOf(ns, "apart-issued"),
		unrelated: s.createSecret(ns, "unrelated", nil, nil)}
}

// createSecret creates, as the admin, an Opaque Secret with some data.
func (s *scenario) createSecret(ns, name string, labels, annotations map[string]string) *corev1.Secret {
	s.t.Helper()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: annotations},
		Type: corev1.SecretTypeOpaque, StringData: map[string]string{"app.conf": "not dualca's to read"}}
	s.g.Expect(s.c.Client.Create(s.ctx, sec)).To(Succeed())
	return sec
}

// requestOf names the issued CertificateRequest of the Certificate crt.
func (s *scenario) requestOf(ns, crt string) string {
	s.t.Helper()
	var list cmapi.CertificateRequestList
	s.g.Expect(s.c.Client.List(s.ctx, &list, client.InNamespace(ns))).To(Succeed())
	for _, cr := range list.Items {
		if cr.Annotations[cmapi.CertificateNameKey] == crt && len(cr.Status.Certificate) > 0 {
			return cr.Name
		}
	}
	s.t.Fatalf("no issued CertificateRequest of %s/%s", ns, crt)
	return ""
}

// saUser is the user name of the scenario's ServiceAccount sa, and
// saGroups the groups its token carries.
func (s *scenario) saUser(sa string) string { return "system:serviceaccount:" + s.ns + ":" + sa }

func (s *scenario) saGroups() []string {
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + s.ns, "system:authenticated"}
}

// expectAccess asks the API server whether sa may do verb on resource
// (name, "" for any) in ns, both ways: a SubjectAccessReview by the admin
// and a SelfSubjectAccessReview as sa; both must answer allowed.
func (s *scenario) expectAccess(sa, ns, resource, name, verb string, allowed bool) {
	s.t.Helper()
	group := ""
	if resource == "certificaterequests" {
		group = cmapi.SchemeGroupVersion.Group
	}
	attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Name: name, Verb: verb}
	sar, err := s.kube.AuthorizationV1().SubjectAccessReviews().Create(s.ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{ResourceAttributes: attrs, User: s.saUser(sa), Groups: s.saGroups()},
	}, metav1.CreateOptions{})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(sar.Status.Allowed).To(Equal(allowed), "SubjectAccessReview: %s %s %q in %s allowed: %v (%s)", verb, resource, name, ns, sar.Status.Allowed, sar.Status.Reason)
	ssar, err := kubernetes.NewForConfigOrDie(s.impersonating(sa, nil)).AuthorizationV1().SelfSubjectAccessReviews().Create(s.ctx,
		&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: attrs}}, metav1.CreateOptions{})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(ssar.Status.Allowed).To(Equal(allowed), "SelfSubjectAccessReview: %s %s %q in %s allowed: %v (%s)", verb, resource, name, ns, ssar.Status.Allowed, ssar.Status.Reason)
}

// expectNoSecretReadable: as sa, no Secret of cn can be read, neither the
// unrelated one nor cert-manager's (a private key): get, list and watch,
// by name (a metadata.name field selector, which the API server authorizes
// as a request for that name), by cert-manager's label, whole, and
// cluster-wide, are each refused, and the access reviews agree; the rules
// the API server reports for sa there grant no Secret read but by name.
func (s *scenario) expectNoSecretReadable(sa string, cn clientNamespace) {
	s.t.Helper()
	kube := kubernetes.NewForConfigOrDie(s.impersonating(sa, nil))
	secrets := kube.CoreV1().Secrets(cn.ns)
	c := s.clientAs(sa)
	forbidden := func(what string, err error) {
		s.t.Helper()
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %s is forbidden, got %v", cn.ns, what, err)
	}
	for _, name := range []string{cn.unrelated.Name, cn.issued} {
		_, err := secrets.Get(s.ctx, name, metav1.GetOptions{})
		forbidden("get of Secret "+name, err)
		forbidden("get of Secret "+name+" (controller-runtime)", c.Get(s.ctx, types.NamespacedName{Namespace: cn.ns, Name: name}, &corev1.Secret{}))
		_, err = secrets.List(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		forbidden("list of Secret "+name+" by name", err)
		_, err = secrets.Watch(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		forbidden("watch of Secret "+name+" by name", err)
		for _, verb := range []string{"get", "list", "watch"} {
			s.expectAccess(sa, cn.ns, "secrets", name, verb, false)
		}
	}
	_, err := secrets.List(s.ctx, metav1.ListOptions{})
	forbidden("list of the Secrets", err)
	forbidden("list of the Secrets (controller-runtime)", c.List(s.ctx, &corev1.SecretList{}, client.InNamespace(cn.ns)))
	_, err = secrets.List(s.ctx, metav1.ListOptions{LabelSelector: "controller.cert-manager.io/fao=true"})
	forbidden("list of cert-manager's Secrets by label", err)
	_, err = secrets.Watch(s.ctx, metav1.ListOptions{})
	forbidden("watch of the Secrets", err)
	_, err = secrets.Watch(s.ctx, metav1.ListOptions{LabelSelector: "controller.cert-manager.io/fao=true"})
	forbidden("watch of cert-manager's Secrets by label", err)
	_, err = kube.CoreV1().Secrets(metav1.NamespaceAll).List(s.ctx, metav1.ListOptions{})
	forbidden("list of the Secrets of every namespace", err)
	_, err = kube.CoreV1().Secrets(metav1.NamespaceAll).Watch(s.ctx, metav1.ListOptions{})
	forbidden("watch of the Secrets of every namespace", err)
	for _, verb := range []string{"get", "list", "watch"} {
		s.expectAccess(sa, cn.ns, "secrets", "", verb, false)
	}

	var named []string // the root, the gateway (and its -cacert, watched) and dualca's record share the scenario's namespace
	if cn.ns == s.ns {
		named = []string{rootName, gatewayName, gatewayName + "-cacert", flags.DefaultStateSecret(types.NamespacedName{Namespace: s.ns, Name: gatewayName}).Name}
	}
	rules, err := kube.AuthorizationV1().SelfSubjectRulesReviews().Create(s.ctx,
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: cn.ns}}, metav1.CreateOptions{})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(rules.Status.Incomplete).To(BeFalse())
	for _, r := range rules.Status.ResourceRules {
		match := func(list []string, want ...string) bool {
			return slices.ContainsFunc(list, func(v string) bool { return v == "*" || slices.Contains(want, v) })
		}
		if match(r.APIGroups, "") && match(r.Resources, "secrets") && match(r.Verbs, "get", "list", "watch") {
			s.g.Expect(r.ResourceNames).NotTo(BeEmpty(), "%s: the API server reports a Secret read without a name for %s: %+v", cn.ns, sa, r)
			s.g.Expect(r.ResourceNames).To(HaveEach(BeElementOf(named)), "%s: only dualca's root, gateway (and its -cacert) and state Secrets are read, by name", cn.ns)
		}
	}
}

// expectCertificateRequestsReadable: as sa, the CertificateRequests of cn
// are listed and watched (the watch's initial events), the one cert-manager
// issued with its certificate; they cannot be written.
func (s *scenario) expectCertificateRequestsReadable(sa string, cn clientNamespace) {
	s.t.Helper()
	c, err := client.NewWithWatch(s.impersonating(sa, nil), client.Options{Scheme: s.c.Client.Scheme()})
	s.g.Expect(err).NotTo(HaveOccurred())
	var list cmapi.CertificateRequestList
	s.g.Expect(c.List(s.ctx, &list, client.InNamespace(cn.ns))).To(Succeed(), "%s: sa lists the CertificateRequests", cn.ns)
	s.g.Expect(list.Items).To(ContainElement(And(HaveField("Name", cn.request), HaveField("Status.Certificate", Not(BeEmpty())))),
		"%s: the issued CertificateRequest, its certificate in its status", cn.ns)
	s.g.Expect(c.List(s.ctx, &list, client.InNamespace(cn.ns), client.MatchingLabels{clientLabel: "agent"})).To(Succeed(), "and through the client selector")
	w, err := c.Watch(s.ctx, &cmapi.CertificateRequestList{}, client.InNamespace(cn.ns))
	s.g.Expect(err).NotTo(HaveOccurred(), "%s: sa watches the CertificateRequests", cn.ns)
	defer w.Stop()
	s.g.Eventually(w.ResultChan()).Should(Receive(And(HaveField("Type", watch.Added), HaveField("Object.Name", cn.request))),
		"%s: the watch shows the issued CertificateRequest", cn.ns)
	for _, verb := range []string{"list", "watch"} {
		s.expectAccess(sa, cn.ns, "certificaterequests", "", verb, true)
	}
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		s.expectAccess(sa, cn.ns, "certificaterequests", cn.request, verb, false)
	}
}

// expectNoCreateButThePolicys: as sa, in cn, a Secret can be created only
// where the chart's admission policy allows it, the gateway Secret in the
// gateway's namespace; elsewhere RBAC grants no create at all. No
// CertificateRequest is created.
func (s *scenario) expectNoCreateButThePolicys(sa string, cn clientNamespace) {
	s.t.Helper()
	c := s.clientAs(sa)
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: "created-by-dualca"}}
	err := c.Create(s.ctx, other, client.DryRunAll)
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: creating a Secret of another name is forbidden, got %v", cn.ns, err)
	gateway := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: gatewayName}}
	if cn.ns == s.ns {
		s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "RBAC grants create in the gateway's namespace: the policy refuses")
		s.g.Expect(c.Create(s.ctx, gateway, client.DryRunAll)).To(Succeed(), "the gateway Secret may be created")
	} else {
		s.expectAccess(sa, cn.ns, "secrets", "", "create", false)
		err := c.Create(s.ctx, gateway, client.DryRunAll)
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: no Secret at all is created in a client namespace apart, got %v", cn.ns, err)
	}
	cr := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: cn.ns, Name: "created-by-dualca"},
		Spec: cmapi.CertificateRequestSpec{Request: []byte("not a CSR"), IssuerRef: cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"}}}
	err = c.Create(s.ctx, cr, client.DryRunAll)
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: creating a CertificateRequest is forbidden, got %v", cn.ns, err)
}
