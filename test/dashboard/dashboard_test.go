package dashboard

import (
	"context"
	"crypto/x509"
	"flag"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/promserver"
	"github.com/dualca/dualca/test/lib/run"
)

var seriesPath = flag.String("dashboard.series", "", "write the series the dashboard's main panels showed (JSON) to this file, for test/programs/figures to draw")

const (
	ns          = "agents"
	rootName    = "root-ca"
	issuerName  = "agents-ca"
	gatewayName = "gateway-credential"
	clientLabel = "dualca.io/client"
	// clients is the size of the fleet that the rotation renews.
	clients = 8
	// job is the scrape job: the chart's fullname for release "dualca",
	// which the rendered rules select.
	job = "dualca"
	// lagThreshold is prometheusRule.rotationLagSeconds for the test.
	lagThreshold = 3
	// scrape is Prometheus' scrape and rule evaluation interval.
	scrape = time.Second
)

// results are one target's answers: at a moment during the rotation
// (Renewing), after it (Steady), and over the whole test at every scrape.
type results struct {
	during, after model.Vector
	series        model.Matrix
}

// panelResults are a panel's results by refId.
type panelResults map[string]results

func TestEveryPanelShowsARotationFromARealPrometheus(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(60 * time.Second)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	ctx := t.Context()
	dash := loadDashboard(t)
	checkModel(t, dash)

	// Built while the control plane starts; StartProcess waits for it.
	go func() { _, _ = run.Binary() }()
	c := cluster.StartT(t, cluster.Options{})
	g.Expect(c.CreateNamespace(ctx, ns)).To(Succeed())
	_, err := c.CreateRootCA(ctx, ns, rootName)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.CreateCAIssuer(ctx, ns, issuerName, rootName)).To(Succeed())
	_, err = c.CreateClients(ctx, ns, issuerName, "agent", clients, map[string]string{clientLabel: "agent"})
	g.Expect(err).NotTo(HaveOccurred())

	metricsAddr, err := controlplane.FreeAddress()
	g.Expect(err).NotTo(HaveOccurred())
	prom := promserver.Start(t, promserver.Options{
		Interval:  scrape,
		Targets:   []promserver.Target{{Job: job, Addr: metricsAddr, Labels: map[string]string{"namespace": ns, "pod": "dualca-0"}}},
		RuleFiles: map[string][]byte{"dualca.rules.yaml": renderRules(t)},
	})
	start := time.Now()
	run.StartProcess(t, c.Kubeconfig,
		"--root-secret="+ns+"/"+rootName, "--gateway-secret="+ns+"/"+gatewayName, "--server-ip-addresses=127.0.0.1",
		"--client-selector="+clientLabel+"=agent", "--client-namespaces="+ns,
		"--metrics-bind-address="+metricsAddr, "--poll-interval=3s",
		"--trust-propagation-delay=3s", "--server-switch-grace=10m", "--renewal-qps=20", "--renewal-burst=5")
	g.Eventually(func() (model.Vector, error) {
		return instant(ctx, prom, `dualca_phase{job="dualca", phase="Steady"} == 1`, time.Now())
	}).ShouldNot(BeEmpty(), "Prometheus scrapes dualca, steady on the first root")

	// dualca held behind: the new root is read, the gateway may not be
	// written, and the lag grows past the alert's threshold.
	release := holdGatewayWrites(ctx, g, c)
	r2, err := c.RotateRoot(ctx, ns, rootName)
	g.Expect(err).NotTo(HaveOccurred())
	fired := waitAlert(ctx, g, prom, promv1.AlertStateFiring)
	t.Logf("DualcaRotationLag %s since %s, value %s: %s (runbook %s)", fired.State, fired.ActiveAt.Format(time.RFC3339),
		fired.Value, fired.Annotations["summary"], fired.Annotations["runbook_url"])
	g.Expect(strconv.ParseFloat(fired.Value, 64)).To(BeNumerically(">", lagThreshold))
	g.Expect(string(fired.Annotations["runbook_url"])).To(HaveSuffix("#dualcarotationlag"))
	release()
	waitAlert(ctx, g, prom, "")
	t.Logf("DualcaRotationLag resolved at %s, once dualca could write the gateway Secret", time.Now().UTC().Format(time.RFC3339))

	// The rotation then runs its course, and Prometheus sees the end.
	rotated(ctx, g, c, prom, r2, scrape)

	// A second rotation, not held: the one whose panels are checked. The
	// counters that the first rotation of a process creates (renewals by
	// result) exist by then, so their rates see every increment.
	second := time.Now()
	r3, err := c.RotateRoot(ctx, ns, rootName)
	g.Expect(err).NotTo(HaveOccurred())
	rotated(ctx, g, c, prom, r3, 3*scrape)
	end := time.Now()
	during := momentOf(ctx, g, prom, `dualca_phase{phase="Renewing"} == 1`, second, end)
	t.Logf("test from %s to %s; second rotation from %s, Renewing seen by Prometheus at %s", start.UTC().Format(time.TimeOnly),
		end.UTC().Format(time.TimeOnly), second.UTC().Format(time.TimeOnly), during.UTC().Format(time.TimeOnly))

	got := queryPanels(ctx, t, prom, dash, start, during, end)
	checkPanels(t, got)
	checkVariables(ctx, t, prom, dash)
	checkAlertSeries(ctx, t, prom, start, end)
	if *seriesPath != "" {
		if err := writeSeries(*seriesPath, got, start, end); err != nil {
			t.Fatalf("writing %s: %v", *seriesPath, err)
		}
		t.Logf("dashboard series written to %s", *seriesPath)
	}
}

