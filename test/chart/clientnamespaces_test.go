package chart

import (
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// clientsApart are clientsLegacy's namespaces under the zero-downtime
// strategy.
const clientsApart = `
rootSecret: {namespace: istio-system, name: agents-root-ca}
gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
server: {dnsNames: [gateway.agents.example.com]}
clients: {selector: "dualca.io/client in (agent,edge)", namespaces: [agents, edge]}
`

// oneNamespace is the default layout of the e2e tests: root, gateway and
// clients in one namespace.
const oneNamespace = `
rootSecret: {namespace: istio-system, name: agents-root-ca}
gatewaySecret: {namespace: istio-system, name: agents-gateway-credential}
server: {dnsNames: [gateway.agents.example.com]}
clients: {selector: dualca.io/client=agent}
`

// TestNoSecretIsReadInAClientNamespace: in a client namespace dualca's Role
// lets it read no Secret (get, list or watch) but the root, gateway and
// state Secrets by name where their namespace is also a client namespace.
// RBAC cannot restrict a list to labelled Secrets, so any such rule without
// names would read every Secret there: ServiceAccount tokens, other
// applications' keys, the clients' own private keys. The clients'
// certificates come from their CertificateRequests (list and watch), and
// only the legacy strategy may delete Secrets there (pinned by the
// admission policy, TestTheAdmissionPolicyPinsLegacyDeletes).
// test/e2e/rbac_test.go has the API server refuse those reads.
func TestNoSecretIsReadInAClientNamespace(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		values     string
		legacy     bool
		namespaces []string
	}{
		"zero-downtime, clients beside the gateway":         {values: clientsBesideGateway, namespaces: []string{"istio-system"}},
		"legacy, clients beside the gateway":                {values: clientsBesideGateway + "certManagement: {legacy: true}\n", legacy: true, namespaces: []string{"istio-system"}},
		"zero-downtime, clients in namespaces of their own": {values: clientsApart, namespaces: []string{"agents", "edge"}},
		"legacy, clients in namespaces of their own":        {values: clientsLegacy, legacy: true, namespaces: []string{"agents", "edge"}},
		"zero-downtime, root, gateway and clients together": {values: oneNamespace, namespaces: []string{"istio-system"}},
		"legacy, root, gateway and clients together":        {values: oneNamespace + "certManagement: {legacy: true}\n", legacy: true, namespaces: []string{"istio-system"}},
		"legacy, clients in the release namespace too, with leader election there": {
			values:     clientsLegacy + "clients: {selector: dualca.io/client=agent, namespaces: [agents, dualca]}\nleaderElection: {enabled: true, namespace: dualca}\n",
			legacy:     true,
			namespaces: []string{"agents", releaseNamespace},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			m, err := render(t, "", tc.values)
			g.Expect(err).NotTo(HaveOccurred())
			roles := m.roleRules(g)
			// The Secrets dualca may read, by name: the root's (in istio-system
			// but for clientsBesideGateway), the gateway's and dualca's record.
			root := "istio-system"
			if strings.HasPrefix(tc.values, clientsBesideGateway) {
				root = "cert-manager"
			}
			named := map[string][]string{
				root:             {"agents-root-ca"},
				releaseNamespace: {"agents-gateway-credential-dualca-state"},
			}
			named["istio-system"] = append(named["istio-system"], "agents-gateway-credential", "agents-gateway-credential-cacert")
			for _, ns := range tc.namespaces {
				g.Expect(roles).To(HaveKey(ns), "a Role in client namespace %s", ns)
				for _, r := range roles[ns] {
					if !grants(r, "", "secrets", "get", "list", "watch") {
						continue
					}
					g.Expect(r.ResourceNames).NotTo(BeEmpty(), "client namespace %s: no Secret read without a name: %+v", ns, r)
					for _, n := range r.ResourceNames {
						g.Expect(named[ns]).To(ContainElement(n), "client namespace %s: Secret %s is not dualca's root, gateway (or its -cacert) or state Secret", ns, n)
					}
				}
				g.Expect(roles[ns]).To(ContainElement(rule("cert-manager.io", "certificaterequests", "list", "watch")),
					"client namespace %s: the clients' certificates come from their CertificateRequests", ns)
				for _, r := range roles[ns] {
					if grants(r, "cert-manager.io", "certificaterequests", "create", "update", "patch", "delete", "deletecollection") {
						g.Expect(r).To(BeNil(), "client namespace %s: CertificateRequests are only read", ns)
					}
				}
				deletes := slices.ContainsFunc(roles[ns], func(r rbacv1.PolicyRule) bool { return grants(r, "", "secrets", "delete") })
				g.Expect(deletes).To(Equal(tc.legacy), "client namespace %s: Secrets are deleted under the legacy strategy only", ns)
			}
		})
	}
}

