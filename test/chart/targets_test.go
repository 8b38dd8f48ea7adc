package chart

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/controlplane"
)

// The target shapes (syncer/targets.go): where dualca writes the rotation,
// as the gateways of the README's gateway table read it.
const (
	// Istio's split form: tls.crt and tls.key in the gateway Secret, ca.crt
	// in "<name>-cacert" beside it.
	splitForm = `
rootSecret: {namespace: cert-manager, name: agents-root-ca}
gatewaySecret: {namespace: istio-system, name: agents-gateway-credential, form: split}
server: {dnsNames: [gateway.agents.example.com]}
`
	// The Gateway API's frontend TLS validation, Envoy Gateway: a ConfigMap
	// holding ca.crt alone; the gateway serves a certificate of its own.
	// With clients and leader election, whose namespaces default to the
	// ConfigMap's, as the Lease's name derives from it.
	bundleOnlyConfigMap = `
rootSecret: {namespace: cert-manager, name: agents-root-ca}
bundleTargets: [{kind: configmap, namespace: envoy-gateway-system, name: agents-client-ca}]
clients: {selector: dualca.io/client=agent}
leaderElection: {enabled: true}
`
	// F5 NGINX Ingress: a Secret of type nginx.org/ca holding ca.crt.
	bundleOnlyNginxCA = `
rootSecret: {namespace: cert-manager, name: agents-root-ca}
bundleTargets: [{kind: secret, namespace: nginx-ingress, name: agents-client-ca}]
bundleSecretType: nginx.org/ca
`
	// Istio's combined Secret, and the bundle for a second gateway in a
	// ConfigMap of another namespace.
	combinedAndAConfigMap = minimal + `
bundleTargets: [{kind: configmap, namespace: envoy-gateway-system, name: agents-client-ca}]
`
	// Istio's combined Secret, and the issuing Secret beside the root for
	// the clients' CA Issuer (--issuing-secret).
	combinedWithIssuing = minimal + `
issuingSecret: {name: agents-issuing-ca}
`
)

// targetShape is what a shape makes dualca do, and so what the chart must
// render for it.
type targetShape struct {
	values string
	// targetArgs are the target flags, in order, right after --root-secret.
	targetArgs []string
	// anchor names the rotation: the record, the status ConfigMap, the Lease.
	anchor types.NamespacedName
	// roles are the rules of dualca's Role in each namespace, exactly.
	roles map[string][]rbacv1.PolicyRule
	// creates are the Secrets and ConfigMaps (NAMESPACE/NAME) the admission
	// policy lets dualca create, exactly.
	secrets, configMaps []string
}

// releaseRulesOf are the release namespace's rules when the anchor is
// named anchor: its record and status, by name, and their creates.
func releaseRulesOf(anchor string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		secretsNamed(anchor+"-dualca-state", "get", "update"),
		configMapsNamed(anchor+"-dualca-status", "get", "list", "watch", "patch"),
		rule("", "configmaps", "create"),
		rule("", "secrets", "create"),
	}
}

// leaseRulesOf are the election namespace's rules for the Lease of anchor.
func leaseRulesOf(anchor types.NamespacedName) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"},
			ResourceNames: []string{syncer.LeaseName(anchor)}, Verbs: []string{"get", "update"}},
		rule("coordination.k8s.io", "leases", "create"),
		rule("", "events", "create", "patch"),
	}
}

var (
	gatewayAnchor = types.NamespacedName{Namespace: "istio-system", Name: "agents-gateway-credential"}
	envoyCA       = types.NamespacedName{Namespace: "envoy-gateway-system", Name: "agents-client-ca"}
	nginxCA       = types.NamespacedName{Namespace: "nginx-ingress", Name: "agents-client-ca"}
)

