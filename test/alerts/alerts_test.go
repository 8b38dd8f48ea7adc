// Package alerts tests the alerts the Helm chart ships: the PrometheusRule
// that helm renders from charts/dualca is checked with `promtool check rules`
// and unit-tested with `promtool test rules` against the tests in
// charts/dualca/tests, each alert shown firing and shown quiet; and its
// thresholds are shown to come from the values. helm and promtool are the
// ones `make helm promtool` builds into bin/; $HELM and $PROMTOOL override
// them.
package alerts

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/promserver"
)

// rulesFile is the name the rule tests give in rule_files: the rendered
// rules are written under it beside a copy of each test file.
const rulesFile = "dualca.rules.yaml"

// testValues are the release and values the tests in charts/dualca/tests
// expect in the alerts' selectors and annotations (their header says so).
var testValues = []string{
	"--namespace", "istio-system",
	"--set", "prometheusRule.enabled=true",
	"--set", "rootSecret.namespace=cert-manager",
	"--set", "rootSecret.name=agents-root-ca",
	"--set", "gatewaySecret.namespace=istio-system",
	"--set", "gatewaySecret.name=agents-gateway", "--set", "server.dnsNames={gateway.agents.example.com}",
}

// prometheusRule is the part of the rendered PrometheusRule the tests read.
type prometheusRule struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []rule `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type rule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alerts returns the alerting rules by name.
func (p prometheusRule) alerts() map[string]rule {
	byName := map[string]rule{}
	for _, g := range p.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				byName[r.Alert] = r
			}
		}
	}
	return byName
}

// ruleTestFile is the part of a promtool rule test file the tests read.
type ruleTestFile struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name           string `json:"name"`
		AlertRuleTests []struct {
			EvalTime  string `json:"eval_time"`
			Alertname string `json:"alertname"`
			ExpAlerts []struct {
				ExpLabels map[string]string `json:"exp_labels"`
			} `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// run runs a command and returns its standard output; on failure the error
// carries its standard error too.
func run(cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), errors.New(err.Error() + ": " + stdout.String() + stderr.String())
	}
	return stdout.Bytes(), nil
}

// helmTemplate renders the chart as release with args added, and returns
// the rendered documents.
func helmTemplate(t *testing.T, release string, args ...string) ([][]byte, error) {
	t.Helper()
	out, err := controlplane.Helm(t, append([]string{"template", release, filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca")}, args...)...)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			t.Fatalf("reading helm's output: %v", err)
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// render renders the chart as release with args and returns its
// PrometheusRule and the rule file promtool reads: the PrometheusRule's
// groups, exactly as rendered.
func render(t *testing.T, release string, args ...string) (prometheusRule, []byte) {
	t.Helper()
	docs, err := helmTemplate(t, release, args...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	var found []prometheusRule
	var file []byte
	for _, doc := range docs {
		var pr prometheusRule
		if err := yaml.Unmarshal(doc, &pr); err != nil {
			t.Fatalf("parsing a rendered object: %v\n%s", err, doc)
		}
		if pr.Kind != "PrometheusRule" {
			continue
		}
		if file, err = promserver.RuleFile(doc); err != nil {
			t.Fatal(err)
		}
		found = append(found, pr)
	}
	if len(found) != 1 {
		t.Fatalf("want one PrometheusRule rendered, got %d", len(found))
	}
	return found[0], file
}

// promtool runs promtool with args in dir.
func promtool(t *testing.T, dir string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(controlplane.Tool(t, "promtool", "PROMTOOL"), args...)
	cmd.Dir = dir
	return run(cmd)
}

// ruleTests returns the promtool rule test files of the chart.
func ruleTests(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca", "tests", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no rule tests in charts/dualca/tests")
	}
	return files
}

func TestRenderedRulesPassPromtool(t *testing.T) {
	_, rules := render(t, "dualca", testValues...)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, rulesFile), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := promtool(t, dir, "check", "rules", rulesFile); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, rules)
	}
	t.Run("test rules", func(t *testing.T) {
		for _, path := range ruleTests(t) {
			name := filepath.Base(path)
			t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
				t.Parallel()
				test, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, name), test, 0o600); err != nil {
					t.Fatal(err)
				}
				if out, err := promtool(t, dir, "test", "rules", name); err != nil {
					t.Errorf("promtool test rules %s: %v", name, err)
				} else {
					t.Logf("%s", out)
				}
			})
		}
	})
}

