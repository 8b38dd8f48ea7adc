package chart

import (
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dualca/dualca/syncer"
)

// TestClientsAreSelectedAsTheValuesSay: clients.secretSelector and
// clients.issuer become dualca's flags, each alone or with the others,
// and the binary accepts them; the issuer dualca checks at start is
// granted get by name (an Issuer in the root's namespace, a ClusterIssuer
// by a ClusterRole naming it), another group's nothing; the client
// namespaces get the client rules in every mode, and no Secret.
func TestClientsAreSelectedAsTheValuesSay(t *testing.T) {
	t.Parallel()
	issuerGet := func(resource, name string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{APIGroups: []string{"cert-manager.io"}, Resources: []string{resource}, ResourceNames: []string{name}, Verbs: []string{"get"}}
	}
	tests := map[string]struct {
		values     string
		args       []string
		clients    syncer.ClientSelection
		rootRules  []rbacv1.PolicyRule
		cluster    []rbacv1.PolicyRule
		namespaces []string
	}{
		"by the Secrets' label alone": {
			values:  minimal + "clients: {secretSelector: dualca.io/client=agent, namespaces: [agents]}\n",
			args:    []string{"--client-secret-selector=dualca.io/client=agent", "--client-namespaces=agents"},
			clients: syncer.ClientSelection{SecretLabels: mustSelector("dualca.io/client=agent")}, rootRules: rules(rootRules, eventRules),
			namespaces: []string{"agents"},
		},
		"by a ClusterIssuer alone: get of that one ClusterIssuer": {
			values:    minimal + "clients: {issuer: ClusterIssuer/agents-ca, namespaces: [agents, edge]}\n",
			args:      []string{"--client-issuer=ClusterIssuer/agents-ca", "--client-namespaces=agents,edge"},
			clients:   syncer.ClientSelection{Issuer: &syncer.IssuerRef{Group: "cert-manager.io", Kind: "ClusterIssuer", Name: "agents-ca"}},
			rootRules: rules(rootRules, eventRules), cluster: []rbacv1.PolicyRule{issuerGet("clusterissuers", "agents-ca")},
			namespaces: []string{"agents", "edge"},
		},
		"by an Issuer in the root's namespace, with a label: get of that Issuer there": {
			values: minimal + "clients: {selector: app=agent, issuer: Issuer/agents-ca, namespaces: [cert-manager]}\n",
			args:   []string{"--client-selector=app=agent", "--client-issuer=Issuer/agents-ca", "--client-namespaces=cert-manager"},
			clients: syncer.ClientSelection{Labels: mustSelector("app=agent"),
				Issuer: &syncer.IssuerRef{Group: "cert-manager.io", Kind: "Issuer", Name: "agents-ca", Namespace: "cert-manager"}},
			rootRules:  rules([]rbacv1.PolicyRule{issuerGet("issuers", "agents-ca")}, rootRules, eventRules, clientRules),
			namespaces: []string{"cert-manager"},
		},
		"by an issuer of another group: nothing to read": {
			values:    minimal + "clients: {issuer: PCAIssuer.example.com/pca, namespaces: [agents]}\n",
			args:      []string{"--client-issuer=PCAIssuer.example.com/pca", "--client-namespaces=agents"},
			clients:   syncer.ClientSelection{Issuer: &syncer.IssuerRef{Group: "example.com", Kind: "PCAIssuer", Name: "pca"}},
			rootRules: rules(rootRules, eventRules), namespaces: []string{"agents"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			m, err := render(t, "", tc.values)
			g.Expect(err).NotTo(HaveOccurred())
			args := m.deployment(g).Spec.Template.Spec.Containers[0].Args
			g.Expect(args).To(ContainElements(tc.args))
			o := parseArgs(g, args)
			g.Expect(o.Clients()).To(Equal(tc.clients))
			roles := m.roleRules(g)
			g.Expect(roles["cert-manager"]).To(ConsistOf(tc.rootRules))
			for _, ns := range tc.namespaces {
				if ns != "cert-manager" {
					g.Expect(roles[ns]).To(ConsistOf(clientRules), "client namespace %s", ns)
				}
				for _, r := range roles[ns] {
					if slices.Contains(r.Resources, "secrets") {
						g.Expect(r.ResourceNames).To(Equal([]string{"agents-root-ca"}), "namespace %s: no Secret read in a client namespace but the root by name", ns)
					}
				}
			}
			var cluster []rbacv1.PolicyRule
			for _, cr := range all[rbacv1.ClusterRole](g, m, "ClusterRole") {
				cluster = append(cluster, cr.Rules...)
			}
			g.Expect(cluster).To(ConsistOf(tc.cluster), "nothing cluster-wide but the ClusterIssuer's get")
			bindings := all[rbacv1.ClusterRoleBinding](g, m, "ClusterRoleBinding")
			g.Expect(bindings).To(HaveLen(len(tc.cluster)))
			for _, b := range bindings {
				g.Expect(b.Subjects).To(HaveLen(1))
				g.Expect(b.Subjects[0].Namespace).To(Equal(releaseNamespace))
				g.Expect(strings.HasSuffix(b.RoleRef.Name, "-client-issuer")).To(BeTrue())
			}
		})
	}
}

// TestTheChartRefusesAClientSelectionDualcaWould: what dualca refuses at
// start, the chart refuses at render.
func TestTheChartRefusesAClientSelectionDualcaWould(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ values, wantErr string }{
		"an Issuer no client namespace can name": {values: minimal + "clients: {issuer: Issuer/agents-ca, namespaces: [agents]}\n",
			wantErr: "an Issuer is namespaced"},
		"an issuer without a kind":    {values: minimal + "clients: {issuer: agents-ca}\n", wantErr: "/clients/issuer"},
		"an issuer in lower case":     {values: minimal + "clients: {issuer: clusterissuer/agents-ca}\n", wantErr: "/clients/issuer"},
		"namespaces without selector": {values: minimal + "clients: {namespaces: [agents]}\n", wantErr: "needs a client selection"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := render(t, "", tc.values)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

func mustSelector(s string) labels.Selector {
	sel, err := labels.Parse(s)
	if err != nil {
		panic(err)
	}
	return sel
}