// targetShapes are the shapes the chart is tested in, by name.
var targetShapes = map[string]targetShape{
	"combined (Istio credentialName, the default)": {
		values:     minimal,
		targetArgs: []string{"--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=combined"},
		anchor:     gatewayAnchor,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager":   rules(rootRules, eventRules),
			"istio-system":   rules(gatewayRules, eventRules),
			releaseNamespace: releaseRulesOf("agents-gateway-credential"),
		},
		secrets:    []string{"istio-system/agents-gateway-credential", "dualca/agents-gateway-credential-dualca-state"},
		configMaps: []string{"dualca/agents-gateway-credential-dualca-status"},
	},
	"split (Istio's -cacert Secret)": {
		values:     splitForm,
		targetArgs: []string{"--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=split"},
		anchor:     gatewayAnchor,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager": rules(rootRules, eventRules),
			"istio-system": rules([]rbacv1.PolicyRule{
				named("secrets", []string{"agents-gateway-credential", "agents-gateway-credential-cacert"}, "get", "list", "watch", "update"),
				rule("", "secrets", "create"),
			}, eventRules),
			releaseNamespace: releaseRulesOf("agents-gateway-credential"),
		},
		secrets: []string{"istio-system/agents-gateway-credential", "istio-system/agents-gateway-credential-cacert",
			"dualca/agents-gateway-credential-dualca-state"},
		configMaps: []string{"dualca/agents-gateway-credential-dualca-status"},
	},
	"bundle-only, a ConfigMap (Gateway API frontend validation, Envoy Gateway), with clients and leader election": {
		values: bundleOnlyConfigMap,
		targetArgs: []string{"--bundle-targets=configmap:envoy-gateway-system/agents-client-ca", "--bundle-key=ca.crt",
			"--bundle-secret-type=Opaque"},
		anchor: envoyCA,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager": rules(rootRules, eventRules),
			"envoy-gateway-system": rules([]rbacv1.PolicyRule{
				named("configmaps", []string{"agents-client-ca"}, "get", "list", "watch", "update"),
				rule("", "configmaps", "create"),
			}, eventRules, clientRules, leaseRulesOf(envoyCA)),
			releaseNamespace: releaseRulesOf("agents-client-ca"),
		},
		secrets:    []string{"dualca/agents-client-ca-dualca-state"},
		configMaps: []string{"dualca/agents-client-ca-dualca-status", "envoy-gateway-system/agents-client-ca"},
	},
	"bundle-only, a Secret of type nginx.org/ca (F5 NGINX Ingress)": {
		values: bundleOnlyNginxCA,
		targetArgs: []string{"--bundle-targets=secret:nginx-ingress/agents-client-ca", "--bundle-key=ca.crt",
			"--bundle-secret-type=nginx.org/ca"},
		anchor: nginxCA,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager": rules(rootRules, eventRules),
			"nginx-ingress": rules([]rbacv1.PolicyRule{
				secretsNamed("agents-client-ca", "get", "list", "watch", "update"),
				rule("", "secrets", "create"),
			}, eventRules),
			releaseNamespace: releaseRulesOf("agents-client-ca"),
		},
		secrets:    []string{"nginx-ingress/agents-client-ca", "dualca/agents-client-ca-dualca-state"},
		configMaps: []string{"dualca/agents-client-ca-dualca-status"},
	},
	"combined, and a ConfigMap for another gateway (no events there: they go on the gateway Secret)": {
		values: combinedAndAConfigMap,
		targetArgs: []string{"--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=combined",
			"--bundle-targets=configmap:envoy-gateway-system/agents-client-ca", "--bundle-key=ca.crt", "--bundle-secret-type=Opaque"},
		anchor: gatewayAnchor,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager": rules(rootRules, eventRules),
			"istio-system": rules(gatewayRules, eventRules),
			"envoy-gateway-system": {
				named("configmaps", []string{"agents-client-ca"}, "get", "list", "watch", "update"),
				rule("", "configmaps", "create"),
			},
			releaseNamespace: releaseRulesOf("agents-gateway-credential"),
		},
		secrets:    []string{"istio-system/agents-gateway-credential", "dualca/agents-gateway-credential-dualca-state"},
		configMaps: []string{"dualca/agents-gateway-credential-dualca-status", "envoy-gateway-system/agents-client-ca"},
	},
	"combined, and an issuing Secret beside the root (its create pinned there by the admission policy)": {
		values: combinedWithIssuing,
		targetArgs: []string{"--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=combined",
			"--issuing-secret=cert-manager/agents-issuing-ca"},
		anchor: gatewayAnchor,
		roles: map[string][]rbacv1.PolicyRule{
			"cert-manager":   rules(rootRules, issuingRules, eventRules),
			"istio-system":   rules(gatewayRules, eventRules),
			releaseNamespace: releaseRulesOf("agents-gateway-credential"),
		},
		secrets: []string{"istio-system/agents-gateway-credential", "dualca/agents-gateway-credential-dualca-state",
			"cert-manager/agents-issuing-ca"},
		configMaps: []string{"dualca/agents-gateway-credential-dualca-status"},
	},
}

