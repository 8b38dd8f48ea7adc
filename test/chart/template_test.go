package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/sizing"
)

// The value sets the tests render; the release is "dualca" in namespace
// "dualca", apart from the Secrets it works on.
const (
	minimal = `
rootSecret: {namespace: cert-manager, name: agents-root-ca}
gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
server: {dnsNames: [gateway.agents.example.com]}
`
	clientsLegacy = `
rootSecret: {namespace: istio-system, name: agents-root-ca}
gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
certManagement: {legacy: true}
clients: {selector: "dualca.io/client in (agent,edge)", namespaces: [agents, edge]}
`
	clientsBesideGateway = minimal + `
clients: {selector: dualca.io/client=agent}
`
	leaderElection = minimal + `
leaderElection: {enabled: true}
replicas: 2
`
	monitoring = minimal + `
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true, labels: {release: prometheus}}
dashboard: {enabled: true}
`
)

// Rules the Roles are made of.
var (
	rootRules = []rbacv1.PolicyRule{
		secretsNamed("agents-root-ca", "get", "list", "watch"),
	}
	// The combined gateway Secret, and the "-cacert" Secret beside it,
	// which Istio would prefer for the bundle: watched, never written.
	gatewayRules = []rbacv1.PolicyRule{
		secretsNamed("agents-gateway-credential", "get", "list", "watch", "update"),
		secretsNamed("agents-gateway-credential-cacert", "get", "list", "watch"),
		rule("", "secrets", "create"),
	}
	// The release namespace's: dualca's record and its status, by name,
	// and their creates, which the admission policy pins.
	releaseRules = []rbacv1.PolicyRule{
		secretsNamed("agents-gateway-credential-dualca-state", "get", "update"),
		configMapsNamed("agents-gateway-credential-dualca-status", "get", "list", "watch", "patch"),
		rule("", "configmaps", "create"),
		rule("", "secrets", "create"),
	}
	eventRules = []rbacv1.PolicyRule{
		rule("events.k8s.io", "events", "create", "patch"),
	}
	// The clients' certificates are read from their CertificateRequests
	// (public material), not from their Secrets.
	clientRules = []rbacv1.PolicyRule{
		rule("cert-manager.io", "certificates", "get", "list", "watch"),
		rule("cert-manager.io", "certificates/status", "update"),
		rule("cert-manager.io", "certificaterequests", "list", "watch"),
	}
	// The legacy strategy deletes client Secrets (the admission policy pins
	// which) instead of setting the Certificates' Issuing condition.
	legacyClientRules = []rbacv1.PolicyRule{
		rule("cert-manager.io", "certificates", "get", "list", "watch"),
		rule("cert-manager.io", "certificaterequests", "list", "watch"),
		rule("", "secrets", "delete"),
	}
	leaseRules = []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: []string{"dualca-istio-system-agents-gateway-credential"}, Verbs: []string{"get", "update"}},
		rule("coordination.k8s.io", "leases", "create"),
		rule("", "events", "create", "patch"),
	}
)

func rule(group, resource string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}
}

func secretsNamed(name string, verbs ...string) rbacv1.PolicyRule {
	return named("secrets", []string{name}, verbs...)
}

func configMapsNamed(name string, verbs ...string) rbacv1.PolicyRule {
	return named("configmaps", []string{name}, verbs...)
}

// named is a rule of the core group on resource, restricted to names.
func named(resource string, names []string, verbs ...string) rbacv1.PolicyRule {
	r := rule("", resource, verbs...)
	r.ResourceNames = names
	return r
}

func rules(sets ...[]rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, s := range sets {
		out = append(out, s...)
	}
	return out
}

// minimalArgs are dualca's flags for the minimal values.
var minimalArgs = []string{
	"--root-secret=cert-manager/agents-root-ca",
	"--gateway-secret=istio-system/agents-gateway-credential",
	"--gateway-form=combined",
	"--state-secret=dualca/agents-gateway-credential-dualca-state",
	"--status-configmap=dualca/agents-gateway-credential-dualca-status",
	"--poll-interval=5m",
	"--trust-propagation-delay=2m",
	"--server-switch-grace=168h",
	"--server-dns-names=gateway.agents.example.com",
	"--server-key-algorithm=ecdsa-p256",
	"--server-lifetime=2160h",
	"--renewal-qps=5",
	"--renewal-burst=10",
	"--metrics-bind-address=:8080",
	"--health-probe-bind-address=:8081",
	"--zap-log-level=info",
}