// rotated waits until the rotation to root is over, on the gateway Secret
// and then in Prometheus: the root current and alone in the bundle, every
// client renewed, and Steady at every scrape for settle, so that the end
// of the rotation is in every range query up to now.
func rotated(ctx context.Context, g *WithT, c *cluster.Cluster, prom *promserver.Server, root *x509.Certificate, settle time.Duration) {
	fp := bundle.Fingerprint(root)
	g.Eventually(func() (map[string]string, error) {
		gw := &corev1.Secret{}
		err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: gatewayName}, gw)
		return gw.Annotations, err
	}).Should(And(HaveKeyWithValue(bundle.AnnotationRoot, fp), HaveKeyWithValue(bundle.AnnotationServer, fp),
		HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseSteady))), "the rotation to root %s is over", bundle.Short(fp))
	over := fmt.Sprintf(`min_over_time(dualca_phase{phase="Steady"}[%s]) == 1 and on () dualca_bundle_roots == 1`+
		` and on () dualca_clients{state="renewed"} == %d and on () dualca_root_expiry_timestamp_seconds{root=%q, role="current"}`,
		promDuration(settle), clients, bundle.Short(fp))
	g.Eventually(func() (model.Vector, error) { return instant(ctx, prom, over, time.Now()) }).ShouldNot(BeEmpty(),
		"Prometheus has scraped the end of the rotation to root %s", bundle.Short(fp))
}

// checkModel checks what Grafana needs of the model: a datasource
// variable every panel and target uses, and queries in every panel.
func checkModel(t *testing.T, d dashboardJSON) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(d.UID).NotTo(BeEmpty())
	var ds []variable
	for _, v := range d.Templating.List {
		if v.Type == "datasource" {
			ds = append(ds, v)
		}
	}
	g.Expect(ds).To(HaveLen(1), "one datasource variable")
	g.Expect(ds[0].Name).To(Equal("datasource"))
	g.Expect(string(ds[0].Query)).To(Equal(`"prometheus"`))
	want := datasource{Type: "prometheus", UID: "${datasource}"}
	g.Expect(d.Panels).NotTo(BeEmpty())
	ids := map[int]bool{}
	for _, p := range d.Panels {
		g.Expect(ids).NotTo(HaveKey(p.ID), "panel ids are unique")
		ids[p.ID] = true
		g.Expect(p.Datasource).To(Equal(want), "panel %q reads the datasource variable", p.Title)
		g.Expect(p.Targets).NotTo(BeEmpty(), "panel %q has queries", p.Title)
		for _, tg := range p.Targets {
			g.Expect(tg.Datasource).To(Equal(want), "panel %q target %s reads the datasource variable", p.Title, tg.RefID)
			g.Expect(tg.Expr).To(ContainSubstring(`job=~"$job", namespace=~"$namespace"`), "panel %q target %s follows the job and namespace variables", p.Title, tg.RefID)
		}
	}
}