// A test expecting no alert passes for an alert that does not exist, or
// that never fires: every alert must be shown firing somewhere too.
func TestEveryAlertIsTestedFiringAndQuiet(t *testing.T) {
	pr, _ := render(t, "dualca", testValues...)
	alerts := pr.alerts()
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, path := range ruleTests(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var f ruleTestFile
		if err := yaml.Unmarshal(data, &f); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !slices.Equal(f.RuleFiles, []string{rulesFile}) {
			t.Errorf("%s: rule_files is %q, want [%s]: test/alerts writes the rendered rules there", path, f.RuleFiles, rulesFile)
		}
		for _, group := range f.Tests {
			for _, c := range group.AlertRuleTests {
				if _, ok := alerts[c.Alertname]; !ok {
					t.Errorf("%s: %q at %s tests %s, which the chart does not render", path, group.Name, c.EvalTime, c.Alertname)
				}
				if len(c.ExpAlerts) > 0 {
					fires[c.Alertname] = true
				} else {
					quiet[c.Alertname] = true
				}
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("the PrometheusRule holds no alert")
	}
	for name := range alerts {
		if !fires[name] {
			t.Errorf("%s is never shown firing in charts/dualca/tests", name)
		}
		if !quiet[name] {
			t.Errorf("%s is never shown quiet in charts/dualca/tests", name)
		}
	}
}

func TestThresholdsComeFromValues(t *testing.T) {
	tests := map[string]struct {
		set   []string // helm flags; --set-json keeps numbers numbers, as in values.yaml
		alert string
		// In the alert's expr, or equal to its for when inFor.
		want  string
		inFor bool
	}{
		"the rotation lag threshold is prometheusRule.rotationLagSeconds": {
			set: []string{"--set", "prometheusRule.rotationLagSeconds=1234"}, alert: "DualcaRotationLag", want: "} > 1234",
		},
		"a stalled renewal waits prometheusRule.renewalStalledMinutes": {
			set: []string{"--set-json", "prometheusRule.renewalStalledMinutes=45"}, alert: "DualcaClientRenewalStalled", want: "45m", inFor: true,
		},
		"a fraction of a minute becomes seconds": {
			set: []string{"--set-json", "prometheusRule.renewalStalledMinutes=2.5"}, alert: "DualcaClientRenewalStalled", want: "150s", inFor: true,
		},
		"the server certificate alert looks prometheusRule.serverCertificateExpiryDays ahead": {
			set: []string{"--set-json", "prometheusRule.serverCertificateExpiryDays=21"}, alert: "DualcaServerCertificateExpiringSoon", want: "< 21 * 86400",
		},
		"the current root alert looks prometheusRule.rootExpiryDays ahead": {
			set: []string{"--set-json", "prometheusRule.rootExpiryDays=30"}, alert: "DualcaRootExpiringSoon", want: "< 30 * 86400",
		},
		"the old root alert looks prometheusRule.oldRootNeededExpiryDays ahead": {
			set: []string{"--set-json", "prometheusRule.oldRootNeededExpiryDays=1.5"}, alert: "DualcaOldRootStillNeededNearExpiry", want: "< 1.5 * 86400",
		},
		"an invalid root waits prometheusRule.invalidRootMinutes": {
			set: []string{"--set-json", "prometheusRule.invalidRootMinutes=12"}, alert: "DualcaRootInvalid", want: "12m", inFor: true,
		},
		"the reconcile error window is prometheusRule.reconcileErrorsMinutes": {
			set: []string{"--set-json", "prometheusRule.reconcileErrorsMinutes=20"}, alert: "DualcaReconcileErrors", want: `controller="dualca"}[20m]) > 0`,
		},
		"the last sync must be within prometheusRule.reconcileErrorsMinutes": {
			set: []string{"--set-json", "prometheusRule.reconcileErrorsMinutes=20"}, alert: "DualcaReconcileErrors", want: "dualca_last_sync_timestamp_seconds{job=\"dualca\", namespace=\"istio-system\"} < 1200)",
		},
		"absence waits prometheusRule.absentMinutes": {
			set: []string{"--set-json", "prometheusRule.absentMinutes=3"}, alert: "DualcaAbsent", want: "3m", inFor: true,
		},
	}
	defaults, _ := render(t, "dualca", testValues...)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pr, rules := render(t, "dualca", append(slices.Clone(testValues), tc.set...)...)
			changed, ok := pr.alerts()[tc.alert]
			if !ok {
				t.Fatalf("%s is not rendered", tc.alert)
			}
			got, was := changed.Expr, defaults.alerts()[tc.alert].Expr
			if tc.inFor {
				got, was = changed.For, defaults.alerts()[tc.alert].For
			}
			if tc.inFor && got != tc.want || !tc.inFor && !strings.Contains(got, tc.want) {
				t.Errorf("with %q, %s has\n%s\nwant %q", tc.set, tc.alert, got, tc.want)
			}
			if was == got {
				t.Errorf("with %q, %s is the same as with the default values:\n%s", tc.set, tc.alert, got)
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, rulesFile), rules, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := promtool(t, dir, "check", "rules", rulesFile); err != nil {
				t.Errorf("promtool check rules with %q: %v\n%s", tc.set, err, rules)
			}
		})
	}
}