// issuingRules are the issuing Secret's rules in the root's namespace: read
// and written by name, created (the admission policy pins the name), never
// deleted.
var issuingRules = []rbacv1.PolicyRule{
	secretsNamed("agents-issuing-ca", "get", "list", "watch", "update"),
	rule("", "secrets", "create"),
}

// TestTheTargetShapes renders each shape and checks the flags (which
// dualca's own flag parser accepts, deriving the same anchor and the same
// names as the chart), the Roles rule by rule (each target by name, get,
// list, watch and update; the combined form's -cacert read only; create
// where a target is; events where dualca records them) and the admission
// policy, which lets dualca create exactly its targets, record and status.
// test/e2e/rbac_test.go runs dualca under these Roles.
func TestTheTargetShapes(t *testing.T) {
	t.Parallel()
	for name, shape := range targetShapes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			m, err := render(t, "", shape.values)
			g.Expect(err).NotTo(HaveOccurred())

			args := m.deployment(g).Spec.Template.Spec.Containers[0].Args
			g.Expect(args[0]).To(HavePrefix("--root-secret="))
			g.Expect(args[1 : 1+len(shape.targetArgs)]).To(Equal(shape.targetArgs))
			state := fmt.Sprintf("--state-secret=%s/%s-dualca-state", releaseNamespace, shape.anchor.Name)
			status := fmt.Sprintf("--status-configmap=%s/%s-dualca-status", releaseNamespace, shape.anchor.Name)
			g.Expect(args[1+len(shape.targetArgs) : 3+len(shape.targetArgs)]).To(Equal([]string{state, status}))
			o := parseArgs(g, args)
			g.Expect(o.Syncer().Anchor()).To(Equal(shape.anchor), "dualca names the rotation after the same object")
			// Without the chart's names, dualca derives the same ones from the
			// anchor (in the anchor's namespace; the chart puts them in the
			// release's, where only dualca's account writes).
			bare := parseArgs(g, slices.DeleteFunc(slices.Clone(args), func(a string) bool {
				return strings.HasPrefix(a, "--state-secret=") || strings.HasPrefix(a, "--status-configmap=")
			}))
			g.Expect(state).To(HaveSuffix("/" + bare.StateSecret.Name))
			g.Expect(status).To(HaveSuffix("/" + bare.StatusConfigMap.Name))
			if len(o.ClientNamespaces) > 0 {
				g.Expect(o.ClientNamespaces).To(Equal([]string{shape.anchor.Namespace}), "the clients default to the anchor's namespace, in the chart as in dualca")
			}

			roles := m.roleRules(g)
			g.Expect(roles).To(HaveLen(len(shape.roles)), "a Role in exactly the namespaces dualca works in: %v", keys(roles))
			for ns, want := range shape.roles {
				g.Expect(roles[ns]).To(ConsistOf(want), "the Role in %s", ns)
			}
			expectNoUnnamedReadOrWrite(g, roles)

			secrets, configMaps := creatable(g, m)
			g.Expect(secrets).To(ConsistOf(shape.secrets), "the Secrets dualca may create")
			g.Expect(configMaps).To(ConsistOf(shape.configMaps), "the ConfigMaps dualca may create")
		})
	}
}