func TestLint(t *testing.T) {
	t.Parallel()
	chart := chartDir(t)
	for name, values := range map[string]string{"minimal": minimal, "clients and legacy": clientsLegacy, "monitoring": monitoring,
		"split form": splitForm, "bundle-only ConfigMap": bundleOnlyConfigMap, "bundle-only nginx.org/ca": bundleOnlyNginxCA,
		"issuing Secret": combinedWithIssuing} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := controlplane.Helm(t, "lint", "--strict", chart, "--namespace", releaseNamespace, "-f", valuesFile(t, values))
			NewWithT(t).Expect(err).NotTo(HaveOccurred(), "%s", out)
		})
	}
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		values string
		check  func(g *WithT, m manifest)
	}{
		"the minimal values: a Role for the root's namespace and one for the gateway's, restricted pod security": {
			values: minimal,
			check: func(g *WithT, m manifest) {
				g.Expect(m.kinds()).To(ConsistOf(
					"ServiceAccount dualca/dualca", "Service dualca/dualca", "Deployment dualca/dualca",
					"Role cert-manager/dualca", "RoleBinding cert-manager/dualca",
					"Role istio-system/dualca", "RoleBinding istio-system/dualca",
					"Role dualca/dualca", "RoleBinding dualca/dualca", "Role dualca/dualca-operator",
					"ValidatingAdmissionPolicy /dualca.dualca", "ValidatingAdmissionPolicyBinding /dualca.dualca"))
				g.Expect(m.roleRules(g)).To(HaveLen(3))
				g.Expect(m.roleRules(g)["cert-manager"]).To(ConsistOf(rules(rootRules, eventRules)))
				g.Expect(m.roleRules(g)["istio-system"]).To(ConsistOf(rules(gatewayRules, eventRules)))
				g.Expect(m.roleRules(g)[releaseNamespace]).To(ConsistOf(releaseRules))
				for _, b := range all[rbacv1.RoleBinding](g, m, "RoleBinding") {
					g.Expect(b.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "dualca"}))
					g.Expect(b.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "dualca", Namespace: releaseNamespace}))
				}
				d := m.deployment(g)
				g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(Equal(minimalArgs))
				g.Expect(d.Spec.Strategy.Type).To(Equal(appsv1.RecreateDeploymentStrategyType), "never two dualcas at once without leader election")
				expectRestricted(g, d)
			},
		},
		"clients with the legacy strategy: the flag, and secrets delete in each client namespace only": {
			values: clientsLegacy,
			check: func(g *WithT, m manifest) {
				roles := m.roleRules(g)
				g.Expect(roles).To(HaveLen(4))
				g.Expect(roles["istio-system"]).To(ConsistOf(rules(rootRules, gatewayRules, eventRules)), "root and gateway share a namespace, and a Role")
				g.Expect(roles["agents"]).To(ConsistOf(legacyClientRules))
				g.Expect(roles["edge"]).To(ConsistOf(legacyClientRules))
				args := m.deployment(g).Spec.Template.Spec.Containers[0].Args
				g.Expect(args).To(ContainElements("--cert-management-legacy",
					"--client-selector=dualca.io/client in (agent,edge)", "--client-namespaces=agents,edge"))
				o := parseArgs(g, args)
				g.Expect(o.Legacy).To(BeTrue())
				g.Expect(o.ClientNamespaces).To(Equal([]string{"agents", "edge"}))
			},
		},
		"clients beside the gateway, zero-downtime: one Role for both, and no delete anywhere": {
			values: clientsBesideGateway,
			check: func(g *WithT, m manifest) {
				roles := m.roleRules(g)
				g.Expect(roles["istio-system"]).To(ConsistOf(rules(gatewayRules, eventRules, clientRules)))
				for ns, rs := range roles {
					for _, r := range rs {
						g.Expect(r.Verbs).NotTo(ContainElement("delete"), "namespace %s", ns)
					}
				}
				args := m.deployment(g).Spec.Template.Spec.Containers[0].Args
				g.Expect(args).To(ContainElement("--client-selector=dualca.io/client=agent"))
				g.Expect(args).NotTo(ContainElement("--cert-management-legacy"))
				g.Expect(parseArgs(g, args).ClientNamespaces).To(Equal([]string{"istio-system"}), "dualca defaults to the gateway's namespace too")
			},
		},
		"leader election: the Lease by name in the gateway's namespace, a rollout without surge": {
			values: leaderElection,
			check: func(g *WithT, m manifest) {
				roles := m.roleRules(g)
				g.Expect(roles).To(HaveLen(3))
				g.Expect(roles["istio-system"]).To(ConsistOf(rules(gatewayRules, eventRules, leaseRules)))
				g.Expect(roles["cert-manager"]).To(ConsistOf(rules(rootRules, eventRules)))
				d := m.deployment(g)
				g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(2))
				g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--leader-elect"))
				g.Expect(parseArgs(g, d.Spec.Template.Spec.Containers[0].Args).LeaderElect).To(BeTrue())
				g.Expect(d.Spec.Strategy.RollingUpdate).NotTo(BeNil())
				g.Expect(*d.Spec.Strategy.RollingUpdate.MaxSurge).To(Equal(intstr.FromInt32(0)), "a surge pod would wait unready for the Lease")
			},
		},
		"leader election in a namespace of its own gets a Role of its own": {
			values: leaderElection + "\nleaderElection: {enabled: true, namespace: dualca-election}\n",
			check: func(g *WithT, m manifest) {
				roles := m.roleRules(g)
				g.Expect(roles).To(HaveLen(4))
				g.Expect(roles["dualca-election"]).To(ConsistOf(leaseRules))
				g.Expect(roles["istio-system"]).To(ConsistOf(rules(gatewayRules, eventRules)))
				g.Expect(m.deployment(g).Spec.Template.Spec.Containers[0].Args).To(ContainElements("--leader-elect", "--leader-election-namespace=dualca-election"))
			},
		},
		"the ServiceMonitor scrapes the Service's metrics port": {
			values: monitoring,
			check: func(g *WithT, m manifest) {
				sm := find(g, m, "ServiceMonitor")
				g.Expect(sm.GetLabels()).To(HaveKeyWithValue("release", "prometheus"))
				endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
				g.Expect(endpoints).To(ConsistOf(And(HaveKeyWithValue("port", "metrics"), HaveKeyWithValue("interval", "30s"))))
				_, jobLabel, _ := unstructured.NestedFieldNoCopy(sm.Object, "spec", "jobLabel")
				g.Expect(jobLabel).To(BeFalse(), "no jobLabel: the job is the Service's name")
				selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
				svcs := all[corev1.Service](g, m, "Service")
				g.Expect(svcs).To(HaveLen(1))
				for k, v := range selector {
					g.Expect(svcs[0].Labels).To(HaveKeyWithValue(k, v), "the ServiceMonitor selects the Service")
				}
				g.Expect(svcs[0].Spec.Ports).To(ConsistOf(HaveField("Name", "metrics")))
				g.Expect(svcs[0].Spec.Ports[0].TargetPort).To(Equal(intstr.FromString("dualca-metrics")))
				g.Expect(m.deployment(g).Spec.Template.Spec.Containers[0].Ports).To(ContainElement(
					corev1.ContainerPort{Name: "dualca-metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}))
			},
		},
		"the dashboard ConfigMap carries Grafana's sidecar label and dashboards/dualca.json as it is": {
			values: monitoring,
			check: func(g *WithT, m manifest) {
				cms := all[corev1.ConfigMap](g, m, "ConfigMap")
				g.Expect(cms).To(HaveLen(1))
				cm := cms[0]
				g.Expect(cm.Namespace + "/" + cm.Name).To(Equal(releaseNamespace + "/dualca-dashboard"))
				g.Expect(cm.Labels).To(HaveKeyWithValue("grafana_dashboard", "1"))
				g.Expect(cm.Labels).To(HaveKeyWithValue("app.kubernetes.io/instance", "dualca"))
				g.Expect(cm.Annotations).To(BeEmpty())
				root, err := controlplane.RepoRoot()
				g.Expect(err).NotTo(HaveOccurred())
				want, err := os.ReadFile(filepath.Join(root, "charts", "dualca", "dashboards", "dualca.json"))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(cm.Data).To(HaveLen(1))
				g.Expect(strings.TrimSpace(cm.Data["dualca.json"])).To(Equal(strings.TrimSpace(string(want))), "one source: the chart's file, byte for byte")
			},
		},
		"the dashboard goes to Grafana's namespace with the sidecar's label and folder when told": {
			values: minimal + `
dashboard:
  enabled: true
  namespace: monitoring
  labels: {grafana_dashboard: null, my_dashboards: "yes"}
  annotations: {grafana_folder: Certificates}
`,
			check: func(g *WithT, m manifest) {
				cms := all[corev1.ConfigMap](g, m, "ConfigMap")
				g.Expect(cms).To(HaveLen(1))
				g.Expect(cms[0].Namespace).To(Equal("monitoring"))
				g.Expect(cms[0].Labels).To(HaveKeyWithValue("my_dashboards", "yes"))
				g.Expect(cms[0].Labels).NotTo(HaveKey("grafana_dashboard"), "null drops the default label")
				g.Expect(cms[0].Annotations).To(Equal(map[string]string{"grafana_folder": "Certificates"}))
			},
		},
		"a digest wins over the tag": {
			values: minimal + "image: {repository: registry.example/dualca, tag: v9.9.9, digest: sha256:" + strings.Repeat("ab", 32) + "}\n",
			check: func(g *WithT, m manifest) {
				g.Expect(m.deployment(g).Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example/dualca@sha256:" + strings.Repeat("ab", 32)))
			},
		},
		"every value reaches its flag": {
			values: clientsLegacy + `
image: {repository: registry.example/dualca, tag: v9.9.9, pullPolicy: Always}
stateSecret: {name: record}
statusConfigMap: {name: status}
rotation: {pollInterval: 1m30s, trustPropagationDelay: "0", serverSwitchGrace: 72h}
server: {dnsNames: [gw.example.com, "*.gw.example.com"], ipAddresses: [10.0.0.1, "fd00::1"], keyAlgorithm: rsa-3072, lifetime: 720h, withoutNames: true}
renewal: {qps: 0.5, burst: 1000000}
leaderElection: {enabled: true, namespace: dualca-election}
metrics: {port: 9090}
health: {port: 9091}
logLevel: debug
logEncoder: console
logTimeEncoding: rfc3339
logStacktraceLevel: panic
extraArgs: [--zap-devel]
`,
			check: func(g *WithT, m manifest) {
				c := m.deployment(g).Spec.Template.Spec.Containers[0]
				g.Expect(c.Image).To(Equal("registry.example/dualca:v9.9.9"))
				g.Expect(c.ImagePullPolicy).To(Equal(corev1.PullAlways))
				g.Expect(c.Args).To(Equal([]string{
					"--root-secret=istio-system/agents-root-ca",
					"--gateway-secret=istio-system/agents-gateway-credential",
					"--gateway-form=combined",
					"--state-secret=dualca/record",
					"--status-configmap=dualca/status",
					"--cert-management-legacy",
					"--poll-interval=1m30s",
					"--trust-propagation-delay=0",
					"--server-switch-grace=72h",
					"--server-dns-names=gw.example.com,*.gw.example.com",
					"--server-ip-addresses=10.0.0.1,fd00::1",
					"--server-key-algorithm=rsa-3072",
					"--server-lifetime=720h",
					"--server-without-names",
					"--client-selector=dualca.io/client in (agent,edge)",
					"--client-namespaces=agents,edge",
					"--renewal-qps=0.5",
					"--renewal-burst=1000000",
					"--metrics-bind-address=:9090",
					"--health-probe-bind-address=:9091",
					"--leader-elect",
					"--leader-election-namespace=dualca-election",
					"--zap-log-level=debug",
					"--zap-encoder=console",
					"--zap-time-encoding=rfc3339",
					"--zap-stacktrace-level=panic",
					"--zap-devel",
				}))
				o := parseArgs(g, c.Args)
				g.Expect(o.RenewalBurst).To(Equal(1000000))
				g.Expect(o.StateSecret).To(Equal(types.NamespacedName{Namespace: releaseNamespace, Name: "record"}))
				g.Expect(o.StatusConfigMap).To(Equal(types.NamespacedName{Namespace: releaseNamespace, Name: "status"}))
				g.Expect(o.MetricsBindAddress).To(Equal(":9090"))
				g.Expect(o.Server.DNSNames).To(Equal([]string{"gw.example.com", "*.gw.example.com"}))
				g.Expect(o.Server.Lifetime).To(Equal(720 * time.Hour))
			},
		},
		"ports 0 turn off the endpoints, their probes and the Service": {
			values: minimal + "\nserviceMonitor: {enabled: true}\nmetrics: {port: 0}\nhealth: {port: 0}\n",
			check: func(g *WithT, m manifest) {
				g.Expect(m.kinds()).NotTo(ContainElement(HavePrefix("Service ")))
				g.Expect(m.kinds()).NotTo(ContainElement(HavePrefix("ServiceMonitor ")))
				c := m.deployment(g).Spec.Template.Spec.Containers[0]
				g.Expect(c.Args).To(ContainElements("--metrics-bind-address=0", "--health-probe-bind-address=0"))
				g.Expect(c.Ports).To(BeEmpty())
				g.Expect(c.LivenessProbe).To(BeNil())
				g.Expect(c.ReadinessProbe).To(BeNil())
			},
		},
		"without the Deployment, for a sidecar, only the RBAC, the admission policy and the ServiceAccount": {
			values: minimal + "\ndeployment: {enabled: false}\nleaderElection: {enabled: true}\nserviceMonitor: {enabled: true}\n",
			check: func(g *WithT, m manifest) {
				g.Expect(m.kinds()).To(ConsistOf("ServiceAccount dualca/dualca",
					"Role cert-manager/dualca", "RoleBinding cert-manager/dualca",
					"Role istio-system/dualca", "RoleBinding istio-system/dualca",
					"Role dualca/dualca", "RoleBinding dualca/dualca", "Role dualca/dualca-operator",
					"ValidatingAdmissionPolicy /dualca.dualca", "ValidatingAdmissionPolicyBinding /dualca.dualca"))
			},
		},
		"the operator's Role: get, patch and update of the status ConfigMap by name, nothing on Secrets, bound to the subjects given": {
			values: minimal + "\noperatorRole: {subjects: [{kind: Group, name: oncall, apiGroup: rbac.authorization.k8s.io}]}\n",
			check: func(g *WithT, m manifest) {
				r := m.operatorRole(g)
				g.Expect(r).NotTo(BeNil())
				g.Expect(r.Namespace).To(Equal(releaseNamespace), "beside the status ConfigMap")
				g.Expect(r.Rules).To(ConsistOf(configMapsNamed("agents-gateway-credential-dualca-status", "get", "patch", "update")))
				for _, rule := range r.Rules {
					g.Expect(rule.Resources).NotTo(ContainElement("secrets"), "the operator reads no key")
					g.Expect(rule.Resources).NotTo(ContainElement("*"))
				}
				var bound []rbacv1.Subject
				for _, b := range all[rbacv1.RoleBinding](g, m, "RoleBinding") {
					if b.Name != "dualca-operator" {
						g.Expect(b.Subjects).NotTo(ContainElement(HaveField("Name", "oncall")), "the operators are not bound to dualca's Roles")
						continue
					}
					g.Expect(b.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "dualca-operator"}))
					bound = append(bound, b.Subjects...)
				}
				g.Expect(bound).To(ConsistOf(rbacv1.Subject{Kind: "Group", Name: "oncall", APIGroup: rbacv1.GroupName}))
				for _, rs := range m.roleRules(g) {
					for _, rule := range rs {
						if slices.Contains(rule.Resources, "secrets") {
							g.Expect(rule.Verbs).NotTo(ContainElement("patch"), "dualca itself never patches a Secret: it reads the controls")
						}
					}
				}
			},
		},
		"no operator's Role when turned off": {
			values: minimal + "\noperatorRole: {create: false, subjects: [{kind: User, name: alice}]}\n",
			check: func(g *WithT, m manifest) {
				g.Expect(m.operatorRole(g)).To(BeNil())
				g.Expect(m.kinds()).NotTo(ContainElement(ContainSubstring("operator")))
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			m, err := render(t, "", tc.values)
			g.Expect(err).NotTo(HaveOccurred())
			tc.check(g, m)
		})
	}
}