// renderRules renders the chart's PrometheusRule for the test's release,
// with a lag threshold of seconds, and returns it as the rule file
// Prometheus reads.
func renderRules(t *testing.T) []byte {
	t.Helper()
	out, err := controlplane.Helm(t, "template", "dualca", filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca"),
		"--namespace", ns, "--show-only", "templates/prometheusrule.yaml",
		"--set", "prometheusRule.enabled=true", "--set", fmt.Sprintf("prometheusRule.rotationLagSeconds=%d", lagThreshold),
		"--set", "rootSecret.namespace="+ns, "--set", "rootSecret.name="+rootName,
		"--set", "gatewaySecret.namespace="+ns, "--set", "gatewaySecret.name="+gatewayName, "--set", "server.ipAddresses={127.0.0.1}")
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	rules, err := promserver.RuleFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// holdGatewayWrites makes the API server refuse every write of the gateway
// Secret, as a policy engine or a broken RBAC change would, and returns
// once it does (a dry-run update is refused). The function it returns
// lifts the hold.
func holdGatewayWrites(ctx context.Context, g *WithT, c *cluster.Cluster) func() {
	name := "hold-" + gatewayName
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					ResourceNames: []string{gatewayName},
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
					},
				}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "the dashboard test holds the gateway Secret"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	g.Expect(c.Client.Create(ctx, policy)).To(Succeed())
	g.Expect(c.Client.Create(ctx, binding)).To(Succeed())
	dryRun := func() error {
		gw := &corev1.Secret{}
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: gatewayName}, gw); err != nil {
			return err
		}
		return c.Client.Update(ctx, gw, client.DryRunAll)
	}
	g.Eventually(dryRun).Should(MatchError(ContainSubstring("the dashboard test holds the gateway Secret")), "the API server refuses writes of the gateway Secret")
	return func() {
		g.Expect(c.Client.Delete(ctx, binding)).To(Succeed())
		g.Expect(c.Client.Delete(ctx, policy)).To(Succeed())
		g.Eventually(dryRun).Should(Succeed(), "the API server accepts writes of the gateway Secret again")
	}
}

// waitAlert waits until Prometheus has DualcaRotationLag in state, or
// none when state is "", and returns it.
func waitAlert(ctx context.Context, g *WithT, prom *promserver.Server, state promv1.AlertState) promv1.Alert {
	var found promv1.Alert
	want := Equal([]promv1.AlertState{state})
	if state == "" {
		want = BeEmpty()
	}
	g.Eventually(func() ([]promv1.AlertState, error) {
		res, err := prom.API.Alerts(ctx)
		var states []promv1.AlertState
		for _, a := range res.Alerts {
			if a.Labels["alertname"] == "DualcaRotationLag" {
				states, found = append(states, a.State), a
			}
		}
		return states, err
	}).Should(want, "DualcaRotationLag %q", state)
	return found
}

// momentOf is a moment at which expr had a sample between start and end,
// the middle one of those Prometheus scraped.
func momentOf(ctx context.Context, g *WithT, prom *promserver.Server, expr string, start, end time.Time) time.Time {
	m, err := rangeQuery(ctx, prom, expr, start, end)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(HaveLen(1), "one series of %s", expr)
	g.Expect(m[0].Values).NotTo(BeEmpty())
	return m[0].Values[len(m[0].Values)/2].Timestamp.Time()
}

// instant runs an instant query at at.
func instant(ctx context.Context, prom *promserver.Server, expr string, at time.Time) (model.Vector, error) {
	v, _, err := prom.API.Query(ctx, expr, at)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	switch x := v.(type) {
	case model.Vector:
		return x, nil
	case *model.Scalar:
		return model.Vector{{Value: x.Value, Timestamp: x.Timestamp}}, nil
	}
	return nil, fmt.Errorf("query %s: a %s, not a vector", expr, v.Type())
}