func TestRulesWatchTheirOwnRelease(t *testing.T) {
	pr, _ := render(t, "edge", "--namespace", "gateways", "--set", "prometheusRule.enabled=true",
		"--set", "rootSecret.namespace=cert-manager", "--set", "rootSecret.name=edge-root",
		"--set", "gatewaySecret.namespace=gateways", "--set", "gatewaySecret.name=edge-gateway", "--set", "server.dnsNames={gateway.agents.example.com}",
		"--set", "prometheusRule.labels.release=kube-prometheus-stack")
	if pr.Metadata.Name != "edge-dualca" || pr.Metadata.Namespace != "gateways" {
		t.Errorf("PrometheusRule %s/%s, want gateways/edge-dualca", pr.Metadata.Namespace, pr.Metadata.Name)
	}
	if pr.Metadata.Labels["release"] != "kube-prometheus-stack" || pr.Metadata.Labels["app.kubernetes.io/instance"] != "edge" {
		t.Errorf("labels %v: want prometheusRule.labels and the chart's labels", pr.Metadata.Labels)
	}
	// The Service, and so the scrape job, is named after the release.
	const sel = `{job="edge-dualca", namespace="gateways"`
	for name, r := range pr.alerts() {
		if !strings.Contains(r.Expr, sel) {
			t.Errorf("%s does not select %s}:\n%s", name, sel, r.Expr)
		}
		if strings.Contains(r.Expr, `job="dualca"`) {
			t.Errorf("%s selects the default job:\n%s", name, r.Expr)
		}
		if !strings.Contains(r.Annotations["description"], "gateways/edge-gateway") {
			t.Errorf("%s's description does not name the gateway Secret: %s", name, r.Annotations["description"])
		}
	}
}

// TestRulesFollowTheScrapeJobOfASidecar: with dualca as a sidecar the
// including chart names the scrape job; the rules select what they are told.
func TestRulesFollowTheScrapeJobOfASidecar(t *testing.T) {
	pr, _ := render(t, "edge", "--namespace", "gateways", "--set", "prometheusRule.enabled=true",
		"--set", "deployment.enabled=false", "--set", "leaderElection.enabled=true", "--set", "prometheusRule.job=istio-ingressgateway",
		"--set", "prometheusRule.namespace=istio-system",
		"--set", "rootSecret.namespace=cert-manager", "--set", "rootSecret.name=edge-root",
		"--set", "gatewaySecret.namespace=istio-system", "--set", "gatewaySecret.name=edge-gateway", "--set", "server.dnsNames={gateway.agents.example.com}")
	const sel = `{job="istio-ingressgateway", namespace="istio-system"`
	alerts := pr.alerts()
	if len(alerts) == 0 {
		t.Fatal("no alert rendered")
	}
	for name, r := range alerts {
		if !strings.Contains(r.Expr, sel) {
			t.Errorf("%s does not select %s}:\n%s", name, sel, r.Expr)
		}
	}
}

func TestNoRuleUnlessEnabled(t *testing.T) {
	base := []string{
		"--set", "rootSecret.namespace=cert-manager", "--set", "rootSecret.name=agents-root-ca",
		"--set", "gatewaySecret.namespace=istio-system", "--set", "gatewaySecret.name=agents-gateway", "--set", "server.dnsNames={gateway.agents.example.com}",
	}
	docs, err := helmTemplate(t, "dualca", base...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	if len(docs) == 0 {
		t.Fatal("nothing rendered with the default values")
	}
	for _, doc := range docs {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind == "PrometheusRule" {
			t.Errorf("a PrometheusRule is rendered with prometheusRule.enabled=false:\n%s", doc)
		}
	}

	// With metrics off every alert would read nothing and DualcaAbsent fire.
	_, err = helmTemplate(t, "dualca", append(base, "--set", "prometheusRule.enabled=true", "--set", "metrics.port=0")...)
	if err == nil || !strings.Contains(err.Error(), "prometheusRule.enabled needs metrics.port") {
		t.Errorf("prometheusRule.enabled with metrics.port=0: want the render to fail naming metrics.port, got %v", err)
	}
}