// expectRestricted checks the restricted Pod Security Standard and the
// probes and resources of the container.
func expectRestricted(g *WithT, d *appsv1.Deployment) {
	pod := d.Spec.Template.Spec
	g.Expect(pod.ServiceAccountName).To(Equal("dualca"))
	g.Expect(pod.SecurityContext).To(HaveField("RunAsNonRoot", HaveValue(BeTrue())))
	g.Expect(pod.SecurityContext).To(HaveField("RunAsUser", HaveValue(BeNumerically(">", 0))))
	g.Expect(pod.SecurityContext).To(HaveField("SeccompProfile.Type", corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(pod.Containers).To(HaveLen(1))
	c := pod.Containers[0]
	sc := c.SecurityContext
	g.Expect(sc).NotTo(BeNil())
	g.Expect(sc.RunAsNonRoot).To(HaveValue(BeTrue()))
	g.Expect(sc.RunAsUser).To(HaveValue(BeNumerically(">", 0)))
	g.Expect(sc.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()))
	g.Expect(sc.AllowPrivilegeEscalation).To(HaveValue(BeFalse()))
	g.Expect(sc.Capabilities).To(HaveField("Drop", ConsistOf(corev1.Capability("ALL"))))
	g.Expect(sc.Capabilities.Add).To(BeEmpty())
	g.Expect(sc.SeccompProfile).To(HaveField("Type", corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(c.Ports).To(ContainElement(corev1.ContainerPort{Name: "dualca-health", ContainerPort: 8081, Protocol: corev1.ProtocolTCP}))
	g.Expect(c.LivenessProbe).To(HaveField("HTTPGet.Path", "/healthz"))
	g.Expect(c.LivenessProbe).To(HaveField("HTTPGet.Port", intstr.FromString("dualca-health")))
	g.Expect(c.ReadinessProbe).To(HaveField("HTTPGet.Path", "/readyz"))
	g.Expect(c.ReadinessProbe).To(HaveField("HTTPGet.Port", intstr.FromString("dualca-health")))
	g.Expect(c.Resources.Requests.Cpu().String()).To(Equal("10m"))
	first, largest := chartSizing(g)
	g.Expect(c.Resources.Requests.Memory().String()).To(Equal(sizing.Quantity(first.Request)))
	g.Expect(c.Resources.Limits.Memory().String()).To(Equal(sizing.Quantity(largest.Limit)))
}

// find is the one object of kind.
func find(g *WithT, m manifest, kind string) *unstructured.Unstructured {
	var found []*unstructured.Unstructured
	for _, o := range m {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	g.Expect(found).To(HaveLen(1), "one %s", kind)
	return found[0]
}

// parseMu serializes flags.Parse, which binds --kubeconfig to a
// package-level variable.
var parseMu sync.Mutex

// parseArgs parses and validates the rendered arguments with dualca's own
// flags: the chart passes nothing the binary would refuse.
func parseArgs(g *WithT, args []string) flags.Options {
	parseMu.Lock()
	defer parseMu.Unlock()
	o, err := flags.Parse("dualca", args)
	g.Expect(err).NotTo(HaveOccurred())
	return o
}

func TestTheSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		values  string
		wantErr string
	}{
		"a missing root secret":                {values: "gatewaySecret: {namespace: a, name: b}\n", wantErr: "at '/rootSecret/name': minLength: got 0, want 1"},
		"a missing root secret name":           {values: "rootSecret: {namespace: a}\ngatewaySecret: {namespace: a, name: b}\n", wantErr: "at '/rootSecret/name': minLength: got 0, want 1"},
		"a null root secret":                   {values: "rootSecret: null\ngatewaySecret: {namespace: a, name: b}\n", wantErr: "rootSecret"},
		"an empty gateway namespace":           {values: minimal + "gatewaySecret: {namespace: '', name: b}\n", wantErr: "/gatewaySecret/namespace"},
		"an upper-case secret name":            {values: minimal + "rootSecret: {namespace: a, name: Root}\n", wantErr: "/rootSecret/name"},
		"qps as a string":                      {values: minimal + "renewal: {qps: fast}\n", wantErr: "/renewal/qps"},
		"qps of zero":                          {values: minimal + "renewal: {qps: 0}\n", wantErr: "/renewal/qps"},
		"a fractional burst":                   {values: minimal + "renewal: {burst: 1.5}\n", wantErr: "/renewal/burst"},
		"a burst of zero":                      {values: minimal + "renewal: {burst: 0}\n", wantErr: "/renewal/burst"},
		"legacy as \"yes\"":                    {values: minimal + "certManagement: {legacy: \"yes\"}\n", wantErr: "/certManagement/legacy"},
		"a duration in words":                  {values: minimal + "rotation: {pollInterval: 5 minutes}\n", wantErr: "/rotation/pollInterval"},
		"a duration without a unit":            {values: minimal + "rotation: {serverSwitchGrace: 300}\n", wantErr: "/rotation/serverSwitchGrace"},
		"a zero poll interval":                 {values: minimal + "rotation: {pollInterval: 0s}\n", wantErr: "/rotation/pollInterval"},
		"a negative propagation delay":         {values: minimal + "rotation: {trustPropagationDelay: -1s}\n", wantErr: "/rotation/trustPropagationDelay"},
		"client namespaces as a string":        {values: minimal + "clients: {selector: a=b, namespaces: agents}\n", wantErr: "/clients/namespaces"},
		"leader election as a string":          {values: minimal + "leaderElection: {enabled: \"true\"}\n", wantErr: "/leaderElection/enabled"},
		"a port out of range":                  {values: minimal + "metrics: {port: 70000}\n", wantErr: "/metrics/port"},
		"an unknown log level":                 {values: minimal + "logLevel: verbose\n", wantErr: "/logLevel"},
		"a digest without its algorithm":       {values: minimal + "image: {digest: " + strings.Repeat("ab", 32) + "}\n", wantErr: "/image/digest"},
		"a misspelt key":                       {values: minimal + "certManagment: {legacy: true}\n", wantErr: "'certManagment' not allowed"},
		"client namespaces without selector":   {values: minimal + "clients: {namespaces: [agents]}\n", wantErr: "clients.namespaces needs a client selection"},
		"the gateway is the root":              {values: minimal + "gatewaySecret: {namespace: cert-manager, name: agents-root-ca}\n", wantErr: "gatewaySecret must differ from rootSecret"},
		"two replicas without election":        {values: minimal + "replicas: 2\n", wantErr: "replicas > 1 needs leaderElection.enabled"},
		"a dashboard label as a number":        {values: minimal + "dashboard: {enabled: true, labels: {grafana_dashboard: 1}}\n", wantErr: "/dashboard/labels/grafana_dashboard"},
		"a dashboard in an invalid namespace":  {values: minimal + "dashboard: {enabled: true, namespace: Monitoring}\n", wantErr: "/dashboard/namespace"},
		"no service account to bind":           {values: minimal + "serviceAccount: {create: false}\n", wantErr: "serviceAccount.name is required"},
		"a sidecar without leader election":    {values: minimal + "deployment: {enabled: false}\n", wantErr: "deployment.enabled=false (dualca as a sidecar) needs leaderElection.enabled"},
		"an upper-case state Secret name":      {values: minimal + "stateSecret: {name: State}\n", wantErr: "/stateSecret/name"},
		"a status ConfigMap name with a slash": {values: minimal + "statusConfigMap: {name: a/b}\n", wantErr: "/statusConfigMap/name"},
		"a state Secret in another namespace":  {values: minimal + "stateSecret: {namespace: other, name: state}\n", wantErr: "'namespace' not allowed"},
		"admission policy on as a string":      {values: minimal + "admissionPolicy: {enabled: \"no\"}\n", wantErr: "/admissionPolicy/enabled"},
		"an upper-case issuing Secret name":    {values: minimal + "issuingSecret: {name: Issuing}\n", wantErr: "/issuingSecret/name"},
		"an issuing Secret name with a slash":  {values: minimal + "issuingSecret: {name: cert-manager/issuing}\n", wantErr: "/issuingSecret/name"},
		"an issuing Secret name too long":      {values: minimal + "issuingSecret: {name: " + strings.Repeat("a", 254) + "}\n", wantErr: "/issuingSecret/name"},
		"an issuing Secret in a namespace of its own": {values: minimal + "issuingSecret: {namespace: other, name: issuing}\n",
			wantErr: "'namespace' not allowed"},
		"zero-downtime without server names": {values: "rootSecret: {namespace: a, name: r}\ngatewaySecret: {namespace: a, name: g}\n",
			wantErr: "server.dnsNames or server.ipAddresses is required: they are the names clients check the gateway's certificate against (set server.withoutNames=true for a certificate with none)"},
		"an upper-case server DNS name":   {values: minimal + "server: {dnsNames: [Gateway.example.com]}\n", wantErr: "/server/dnsNames/0"},
		"an unknown server key algorithm": {values: minimal + "server: {keyAlgorithm: dsa}\n", wantErr: "/server/keyAlgorithm"},
		"a server lifetime in days":       {values: minimal + "server: {lifetime: 90d}\n", wantErr: "/server/lifetime"},
		"server names as a string":        {values: minimal + "server: {dnsNames: gw.example.com}\n", wantErr: "/server/dnsNames"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := render(t, "", tc.values)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

// TestTheContainerTemplateRunsDualcaAsASidecar renders a gateway chart that
// has dualca as a dependency and includes "dualca.container" in its pod.
func TestTheContainerTemplateRunsDualcaAsASidecar(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	dualcaChart := chartDir(t)
	gateway := t.TempDir()
	g.Expect(os.CopyFS(filepath.Join(gateway, "charts", "dualca"), os.DirFS(dualcaChart))).To(Succeed())
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: gateway\nversion: 1.0.0\ndependencies:\n  - name: dualca\n    version: \">=0.0.0-0\"\n",
		"values.yaml": `
dualca:
  deployment: {enabled: false}
  serviceAccount: {create: false, name: gateway}
  leaderElection: {enabled: true}
  rootSecret: {namespace: istio-system, name: agents-root-ca}
  gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
  server: {ipAddresses: [10.0.0.10]}
  metrics: {port: 15091}
`,
		"templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: gateway
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    matchLabels: {app: gateway}
  template:
    metadata:
      labels: {app: gateway}
    spec:
      serviceAccountName: gateway
      containers:
        - name: gateway
          image: registry.example/gateway:1
        {{- include "dualca.container" .Subcharts.dualca | nindent 8 }}
`,
	}
	for name, content := range files {
		g.Expect(os.MkdirAll(filepath.Dir(filepath.Join(gateway, name)), 0o750)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(gateway, name), []byte(content), 0o600)).To(Succeed())
	}

	m, err := render(t, gateway, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m.kinds()).To(ConsistOf("Deployment dualca/gateway", "Role istio-system/dualca", "RoleBinding istio-system/dualca",
		"Role dualca/dualca", "RoleBinding dualca/dualca", "Role dualca/dualca-operator",
		"ValidatingAdmissionPolicy /dualca.dualca", "ValidatingAdmissionPolicyBinding /dualca.dualca"),
		"the gateway runs dualca: no Deployment nor ServiceAccount of dualca's own")
	g.Expect(find(g, m, "ValidatingAdmissionPolicy").Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("matchConditions",
		ConsistOf(HaveKeyWithValue("expression", `request.userInfo.username == "system:serviceaccount:dualca:gateway"`)))),
		"the policy pins the gateway's ServiceAccount, which runs dualca")
	pod := m.deployment(g).Spec.Template.Spec
	g.Expect(pod.Containers).To(HaveLen(2))
	sidecar := pod.Containers[1]
	g.Expect(sidecar.Name).To(Equal("dualca"))
	g.Expect(sidecar.Image).To(Equal("ghcr.io/dualca/dualca:0.1.0"), "the tag is dualca's appVersion, not the gateway chart's")
	g.Expect(sidecar.Args).To(ContainElements("--gateway-secret=istio-system/agents-gateway-credential", "--metrics-bind-address=:15091"))
	g.Expect(sidecar.SecurityContext).To(HaveField("ReadOnlyRootFilesystem", HaveValue(BeTrue())), "hardened without the pod's help")
	g.Expect(sidecar.SecurityContext).To(HaveField("RunAsNonRoot", HaveValue(BeTrue())))
	for _, b := range all[rbacv1.RoleBinding](g, m, "RoleBinding") {
		g.Expect(b.Subjects).To(ConsistOf(HaveField("Name", "gateway")), "the Roles are the gateway's ServiceAccount's")
	}

	// The gateway's replica count is not this chart's to know: without
	// leader election the gateway chart does not render.
	values := strings.Replace(files["values.yaml"], "  leaderElection: {enabled: true}\n", "", 1)
	g.Expect(values).NotTo(Equal(files["values.yaml"]))
	g.Expect(os.WriteFile(filepath.Join(gateway, "values.yaml"), []byte(values), 0o600)).To(Succeed())
	_, err = render(t, gateway, "")
	g.Expect(err).To(MatchError(ContainSubstring("needs leaderElection.enabled")), "a sidecar without leader election is refused")
}

// TestTheChartRequiresATestedKubernetesVersion checks the chart's
// kubeVersion against the versions the tests run on: helm renders it for
// the oldest of them and refuses the minor version before it.
func TestTheChartRequiresATestedKubernetesVersion(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	versions, err := controlplane.KubeVersions()
	g.Expect(err).NotTo(HaveOccurred())
	oldest := version.MustParseGeneric(versions[0])
	for _, v := range versions {
		_, err := controlplane.Helm(t, "template", "dualca", chartDir(t), "--namespace", releaseNamespace, "-f", valuesFile(t, minimal), "--kube-version", v)
		g.Expect(err).NotTo(HaveOccurred(), "the chart renders for Kubernetes %s, which the tests run on", v)
	}
	older := fmt.Sprintf("v%d.%d.0", oldest.Major(), oldest.Minor()-1)
	_, err = controlplane.Helm(t, "template", "dualca", chartDir(t), "--namespace", releaseNamespace, "-f", valuesFile(t, minimal), "--kube-version", older)
	g.Expect(err).To(MatchError(ContainSubstring("kubeVersion")), "helm refuses Kubernetes %s, older than every tested version", older)
}

// TestTheAdmissionPolicyPinsDualcasCreates checks the rendered
// ValidatingAdmissionPolicy: it matches dualca's ServiceAccount's creates
// of Secrets and ConfigMaps, names what it may create, and refuses a token
// Secret; its binding denies. test/e2e/rbac_test.go shows the API server
// enforcing it.
func TestTheAdmissionPolicyPinsDualcasCreates(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	m, err := render(t, "", minimal)
	g.Expect(err).NotTo(HaveOccurred())
	policies := all[admissionregistrationv1.ValidatingAdmissionPolicy](g, m, "ValidatingAdmissionPolicy")
	bindings := all[admissionregistrationv1.ValidatingAdmissionPolicyBinding](g, m, "ValidatingAdmissionPolicyBinding")
	g.Expect(policies).To(HaveLen(1))
	g.Expect(bindings).To(HaveLen(1))
	p, b := policies[0], bindings[0]
	g.Expect(p.Namespace).To(BeEmpty(), "cluster-scoped")
	g.Expect(p.Spec.FailurePolicy).To(HaveValue(Equal(admissionregistrationv1.Fail)))
	g.Expect(p.Spec.MatchConstraints.ResourceRules).To(ConsistOf(HaveField("RuleWithOperations", And(
		HaveField("Operations", ConsistOf(admissionregistrationv1.Create)),
		HaveField("Rule.APIGroups", ConsistOf("")),
		HaveField("Rule.Resources", ConsistOf("secrets", "configmaps"))))))
	g.Expect(p.Spec.MatchConditions).To(ConsistOf(HaveField("Expression",
		`request.userInfo.username == "system:serviceaccount:dualca:dualca"`)))
	var exprs []string
	for _, v := range p.Spec.Validations {
		exprs = append(exprs, v.Expression)
	}
	joined := strings.Join(exprs, "\n")
	for _, want := range []string{
		`request.namespace == "istio-system" && object.metadata.name == "agents-gateway-credential"`,
		`request.namespace == "dualca" && object.metadata.name == "agents-gateway-credential-dualca-state"`,
		`request.namespace == "dualca" && object.metadata.name == "agents-gateway-credential-dualca-status"`,
		`"kubernetes.io/service-account-token"`,
		`"kubernetes.io/service-account.name" in object.metadata.annotations`,
	} {
		g.Expect(joined).To(ContainSubstring(want))
	}
	g.Expect(b.Spec.PolicyName).To(Equal(p.Name))
	g.Expect(b.Spec.ValidationActions).To(ConsistOf(admissionregistrationv1.Deny))

	// Another release of the chart, in another namespace, has a policy of
	// its own: the names are cluster-wide.
	other, err := controlplane.Helm(t, "template", "dualca", chartDir(t), "--namespace", "other", "-f", valuesFile(t, minimal))
	g.Expect(err).NotTo(HaveOccurred())
	om, err := parse(other)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(find(g, om, "ValidatingAdmissionPolicy").GetName()).NotTo(Equal(p.Name))

	off, err := render(t, "", minimal+"admissionPolicy: {enabled: false}\n")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(off.kinds()).NotTo(ContainElement(HavePrefix("ValidatingAdmissionPolicy")))
}

// TestTheLeaseNameIsDualcas: the Role's Lease is the one dualca elects
// with (syncer.LeaseName), for short names and for names cut to fit.
func TestTheLeaseNameIsDualcas(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	for name, gateway := range map[string]types.NamespacedName{
		"short":                            {Namespace: "istio-system", Name: "agents-gateway-credential"},
		"the same name, another namespace": {Namespace: "edge", Name: "agents-gateway-credential"},
		"too long: cut, with a hash":       {Namespace: strings.Repeat("n", 63), Name: long},
		"cut after a dot":                  {Namespace: "ns", Name: strings.Repeat("x", 231) + ".y" + strings.Repeat("z", 20)},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			m, err := render(t, "", fmt.Sprintf("rootSecret: {namespace: cert-manager, name: root}\ngatewaySecret: {namespace: %s, name: %q}\nleaderElection: {enabled: true}\nserver: {withoutNames: true}\n"+
				"stateSecret: {name: state}\nstatusConfigMap: {name: status}\n",
				gateway.Namespace, gateway.Name))
			g.Expect(err).NotTo(HaveOccurred())
			var leases []string
			for _, r := range m.roleRules(g)[gateway.Namespace] {
				if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) > 0 {
					leases = append(leases, r.ResourceNames...)
				}
			}
			g.Expect(leases).To(ConsistOf(syncer.LeaseName(gateway)))
		})
	}
}