// rangeQuery runs a range query from start to end at every scrape.
func rangeQuery(ctx context.Context, prom *promserver.Server, expr string, start, end time.Time) (model.Matrix, error) {
	v, _, err := prom.API.QueryRange(ctx, expr, promv1.Range{Start: start, End: end, Step: scrape})
	if err != nil {
		return nil, fmt.Errorf("query_range %s: %w", expr, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("query_range %s: a %s, not a matrix", expr, v.Type())
	}
	return m, nil
}

// queryPanels runs every target of every panel, its variables expanded as
// Grafana would, during the rotation, after it and over the whole test.
// Each must parse with Prometheus' parser, read only documented metrics
// and return data every time.
func queryPanels(ctx context.Context, t *testing.T, prom *promserver.Server, d dashboardJSON, start, during, end time.Time) map[string]panelResults {
	t.Helper()
	g := NewWithT(t)
	docs := documentedMetrics(t)
	vars := grafanaVars{namespace: ns, job: job, rateInterval: 5 * scrape}
	out := map[string]panelResults{}
	queries := 0
	for _, p := range d.Panels {
		out[p.Title] = panelResults{}
		for _, tg := range p.Targets {
			what := fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)
			vars.rangeLength = end.Sub(start)
			expr := vars.expand(tg.Expr)
			g.Expect(expr).NotTo(ContainSubstring("$"), "%s: every variable expanded", what)
			names, err := prom.MetricNames(ctx, expr)
			g.Expect(err).NotTo(HaveOccurred(), "%s parses: %s", what, expr)
			g.Expect(names).NotTo(BeEmpty(), "%s reads a metric", what)
			for _, n := range names {
				g.Expect(documented(docs, n)).To(BeTrue(), "%s reads %s, which docs/metrics.md does not describe", what, n)
			}
			var r results
			r.after, err = instant(ctx, prom, expr, end)
			g.Expect(err).NotTo(HaveOccurred())
			duringVars := vars
			duringVars.rangeLength = during.Sub(start)
			r.during, err = instant(ctx, prom, duringVars.expand(tg.Expr), during)
			g.Expect(err).NotTo(HaveOccurred())
			r.series, err = rangeQuery(ctx, prom, expr, start, end)
			g.Expect(err).NotTo(HaveOccurred())
			queries += 3
			g.Expect(r.during).NotTo(BeEmpty(), "%s returns data during the rotation: %s", what, expr)
			g.Expect(r.after).NotTo(BeEmpty(), "%s returns data after the rotation: %s", what, expr)
			g.Expect(r.series).NotTo(BeEmpty(), "%s returns series over the test: %s", what, expr)
			t.Logf("%s reads %v\n    during: %s\n    after:  %s\n    range:  %d series, %d samples", what, names,
				show(r.during), show(r.after), len(r.series), samples(r.series))
			out[p.Title][tg.RefID] = r
		}
	}
	t.Logf("%d panels, %d queries run, every one returned data", len(d.Panels), queries)
	return out
}

// show prints a vector compactly: the labels that tell series apart (not
// the target's job, namespace, instance and pod) and the value.
func show(v model.Vector) string {
	parts := make([]string, 0, len(v))
	for _, s := range v {
		ls := s.Metric.Clone()
		for _, l := range []model.LabelName{"job", "namespace", "instance", "pod", model.MetricNameLabel} {
			delete(ls, l)
		}
		parts = append(parts, fmt.Sprintf("%s %g", ls, float64(s.Value)))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func samples(m model.Matrix) int {
	n := 0
	for _, s := range m {
		n += len(s.Values)
	}
	return n
}

// byLabel maps each sample of v by the value of label.
func byLabel(v model.Vector, label model.LabelName) map[string]float64 {
	out := map[string]float64{}
	for _, s := range v {
		out[string(s.Metric[label])] = float64(s.Value)
	}
	return out
}

// maxBy is the highest value each series of m took, by the value of label.
func maxBy(m model.Matrix, label model.LabelName) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		k := string(s.Metric[label])
		for _, p := range s.Values {
			if v := float64(p.Value); !math.IsNaN(v) {
				out[k] = math.Max(out[k], v)
			}
		}
	}
	return out
}