// expectNoUnnamedReadOrWrite: no Role reads or writes a Secret or a
// ConfigMap but by name; create, which RBAC cannot name, is the admission
// policy's to pin.
func expectNoUnnamedReadOrWrite(g *WithT, roles map[string][]rbacv1.PolicyRule) {
	for ns, rs := range roles {
		for _, r := range rs {
			for _, resource := range []string{"secrets", "configmaps"} {
				if grants(r, "", resource, "get", "list", "watch", "update", "patch") {
					g.Expect(r.ResourceNames).NotTo(BeEmpty(), "%s: %s read or written without a name: %+v", ns, resource, r)
				}
			}
		}
	}
}

// namedTerm is one (namespace, name) term of the admission policy's create rules.
var namedTerm = regexp.MustCompile(`\(request\.namespace == "([^"]*)" && object\.metadata\.name == "([^"]*)"\)`)

// creatable reads the admission policy's create rules: the Secrets and the
// ConfigMaps (NAMESPACE/NAME) dualca's ServiceAccount may create.
func creatable(g *WithT, m manifest) (secrets, configMaps []string) {
	policies := all[admissionregistrationv1.ValidatingAdmissionPolicy](g, m, "ValidatingAdmissionPolicy")
	g.Expect(policies).To(HaveLen(1))
	for _, v := range policies[0].Spec.Validations {
		expr := strings.Join(strings.Fields(v.Expression), " ")
		var into *[]string
		kind := ""
		switch {
		case strings.HasPrefix(expr, `request.operation != "CREATE" || request.resource.resource != "secrets" || (request.namespace == `):
			into, kind = &secrets, "secrets"
		case strings.HasPrefix(expr, `request.operation != "CREATE" || request.resource.resource != "configmaps" || (request.namespace == `):
			into, kind = &configMaps, "configmaps"
		default:
			continue
		}
		g.Expect(*into).To(BeEmpty(), "one create rule per kind")
		for _, term := range namedTerm.FindAllStringSubmatch(expr, -1) {
			*into = append(*into, term[1]+"/"+term[2])
		}
		g.Expect(*into).NotTo(BeEmpty())
		// Nothing but the terms, joined by ||: no other way through.
		g.Expect(namedTerm.ReplaceAllString(expr, "T")).To(Equal(fmt.Sprintf(`request.operation != "CREATE" || request.resource.resource != %q || %s`,
			kind, strings.Repeat("T || ", len(*into)-1)+"T")))
		g.Expect(v.Message).To(ContainSubstring(strings.Join(*into, ", ")))
	}
	return secrets, configMaps
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestTheChartRefusesWhatDualcaRefuses: each target combination dualca's
// flags refuse, the chart refuses too, before anything is applied, with a
// message naming the values (the schema's for a type or a form, the
// render's, in dualca's words, for the rest). Each case runs both: the
// render of the values, and dualca's flag parser on the flags they stand
// for.
func TestTheChartRefusesWhatDualcaRefuses(t *testing.T) {
	t.Parallel()
	root := "rootSecret: {namespace: cert-manager, name: agents-root-ca}\n"
	tests := map[string]struct {
		values, wantErr string
		// args are the flags the values stand for, and dualcaErr what
		// dualca says of them; none when the chart cannot even say them.
		args      []string
		dualcaErr string
	}{
		"neither a gateway Secret nor a bundle target": {
			values: root, wantErr: "set gatewaySecret (namespace and name) or at least one of bundleTargets",
			args: []string{"--root-secret=cert-manager/agents-root-ca"}, dualcaErr: "--gateway-secret is required",
		},
		"a gateway Secret without its namespace": {
			values: root + "gatewaySecret: {name: gw}\n", wantErr: "/gatewaySecret/namespace",
		},
		"a gateway namespace without its Secret": {
			values: root + "gatewaySecret: {namespace: istio-system}\n", wantErr: "/gatewaySecret/name",
		},
		"an unknown gateway form": {
			values: minimal + "gatewaySecret: {namespace: istio-system, name: gw, form: merged}\n", wantErr: "/gatewaySecret/form",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/gw", "--gateway-form=merged"}, dualcaErr: `--gateway-form="merged"`,
		},
		"an unknown bundle target kind": {
			values: root + "bundleTargets: [{kind: persistentvolumeclaim, namespace: a, name: b}]\n", wantErr: "/bundleTargets/0/kind",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=persistentvolumeclaim:a/b"}, dualcaErr: "--bundle-targets",
		},
		"a bundle target without a namespace": {
			values: root + "bundleTargets: [{kind: secret, name: b}]\n", wantErr: "/bundleTargets/0",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:b"}, dualcaErr: "--bundle-targets",
		},
		"a bundle target named twice": {
			values: root + "bundleTargets: [{kind: secret, namespace: a, name: b}, {kind: secret, namespace: a, name: b}]\n", wantErr: "/bundleTargets",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:a/b,secret:a/b"}, dualcaErr: "names secret:a/b twice",
		},
		"a bundle target that is the root": {
			values:  root + "bundleTargets: [{kind: secret, namespace: cert-manager, name: agents-root-ca}]\n",
			wantErr: "bundleTargets: secret:cert-manager/agents-root-ca is rootSecret: dualca writes only the bundle there",
			args:    []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:cert-manager/agents-root-ca"}, dualcaErr: "is --root-secret",
		},
		"a bundle target that is the record": {
			values:  minimal + "bundleTargets: [{kind: secret, namespace: dualca, name: agents-gateway-credential-dualca-state}]\n",
			wantErr: "bundleTargets: secret:dualca/agents-gateway-credential-dualca-state is the state Secret (stateSecret)",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--state-secret=dualca/agents-gateway-credential-dualca-state", "--bundle-targets=secret:dualca/agents-gateway-credential-dualca-state"},
			dualcaErr: "is --state-secret",
		},
		"a bundle target that is the gateway Secret": {
			values:  minimal + "bundleTargets: [{kind: secret, namespace: istio-system, name: agents-gateway-credential}]\n",
			wantErr: "bundleTargets: secret:istio-system/agents-gateway-credential is gatewaySecret",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--bundle-targets=secret:istio-system/agents-gateway-credential"},
			dualcaErr: "is --gateway-secret",
		},
		"a bundle target that is the split form's -cacert Secret": {
			values:  splitForm + "bundleTargets: [{kind: secret, namespace: istio-system, name: agents-gateway-credential-cacert}]\n",
			wantErr: "bundleTargets: secret:istio-system/agents-gateway-credential-cacert is the split form's -cacert Secret",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=split",
				"--bundle-targets=secret:istio-system/agents-gateway-credential-cacert"},
			dualcaErr: "is the split form's -cacert Secret",
		},
		"a bundle target that is the combined form's shadow": {
			values:  minimal + "bundleTargets: [{kind: secret, namespace: istio-system, name: agents-gateway-credential-cacert}]\n",
			wantErr: "bundleTargets: secret:istio-system/agents-gateway-credential-cacert is the Secret Istio would prefer to the combined gateway Secret's bundle",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--bundle-targets=secret:istio-system/agents-gateway-credential-cacert"},
			dualcaErr: "is the Secret Istio would prefer to the combined gateway Secret's bundle",
		},
		"a bundle ConfigMap that is the status ConfigMap": {
			values:  minimal + "statusConfigMap: {name: status}\nbundleTargets: [{kind: configmap, namespace: dualca, name: status}]\n",
			wantErr: "bundleTargets: configmap:dualca/status is the status ConfigMap (statusConfigMap)",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--status-configmap=dualca/status", "--bundle-targets=configmap:dualca/status"},
			dualcaErr: "is --status-configmap",
		},
		"the split form's -cacert Secret that is the root": {
			values:  "rootSecret: {namespace: istio-system, name: gw-cacert}\ngatewaySecret: {namespace: istio-system, name: gw, form: split}\n",
			wantErr: "gatewaySecret.form=split writes the bundle to istio-system/gw-cacert, which is rootSecret",
			args:    []string{"--root-secret=istio-system/gw-cacert", "--gateway-secret=istio-system/gw", "--gateway-form=split"}, dualcaErr: "which is --root-secret",
		},
		"a kubernetes.io/tls bundle Secret": {
			values:  bundleOnlyNginxCA + "bundleSecretType: kubernetes.io/tls\n",
			wantErr: `bundleSecretType="kubernetes.io/tls": the API server requires keys of that type that a bundle target does not hold`,
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:nginx-ingress/agents-client-ca",
				"--bundle-secret-type=kubernetes.io/tls"},
			dualcaErr: `--bundle-secret-type="kubernetes.io/tls"`,
		},
		"a bundle Secret type that is no qualified name": {
			values: bundleOnlyNginxCA + "bundleSecretType: nginx.org/ca/v2\n", wantErr: "/bundleSecretType",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:nginx-ingress/agents-client-ca",
				"--bundle-secret-type=nginx.org/ca/v2"},
			dualcaErr: "--bundle-secret-type",
		},
		"a bundle key with a slash": {
			values: bundleOnlyNginxCA + "bundleKey: ca/crt\n", wantErr: "/bundleKey",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:nginx-ingress/agents-client-ca", "--bundle-key=ca/crt"}, dualcaErr: "--bundle-key",
		},
		"an issuing Secret that is the root": {
			values:  minimal + "issuingSecret: {name: agents-root-ca}\n",
			wantErr: "issuingSecret.name: cert-manager/agents-root-ca is rootSecret: the issuing Secret holds the root's credential and nothing else",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--issuing-secret=cert-manager/agents-root-ca"},
			dualcaErr: "--issuing-secret=cert-manager/agents-root-ca is --root-secret",
		},
		"an issuing Secret that is the gateway Secret, beside the root": {
			values:  oneNamespace + "issuingSecret: {name: agents-gateway-credential}\n",
			wantErr: "issuingSecret.name: istio-system/agents-gateway-credential is gatewaySecret",
			args: []string{"--root-secret=istio-system/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--issuing-secret=istio-system/agents-gateway-credential"},
			dualcaErr: "is --gateway-secret",
		},
		"an issuing Secret that is the combined form's shadow, beside the root": {
			values:  oneNamespace + "issuingSecret: {name: agents-gateway-credential-cacert}\n",
			wantErr: "issuingSecret.name: istio-system/agents-gateway-credential-cacert is the Secret Istio would prefer to the combined gateway Secret's bundle",
			args: []string{"--root-secret=istio-system/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--issuing-secret=istio-system/agents-gateway-credential-cacert"},
			dualcaErr: "is the Secret Istio would prefer to the combined gateway Secret's bundle",
		},
		"an issuing Secret that is the split form's -cacert Secret, beside the root": {
			values:  oneNamespace + "gatewaySecret: {namespace: istio-system, name: agents-gateway-credential, form: split}\nissuingSecret: {name: agents-gateway-credential-cacert}\n",
			wantErr: "issuingSecret.name: istio-system/agents-gateway-credential-cacert is the split form's -cacert Secret",
			args: []string{"--root-secret=istio-system/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential", "--gateway-form=split",
				"--issuing-secret=istio-system/agents-gateway-credential-cacert"},
			dualcaErr: "is the split form's -cacert Secret",
		},
		"an issuing Secret that is the record, the root in the release namespace": {
			values: "rootSecret: {namespace: dualca, name: agents-root-ca}\ngatewaySecret: {namespace: istio-system, name: gw}\nserver: {withoutNames: true}\n" +
				"stateSecret: {name: record}\nissuingSecret: {name: record}\n",
			wantErr: "issuingSecret.name: dualca/record is the state Secret (stateSecret)",
			args: []string{"--root-secret=dualca/agents-root-ca", "--gateway-secret=istio-system/gw", "--state-secret=dualca/record",
				"--issuing-secret=dualca/record"},
			dualcaErr: "is --state-secret",
		},
		"a bundle target that is the issuing Secret": {
			values:  minimal + "issuingSecret: {name: agents-issuing-ca}\nbundleTargets: [{kind: secret, namespace: cert-manager, name: agents-issuing-ca}]\n",
			wantErr: "bundleTargets: secret:cert-manager/agents-issuing-ca is the issuing Secret (issuingSecret): dualca writes only the bundle there",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--issuing-secret=cert-manager/agents-issuing-ca", "--bundle-targets=secret:cert-manager/agents-issuing-ca"},
			dualcaErr: "is --issuing-secret",
		},
		"an issuing Secret that is no DNS-1123 subdomain": {
			values: minimal + "issuingSecret: {name: Issuing_CA}\n", wantErr: "/issuingSecret/name",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--gateway-secret=istio-system/agents-gateway-credential",
				"--issuing-secret=cert-manager/Issuing_CA"},
			dualcaErr: "--issuing-secret",
		},
		"a bundle key of two dots": {
			values: bundleOnlyNginxCA + "bundleKey: ..\n", wantErr: "/bundleKey",
			args: []string{"--root-secret=cert-manager/agents-root-ca", "--bundle-targets=secret:nginx-ingress/agents-client-ca", "--bundle-key=.."}, dualcaErr: "--bundle-key",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			_, err := render(t, "", tc.values)
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			if tc.args != nil {
				parseMu.Lock()
				defer parseMu.Unlock()
				_, err := flags.Parse("dualca", tc.args)
				g.Expect(err).To(MatchError(ContainSubstring(tc.dualcaErr)), "dualca refuses the same")
			}
		})
	}
}

