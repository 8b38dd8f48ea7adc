// Package chart checks the Helm chart in charts/dualca with the helm that
// `make helm` builds into bin/ ($HELM overrides it): lint, the objects
// rendered for several value sets, the values schema, the sidecar
// template, a server-side dry run of everything against a real API server,
// and an install, upgrades and an uninstall there with helm.
package chart

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// releaseNamespace is where every test installs the chart.
const releaseNamespace = "dualca"

// chartDir is the chart's directory.
func chartDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca")
}

// valuesFile writes values (YAML) to a file for -f. Not under t.TempDir:
// helm splits -f at commas, and test names hold some.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	f, err := os.CreateTemp("", "dualca-values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	if _, err := f.WriteString(values); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// render runs helm template on chart (the dualca chart when empty) with
// values, as release "dualca" in releaseNamespace.
func render(t *testing.T, chart, values string) (manifest, error) {
	t.Helper()
	if chart == "" {
		chart = chartDir(t)
	}
	out, err := controlplane.Helm(t, "template", "dualca", chart, "--namespace", releaseNamespace, "-f", valuesFile(t, values))
	if err != nil {
		return nil, err
	}
	return parse(out)
}

// manifest is a rendered YAML stream, one object per document.
type manifest []*unstructured.Unstructured

func parse(stream []byte) (manifest, error) {
	var m manifest
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var obj map[string]any
		err := d.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj) > 0 { // not a document of comments only
			m = append(m, &unstructured.Unstructured{Object: obj})
		}
	}
}

// kinds lists "Kind namespace/name" of every object.
func (m manifest) kinds() []string {
	out := make([]string, 0, len(m))
	for _, o := range m {
		out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	return out
}

// all converts every object of kind to T.
func all[T any](g Gomega, m manifest, kind string) []*T {
	var out []*T
	for _, o := range m {
		if o.GetKind() != kind {
			continue
		}
		t := new(T)
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, t, true)).To(Succeed(),
			"%s %s is a valid %s", kind, o.GetName(), kind)
		out = append(out, t)
	}
	return out
}

// roleRules are the rules of each of dualca's Roles, by namespace (the
// operator's Role, see operatorRole, apart).
func (m manifest) roleRules(g Gomega) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	for _, r := range all[rbacv1.Role](g, m, "Role") {
		if strings.HasSuffix(r.Name, "-operator") {
			continue
		}
		g.Expect(out).NotTo(HaveKey(r.Namespace), "one Role per namespace")
		out[r.Namespace] = r.Rules
	}
	return out
}

// operatorRole is the operator's Role, nil when there is none.
func (m manifest) operatorRole(g Gomega) *rbacv1.Role {
	for _, r := range all[rbacv1.Role](g, m, "Role") {
		if strings.HasSuffix(r.Name, "-operator") {
			return r
		}
	}
	return nil
}

// deployment is the one Deployment.
func (m manifest) deployment(g Gomega) *appsv1.Deployment {
	ds := all[appsv1.Deployment](g, m, "Deployment")
	g.Expect(ds).To(HaveLen(1))
	return ds[0]
}