// panelChecks are the values each panel must show, by title: a panel
// without a check fails the test.
var panelChecks = map[string]func(g Gomega, r panelResults){
	"Rotation phase": func(g Gomega, r panelResults) {
		g.Expect(byLabel(r["A"].during, "phase")).To(And(HaveKeyWithValue("Renewing", 1.0), HaveKeyWithValue("Steady", 0.0)), "Renewing during the rotation")
		g.Expect(byLabel(r["A"].after, "phase")).To(And(HaveKeyWithValue("Steady", 1.0), HaveKeyWithValue("Renewing", 0.0)), "Steady after it")
		g.Expect(maxBy(r["A"].series, "phase")).To(And(HaveKeyWithValue("Bundle", 1.0), HaveKeyWithValue("Renewing", 1.0),
			HaveKeyWithValue("Steady", 1.0), HaveKeyWithValue("Legacy", 0.0)), "the phases of a rotation over time")
	},
	"Build and strategy": func(g Gomega, r panelResults) {
		g.Expect(r["A"].after).To(HaveLen(1))
		g.Expect(string(r["A"].after[0].Metric["version"])).NotTo(BeEmpty())
		g.Expect(string(r["A"].after[0].Metric["goversion"])).To(HavePrefix("go"))
		g.Expect(byLabel(r["B"].after, "strategy")).To(Equal(map[string]float64{"zero-downtime": 1}))
	},
	"Roots in the bundle": func(g Gomega, r panelResults) {
		g.Expect(byLabel(r["A"].during, "role")).To(And(HaveLen(2), HaveKey("current"), HaveKey("server")), "the new root beside the server's")
		g.Expect(byLabel(r["A"].after, "role")).To(And(HaveLen(1), HaveKeyWithValue("current", BeNumerically(">", float64(time.Now().UnixMilli())))))
		g.Expect(r["B"].during).To(HaveLen(2))
		g.Expect(r["B"].after).To(HaveLen(1))
		g.Expect(float64(r["B"].after[0].Value)).To(BeEquivalentTo(clients), "every client on the one root left")
	},
	"Days left per root": func(g Gomega, r panelResults) {
		g.Expect(r["A"].during).To(HaveLen(2))
		g.Expect(r["A"].after).To(HaveLen(1))
		g.Expect(float64(r["A"].after[0].Value)).To(BeNumerically(">", 1))
	},
	"Bundle and server certificate": func(g Gomega, r panelResults) {
		g.Expect(float64(r["A"].during[0].Value)).To(BeEquivalentTo(2))
		g.Expect(float64(r["A"].after[0].Value)).To(BeEquivalentTo(1))
		g.Expect(float64(r["B"].after[0].Value)).To(BeNumerically(">", 86400))
	},
	"Clients": func(g Gomega, r panelResults) {
		g.Expect(byLabel(r["A"].after, "state")).To(Equal(map[string]float64{"renewed": clients, "pending": 0, "failed": 0}))
		d := byLabel(r["A"].during, "state")
		g.Expect(d["renewed"] + d["pending"] + d["failed"]).To(BeEquivalentTo(clients))
		g.Expect(maxBy(r["A"].series, "state")).To(HaveKeyWithValue("pending", float64(clients)), "every client pending when the rotation began")
	},
	"Renewals by result": func(g Gomega, r panelResults) {
		g.Expect(maxBy(r["A"].series, "result")).To(HaveKeyWithValue("triggered", BeNumerically(">", 0)))
		g.Expect(byLabel(r["A"].after, "result")).To(HaveKey("triggered"))
	},
	"Rotation lag": func(g Gomega, r panelResults) {
		g.Expect(maxBy(r["A"].series, "pod")).To(HaveKeyWithValue("dualca-0", BeNumerically(">", lagThreshold)), "held behind past the threshold")
		g.Expect(float64(r["A"].during[0].Value)).To(BeZero())
		g.Expect(float64(r["A"].after[0].Value)).To(BeZero())
	},
	"Propagation, root change to gateway": func(g Gomega, r panelResults) {
		for _, ref := range []string{"A", "B", "C"} {
			g.Expect(float64(r[ref].after[0].Value)).To(And(BeNumerically(">", 0), BeNumerically("<=", 32.768)), "quantile %s", ref)
		}
		g.Expect(float64(r["C"].after[0].Value)).To(BeNumerically(">=", float64(r["A"].after[0].Value)), "p99 >= p50")
	},
	"Propagation time": func(g Gomega, r panelResults) {
		total := 0.0
		for _, s := range r["A"].series {
			for _, p := range s.Values {
				total += float64(p.Value)
			}
		}
		g.Expect(total).To(BeNumerically(">", 0), "the propagations are in the heatmap")
	},
	"Sync errors by reason": func(g Gomega, r panelResults) {
		g.Expect(maxBy(r["A"].series, "reason")).To(HaveKeyWithValue("api_error", BeNumerically(">", 0)), "the refused writes")
		g.Expect(maxBy(r["B"].series, "")).To(HaveKeyWithValue("", BeNumerically(">", 0)))
	},
	"Forced server switches": func(g Gomega, r panelResults) {
		g.Expect(float64(r["A"].after[0].Value)).To(BeZero(), "every client was ready before the switch")
	},
	"Root, last sync, pause": func(g Gomega, r panelResults) {
		g.Expect(float64(r["A"].after[0].Value)).To(BeEquivalentTo(1))
		g.Expect(float64(r["B"].after[0].Value)).To(And(BeNumerically(">=", 0), BeNumerically("<", 30)))
		g.Expect(float64(r["C"].after[0].Value)).To(BeZero(), "nobody paused the rotation")
	},
}