// TestTheLeaseNameIsDualcasForABundleTarget: without a gateway Secret the
// Lease is named after the first bundle target, as dualca names it.
func TestTheLeaseNameIsDualcasForABundleTarget(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	for name, anchor := range map[string]types.NamespacedName{
		"short":                      envoyCA,
		"too long: cut, with a hash": {Namespace: strings.Repeat("n", 63), Name: long},
	} {
		for _, kind := range []string{syncer.KindConfigMap, syncer.KindSecret} {
			t.Run(name+", "+kind, func(t *testing.T) {
				t.Parallel()
				g := NewWithT(t)
				m, err := render(t, "", fmt.Sprintf("rootSecret: {namespace: cert-manager, name: root}\n"+
					"bundleTargets: [{kind: %s, namespace: %s, name: %q}, {kind: secret, namespace: other, name: second}]\n"+
					"leaderElection: {enabled: true}\nstateSecret: {name: state}\nstatusConfigMap: {name: status}\n", kind, anchor.Namespace, anchor.Name))
				g.Expect(err).NotTo(HaveOccurred())
				var leases []string
				for _, r := range m.roleRules(g)[anchor.Namespace] {
					if slices.Contains(r.Resources, "leases") && len(r.ResourceNames) > 0 {
						leases = append(leases, r.ResourceNames...)
					}
				}
				g.Expect(leases).To(ConsistOf(syncer.LeaseName(anchor)))
				o := parseArgs(g, m.deployment(g).Spec.Template.Spec.Containers[0].Args)
				g.Expect(o.Syncer().Anchor()).To(Equal(anchor))
			})
		}
	}
}

