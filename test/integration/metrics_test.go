package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/issuance"
	dualcarun "github.com/dualca/dualca/test/lib/run"
)

// TestMetricsFollowARotation scrapes dualca's real metrics endpoint across
// a rotation, with client Certificates issued in place (written as
// cert-manager writes them: no cert-manager here, only its CRDs), and checks the values move
// as they should. The endpoint serves controller-runtime's registry, the
// process's one: this test alone registers a Metrics there, as the binary
// does, and the managers of the other tests keep theirs to themselves.
func TestMetricsFollowARotation(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(15 * time.Second)
	g.SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	ctx := context.Background()
	ns := s.ns

	now := time.Now()
	r1 := certs.MustNew(t, "root-ca", now.Add(-2*time.Hour), now.Add(48*time.Hour), certs.Options{IsCA: true}, nil)
	putRoot := func(r *certs.CA) {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "root-ca"}, Type: corev1.SecretTypeTLS}
		_, err := controllerutil.CreateOrUpdate(ctx, k8s, s, func() error {
			s.Data = map[string][]byte{"tls.crt": r.CertPEM, "tls.key": r.KeyPEM, "ca.crt": r.CertPEM}
			return nil
		})
		g.Expect(err).NotTo(HaveOccurred())
	}
	putRoot(r1)
	// Three clients on R1, as cert-manager would have issued them.
	for i := range 3 {
		name := fmt.Sprintf("agent-%d", i)
		crt := &cmapi.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"dualca.io/client": "agent", "team": "edge"},
				Annotations: map[string]string{"example.com/owner": "edge"}},
			Spec: cmapi.CertificateSpec{SecretName: name, CommonName: name, DNSNames: []string{name + ".example.com"},
				IssuerRef: cmmeta.IssuerReference{Name: "agents-ca", Kind: "Issuer", Group: "cert-manager.io"}},
		}
		g.Expect(k8s.Create(ctx, crt)).To(Succeed())
		leaf := certs.MustNew(t, name, now.Add(-time.Hour), now.Add(24*time.Hour), certs.Options{}, r1)
		g.Expect(issuance.Issue(ctx, k8s, crt, leaf.CertPEM, leaf.KeyPEM, r1.CertPEM)).To(Succeed())
	}

	addr, err := controlplane.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	o := s.options()
	o.ClientSelector = labels.SelectorFromSet(labels.Set{"dualca.io/client": "agent"})
	o.ClientNamespaces = []string{ns}
	o.TrustPropagationDelay, o.ServerSwitchGrace, o.PollInterval = time.Second, time.Hour, 2*time.Second
	o.MetricsBindAddress = addr
	cfg := o.Syncer()
	cfg.Metrics = syncer.NewMetrics()
	g.Expect(metrics.Registry.Register(cfg.Metrics)).To(Succeed())
	t.Cleanup(func() { metrics.Registry.Unregister(cfg.Metrics) })
	s.start(cfg)

	scrape := func() (map[string]*dto.MetricFamily, error) { return dualcarun.Scrape(addr) }
	// value is the metric's value for the labels given as k=v pairs; -1
	// when there is no such series.
	value := func(name string, kv ...string) func() float64 {
		return func() float64 {
			fams, err := scrape()
			if err != nil {
				return -2
			}
			return valueOf(fams[name], kv...)
		}
	}
	fp1 := bundle.Short(bundle.Fingerprint(r1.Cert))

	// In sync with R1: one root, Steady, lag 0, strategy, validity.
	g.Eventually(value("dualca_phase", "phase", "Steady")).Should(Equal(1.0))
	g.Expect(value("dualca_strategy_info", "strategy", "zero-downtime")()).To(Equal(1.0))
	g.Expect(value("dualca_root_valid")()).To(Equal(1.0))
	g.Expect(value("dualca_bundle_roots")()).To(Equal(1.0))
	g.Expect(value("dualca_rotation_lag_seconds")()).To(Equal(0.0))
	g.Expect(value("dualca_root_expiry_timestamp_seconds", "root", fp1, "role", "current")()).To(Equal(float64(r1.Cert.NotAfter.Unix())))
	g.Expect(value("dualca_server_certificate_expiry_timestamp_seconds")()).To(Equal(float64(r1.Cert.NotAfter.Unix())),
		"the server leaf lives as long as its root")
	g.Expect(value("dualca_root_clients", "root", fp1)()).To(Equal(3.0))
	g.Expect(value("dualca_clients", "state", "renewed")()).To(Equal(3.0))
	g.Expect(value("dualca_propagation_seconds")()).To(Equal(1.0), "one propagation observed: start-up")

	// R2 arrives: two roots, R1 now the server's, clients pending, then
	// renewals triggered through the Issuing condition once the delay ends.
	r2 := certs.MustNew(t, "root-ca", now.Add(-time.Hour), now.Add(72*time.Hour), certs.Options{IsCA: true}, nil)
	putRoot(r2)
	fp2 := bundle.Short(bundle.Fingerprint(r2.Cert))
	g.Eventually(value("dualca_bundle_roots")).Should(Equal(2.0))
	g.Expect(value("dualca_root_expiry_timestamp_seconds", "root", fp2, "role", "current")()).To(Equal(float64(r2.Cert.NotAfter.Unix())))
	g.Expect(value("dualca_root_expiry_timestamp_seconds", "root", fp1, "role", "server")()).To(Equal(float64(r1.Cert.NotAfter.Unix())))
	g.Expect(value("dualca_root_expiry_timestamp_seconds", "root", fp1, "role", "current")()).To(Equal(-1.0), "R1's old series is gone")
	g.Expect(value("dualca_propagation_seconds")()).To(Equal(2.0), "the rotation's propagation observed")
	g.Eventually(value("dualca_clients", "state", "pending")).Should(Equal(3.0))
	g.Eventually(value("dualca_phase", "phase", "Renewing")).Should(Equal(1.0))
	g.Eventually(value("dualca_renewals_total", "strategy", "zero-downtime", "method", "issuing-condition", "result", "triggered")).
		Should(Equal(3.0))
	// dualca caches a Certificate without what it does not read (its spec's
	// names, other labels, annotations), and its first attempt at a trigger
	// updates the status from that: the API server takes only the status of
	// it, and the rest of the Certificate stays as its owner wrote it.
	for i := range 3 {
		crt := &cmapi.Certificate{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: fmt.Sprintf("agent-%d", i)}, crt)).To(Succeed())
		g.Expect(crt.Status.Conditions).To(ContainElement(HaveField("Type", cmapi.CertificateConditionIssuing)))
		g.Expect(crt.Status.Revision).To(Equal(ptr.To(1)), "the status of cert-manager's issuance stays")
		g.Expect(crt.Status.NotAfter).NotTo(BeNil())
		g.Expect(crt.Labels).To(HaveKeyWithValue("team", "edge"))
		g.Expect(crt.Annotations).To(HaveKeyWithValue("example.com/owner", "edge"))
		g.Expect(crt.Spec.DNSNames).To(Equal([]string{crt.Name + ".example.com"}))
		g.Expect(crt.Spec.CommonName).To(Equal(crt.Name))
	}

	// A broken root: validity 0 and errors counted, the gateway untouched.
	bad := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, o.RootSecret, bad)).To(Succeed())
	bad.Data["tls.key"] = r1.KeyPEM
	g.Expect(k8s.Update(ctx, bad)).To(Succeed())
	g.Eventually(value("dualca_root_valid")).Should(Equal(0.0))
	g.Eventually(value("dualca_sync_errors_total", "reason", "root_invalid")).Should(BeNumerically(">=", 1))
	putRoot(r2)
	g.Eventually(value("dualca_root_valid")).Should(Equal(1.0))

	// Every metric of docs/metrics.md is served; nothing carries PEM.
	fams, err := scrape()
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for name := range fams {
		if strings.HasPrefix(name, "dualca_") {
			names = append(names, name)
		}
	}
	doc, err := os.ReadFile(filepath.Join(controlplane.TestRepoRoot(t), "docs", "metrics.md"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, name := range names {
		g.Expect(string(doc)).To(ContainSubstring("`"+name+"`"), "docs/metrics.md describes %s", name)
	}
	g.Expect(names).To(ContainElements("dualca_server_certificate_expiry_timestamp_seconds", "dualca_root_expiry_timestamp_seconds",
		"dualca_root_clients", "dualca_bundle_roots", "dualca_phase", "dualca_rotation_lag_seconds", "dualca_propagation_seconds",
		"dualca_clients", "dualca_renewals_total", "dualca_root_valid", "dualca_strategy_info", "dualca_sync_errors_total",
		"dualca_last_sync_timestamp_seconds"))
	resp, err := http.Get("http://" + addr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	_ = resp.Body.Close()
	g.Expect(body.String()).NotTo(ContainSubstring("BEGIN"), "no certificate or key material in the metrics")
	// Served uncompressed even to a scraper that accepts compression: a
	// pooled gzip writer would hold about 1.5 MB of dualca's heap.
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Accept-Encoding", "gzip, zstd")
	resp, err = http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	n, _ := io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	t.Logf("a scrape: %d bytes", n)
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	g.Expect(resp.Header.Get("Content-Encoding")).To(BeEmpty(), "the metrics are served uncompressed")
	var lines []string
	for _, l := range strings.Split(body.String(), "\n") {
		if strings.HasPrefix(l, "dualca_") && !strings.Contains(l, "_bucket{") {
			lines = append(lines, l)
		}
	}
	t.Logf("dualca's series in a scrape during the rotation:\n%s", strings.Join(lines, "\n"))
}

// valueOf returns the value of the series of fam whose labels include kv,
// -1 when there is none. Histograms give their sample count.
func valueOf(fam *dto.MetricFamily, kv ...string) float64 {
	if fam == nil {
		return -1
	}
	for _, m := range fam.GetMetric() {
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}