// checkPanels checks every panel's values.
func checkPanels(t *testing.T, got map[string]panelResults) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(slices.Sorted(maps.Keys(panelChecks))).To(Equal(slices.Sorted(maps.Keys(got))), "every panel has its check, and every check a panel")
	for title, check := range panelChecks {
		t.Run(title, func(t *testing.T) { check(NewWithT(t), got[title]) })
	}
}

// checkVariables runs the dashboard's query variables (Grafana's
// label_values(selector, label), a label values call of the API) and
// expects the test's namespace and job among the choices.
func checkVariables(ctx context.Context, t *testing.T, prom *promserver.Server, d dashboardJSON) {
	t.Helper()
	g := NewWithT(t)
	docs := documentedMetrics(t)
	want := map[string]string{"namespace": ns, "job": job}
	seen := 0
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		seen++
		inner, ok := strings.CutPrefix(v.Definition, "label_values(")
		g.Expect(ok).To(BeTrue(), "variable %s is a label_values query: %s", v.Name, v.Definition)
		inner = strings.TrimSuffix(inner, ")")
		i := strings.LastIndex(inner, ",")
		g.Expect(i).To(BeNumerically(">", 0), "variable %s: label_values(selector, label)", v.Name)
		selector := grafanaVars{namespace: ns, job: job}.expand(strings.TrimSpace(inner[:i]))
		label := strings.TrimSpace(inner[i+1:])
		names, err := prom.MetricNames(ctx, selector)
		g.Expect(err).NotTo(HaveOccurred(), "variable %s: %s parses", v.Name, selector)
		for _, n := range names {
			g.Expect(documented(docs, n)).To(BeTrue(), "variable %s reads %s, which docs/metrics.md does not describe", v.Name, n)
		}
		values, _, err := prom.API.LabelValues(ctx, label, []string{selector}, time.Time{}, time.Time{})
		g.Expect(err).NotTo(HaveOccurred())
		t.Logf("variable %s = label_values(%s, %s): %v", v.Name, selector, label, values)
		g.Expect(values).To(ContainElement(model.LabelValue(want[v.Name])), "variable %s offers the test's %s", v.Name, v.Name)
	}
	g.Expect(seen).To(Equal(len(want)), "the namespace and job variables")
}

// checkAlertSeries reads the alerts' history from the ALERTS series:
// DualcaRotationLag fired during the test and fires no more at its end, and
// no other alert fired.
func checkAlertSeries(ctx context.Context, t *testing.T, prom *promserver.Server, start, end time.Time) {
	t.Helper()
	g := NewWithT(t)
	const expr = `ALERTS{alertname="DualcaRotationLag", alertstate="firing"}`
	m, err := rangeQuery(ctx, prom, expr, start, end)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(m).To(HaveLen(1), "%s over the test", expr)
	first, last := m[0].Values[0].Timestamp.Time(), m[0].Values[len(m[0].Values)-1].Timestamp.Time()
	t.Logf("%s: %d samples, from %s to %s", expr, len(m[0].Values), first.UTC().Format(time.TimeOnly), last.UTC().Format(time.TimeOnly))
	v, err := instant(ctx, prom, expr, end)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v).To(BeEmpty(), "not firing at the end")

	// The chart's other rules stay quiet through a rotation. DualcaAbsent
	// may be pending before the first scrape: pending is not paging.
	others, err := rangeQuery(ctx, prom, `ALERTS{alertname!="DualcaRotationLag"}`, start, end)
	g.Expect(err).NotTo(HaveOccurred())
	for _, s := range others {
		t.Logf("also seen: %s, %d samples", s.Metric, len(s.Values))
		g.Expect(string(s.Metric["alertstate"])).NotTo(Equal("firing"), "%s fired", s.Metric["alertname"])
	}
}