// TestTheNotesNameTheTargetsAndTheStatusCommand: NOTES.txt says what dualca
// writes, and prints a `dualca status` that works for every shape (the
// status ConfigMap, which the operator Role reads) and where the events
// are.
func TestTheNotesNameTheTargetsAndTheStatusCommand(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		values string
		want   []string
	}{
		"split": {values: splitForm, want: []string{
			"the gateway Secret istio-system/agents-gateway-credential (split form, the bundle in istio-system/agents-gateway-credential-cacert)",
			"dualca status --status-configmap dualca/agents-gateway-credential-dualca-status",
			"kubectl -n istio-system get events --field-selector involvedObject.name=agents-gateway-credential",
		}},
		"bundle-only": {values: bundleOnlyConfigMap, want: []string{
			"the bundle targets configmap:envoy-gateway-system/agents-client-ca (ca.crt)",
			"dualca status --status-configmap dualca/agents-client-ca-dualca-status",
			"kubectl -n envoy-gateway-system get events --field-selector involvedObject.name=agents-client-ca",
		}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := controlplane.Helm(t, "install", "dualca", chartDir(t), "--dry-run=client", "--namespace", releaseNamespace, "-f", valuesFile(t, tc.values))
			g := NewWithT(t)
			g.Expect(err).NotTo(HaveOccurred())
			_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
			g.Expect(ok).To(BeTrue(), "helm prints the notes")
			for _, w := range tc.want {
				g.Expect(notes).To(ContainSubstring(w))
			}
		})
	}
}