// grants tells whether r grants one of verbs on resource of group,
// wildcards included.
func grants(r rbacv1.PolicyRule, group, resource string, verbs ...string) bool {
	matches := func(list []string, want ...string) bool {
		return slices.ContainsFunc(list, func(s string) bool { return s == "*" || slices.Contains(want, s) })
	}
	return matches(r.APIGroups, group) && matches(r.Resources, resource) && matches(r.Verbs, verbs...)
}

// TestTheAdmissionPolicyPinsLegacyDeletes checks the rendered policy: under
// the legacy strategy it also matches dualca's deletes of Secrets and lets
// through only Secrets cert-manager wrote for a Certificate (the annotation
// cert-manager.io/certificate-name on oldObject, the stored Secret), in the
// client namespaces, never the root Secret; a Foreground or Orphan DELETE
// is answered with the Secret, so an unpinned delete reads it. Its creates stay pinned
// (their rules skip a DELETE, which has no object). Under the zero-downtime
// strategy, which may delete nothing, it matches creates only.
// test/e2e/rbac_test.go shows the API server enforcing it.
func TestTheAdmissionPolicyPinsLegacyDeletes(t *testing.T) {
	t.Parallel()
	policy := func(g *WithT, values string) *admissionregistrationv1.ValidatingAdmissionPolicy {
		m, err := render(t, "", values)
		g.Expect(err).NotTo(HaveOccurred())
		ps := all[admissionregistrationv1.ValidatingAdmissionPolicy](g, m, "ValidatingAdmissionPolicy")
		g.Expect(ps).To(HaveLen(1))
		return ps[0]
	}
	t.Run("legacy", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		p := policy(g, clientsLegacy)
		g.Expect(p.Spec.MatchConstraints.ResourceRules).To(ConsistOf(
			HaveField("RuleWithOperations", And(
				HaveField("Operations", ConsistOf(admissionregistrationv1.Create)),
				HaveField("Rule.Resources", ConsistOf("secrets", "configmaps")))),
			HaveField("RuleWithOperations", And(
				HaveField("Operations", ConsistOf(admissionregistrationv1.Delete)),
				HaveField("Rule.APIGroups", ConsistOf("")),
				HaveField("Rule.Resources", ConsistOf("secrets"))))))
		g.Expect(p.Spec.MatchConditions).To(ConsistOf(HaveField("Expression",
			`request.userInfo.username == "system:serviceaccount:dualca:dualca"`)), "dualca's deletes only")
		var deletes []admissionregistrationv1.Validation
		for _, v := range p.Spec.Validations {
			if strings.Contains(v.Expression, "oldObject") {
				deletes = append(deletes, v)
				continue
			}
			if strings.Contains(v.Expression, "object.") {
				g.Expect(v.Expression).To(HavePrefix(`request.operation != "CREATE" ||`), "a rule on the new object skips a DELETE, which has none: %s", v.Expression)
			}
		}
		g.Expect(deletes).To(HaveLen(1))
		d := deletes[0]
		g.Expect(d.Expression).To(HavePrefix(`request.operation != "DELETE" ||`))
		for _, want := range []string{
			`request.namespace in ["agents","edge"]`,
			`!(request.namespace == "istio-system" && oldObject.metadata.name == "agents-root-ca")`,
			`has(oldObject.metadata.annotations) && "cert-manager.io/certificate-name" in oldObject.metadata.annotations`,
		} {
			g.Expect(d.Expression).To(ContainSubstring(want))
		}
		g.Expect(d.Reason).To(HaveValue(Equal(metav1.StatusReasonForbidden)))
		g.Expect(d.Message).To(ContainSubstring("cert-manager.io/certificate-name"))
	})
	t.Run("zero-downtime", func(t *testing.T) {
		t.Parallel()
		g := NewWithT(t)
		for _, values := range []string{clientsApart, clientsBesideGateway, minimal} {
			p := policy(g, values)
			for _, r := range p.Spec.MatchConstraints.ResourceRules {
				g.Expect(r.Operations).To(ConsistOf(admissionregistrationv1.Create))
			}
			for _, v := range p.Spec.Validations {
				g.Expect(v.Expression).NotTo(ContainSubstring("oldObject"))
			}
		}
	})
}
