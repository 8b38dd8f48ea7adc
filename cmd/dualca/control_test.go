package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// TestControlsCheckTheirFlagsFirst: pause, resume and promote exit 2 on a
// bad flag, before any request.
func TestControlsCheckTheirFlagsFirst(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no configmap":          {[]string{}, "--status-configmap is required"},
		"a malformed configmap": {[]string{"--status-configmap=gw"}, "want NAMESPACE/NAME"},
		"a malformed gateway":   {[]string{"--gateway-secret=gw"}, "want NAMESPACE/NAME"},
		"both":                  {[]string{"--gateway-secret=ns/gw", "--status-configmap=ns/st"}, "not both"},
		"an unknown flag":       {[]string{"--gateway-secret=ns/gw", "--now"}, "flag provided but not defined"},
		"a root secret":         {[]string{"--gateway-secret=ns/gw", "--root-secret=ns/root"}, "flag provided but not defined: -root-secret"},
		"a stray argument":      {[]string{"--gateway-secret=ns/gw", "R2"}, `unexpected argument "R2"`},
		"a namespace in caps":   {[]string{"--status-configmap=NS/st"}, `namespace "NS"`},
		"an empty key":          {[]string{"--status-configmap=/"}, "want NAMESPACE/NAME"},
	}
	for _, cmd := range []string{"pause", "resume", "promote"} {
		for name, tc := range tests {
			t.Run(cmd+": "+name, func(t *testing.T) {
				g := NewWithT(t)
				kubeconfig, requests := apiServer(t)
				var stdout, stderr bytes.Buffer
				code := control(context.Background(), cmd, append([]string{"--kubeconfig=" + kubeconfig}, tc.args...), &stdout, &stderr)
				g.Expect(code).To(Equal(2))
				g.Expect(stderr.String()).To(ContainSubstring(tc.want))
				g.Expect(requests.Load()).To(BeZero(), "no request before the flags are valid")
			})
		}
	}
}

// statusServer is an API server holding one status ConfigMap,
// dualca/gw-status, with the given annotations and published report. It
// records every request and the patches it is sent, and serves nothing
// else: a request for a Secret is a 404 the tests see.
type statusServer struct {
	mu          sync.Mutex
	annotations map[string]string
	report      *syncer.Report // nil: no status.json
	requests    []string
	patches     []string
}

func (s *statusServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r.Method+" "+r.URL.Path)
	if r.URL.Path != "/api/v1/namespaces/dualca/configmaps/gw-status" {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodPatch {
		body, _ := io.ReadAll(r.Body)
		s.patches = append(s.patches, r.Header.Get("Content-Type")+" "+string(body))
	}
	data := map[string]string{}
	if s.report != nil {
		b, _ := json.Marshal(s.report)
		data[syncer.StatusKey] = string(b)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "ConfigMap", "apiVersion": "v1",
		"metadata": map[string]any{"namespace": "dualca", "name": "gw-status", "resourceVersion": "7", "annotations": s.annotations},
		"data":     data})
}

// published is a report as dualca publishes it during a rotation from R1
// (server) to R2 (current), observed at `at`.
func published(server string, strategy string, at time.Time) *syncer.Report {
	return &syncer.Report{Gateway: "agents/gw", Strategy: strategy, Phase: string(bundle.PhaseRenewing),
		Roots: []syncer.BundleRoot{
			{Fingerprint: "222222222222", Subject: "CN=root", NotAfter: at.Add(time.Hour), Current: true, Server: server == "222222222222"},
			{Fingerprint: "111111111111", Subject: "CN=root", NotAfter: at.Add(time.Hour), Server: server == "111111111111"}},
		Attention: []string{}, ObservedAt: &at, PollInterval: "5m0s"}
}

// TestControlsPatchOneAnnotation runs each command against an API server
// and checks the one patch it sends to the status ConfigMap: pause sets
// the annotation, resume removes it, promote names the published current
// root by its prefix at the version read, and refuses (exit 1) when the
// server already presents it. No request is about a Secret.
func TestControlsPatchOneAnnotation(t *testing.T) {
	now := time.Now()
	rotating := published("111111111111", bundle.StrategyZeroDowntime, now)
	switched := published("222222222222", bundle.StrategyZeroDowntime, now)
	legacy := published("222222222222", bundle.StrategyLegacy, now)
	tests := map[string]struct {
		cmd    string
		report *syncer.Report
		code   int
		patch  string
		out    string
	}{
		"pause":   {"pause", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/paused":"true"}}}`, "dualca/gw-status: paused"},
		"resume":  {"resume", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/paused":null}}}`, "dualca/gw-status: resumed"},
		"promote": {"promote", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/promote":"222222222222"},"resourceVersion":"7"}}`, "promote to root 222222222222 requested"},
		"promote with the server on the current root already": {"promote", switched, 1, "", ""},
		"promote on a legacy gateway":                         {"promote", legacy, 1, "", ""},
		"promote with no status published":                    {"promote", nil, 1, "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := &statusServer{report: tc.report}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			var stdout, stderr bytes.Buffer
			code := control(context.Background(), tc.cmd, []string{"--kubeconfig=" + writeKubeconfig(t, srv.URL), "--status-configmap=dualca/gw-status"}, &stdout, &stderr)
			g.Expect(code).To(Equal(tc.code), stderr.String())
			g.Expect(api.requests).To(HaveEach(HaveSuffix("/api/v1/namespaces/dualca/configmaps/gw-status")), "the status ConfigMap alone")
			if tc.patch == "" {
				g.Expect(api.patches).To(BeEmpty())
				g.Expect(stderr.String()).To(ContainSubstring("nothing to promote"))
				return
			}
			g.Expect(api.patches).To(Equal([]string{tc.patch}))
			g.Expect(stdout.String()).To(ContainSubstring(tc.out))
		})
	}
}

// TestControlsFailOnAMissingConfigMap: a status ConfigMap that does not
// exist is an error (exit 2), not a success.
func TestControlsFailOnAMissingConfigMap(t *testing.T) {
	for _, cmd := range []string{"pause", "resume", "promote"} {
		t.Run(cmd, func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewServer(&statusServer{})
			t.Cleanup(srv.Close)
			var stdout, stderr bytes.Buffer
			code := control(context.Background(), cmd, []string{"--kubeconfig=" + writeKubeconfig(t, srv.URL), "--status-configmap=agents/other"}, &stdout, &stderr)
			g.Expect(code).To(Equal(2))
			g.Expect(stderr.String()).To(ContainSubstring("agents/other"))
		})
	}
}

// TestStatusShowsThePublishedReport: `dualca status` reads the one
// ConfigMap and shows what dualca published with its age; exit 0 when
// nothing needs attention, 1 when dualca was due to act more than three
// poll intervals ago by the report's own next step, or a control waits to
// be obeyed. A report with no next step is never stale: at rest dualca
// publishes nothing.
func TestStatusShowsThePublishedReport(t *testing.T) {
	now := time.Now()
	due := func(r *syncer.Report, at time.Time) *syncer.Report {
		r.Next = &syncer.Next{Upcoming: []syncer.Upcoming{{At: at, Step: bundle.StepSwitchGrace, What: "server switch to 222222222222"}}}
		return r
	}
	tests := map[string]struct {
		report      *syncer.Report
		annotations map[string]string
		code        int
		want        []string
	}{
		"fresh": {report: published("111111111111", bundle.StrategyZeroDowntime, now.Add(-30*time.Second)), code: statusOK,
			want: []string{"phase      Renewing", "222222222222  CN=root", "current", "published", "ago)", "attention: none"}},
		"due more than three poll intervals ago": {report: due(published("111111111111", bundle.StrategyZeroDowntime, now.Add(-20*time.Minute)), now.Add(-16*time.Minute)), code: statusAttention,
			want: []string{"attention: dualca was due 16m", "(server switch to 222222222222) and has published nothing since, more than 3 poll intervals (5m0s): is dualca running, and leading?"}},
		"due less than three poll intervals ago": {report: due(published("111111111111", bundle.StrategyZeroDowntime, now.Add(-20*time.Minute)), now.Add(-14*time.Minute)), code: statusOK,
			want: []string{"attention: none"}},
		"published a day ago, nothing due": {report: published("111111111111", bundle.StrategyZeroDowntime, now.Add(-24*time.Hour)), code: statusOK,
			want: []string{"published", "attention: none"}},
		"a pause not obeyed yet": {report: published("111111111111", bundle.StrategyZeroDowntime, now), code: statusAttention,
			annotations: map[string]string{bundle.AnnotationPaused: "true"},
			want:        []string{`attention: a pause is requested (dualca.io/paused="true") that dualca has not obeyed yet`}},
		"no status in it": {code: statusAttention, want: []string{"holds no status dualca published"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := &statusServer{report: tc.report, annotations: tc.annotations}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			var stdout, stderr bytes.Buffer
			code := status(context.Background(), []string{"--kubeconfig=" + writeKubeconfig(t, srv.URL), "--status-configmap=dualca/gw-status"}, &stdout, &stderr)
			g.Expect(code).To(Equal(tc.code), stdout.String()+stderr.String())
			for _, w := range tc.want {
				g.Expect(stdout.String()).To(ContainSubstring(w))
			}
			g.Expect(api.requests).To(Equal([]string{"GET /api/v1/namespaces/dualca/configmaps/gw-status"}), "one get of the ConfigMap, nothing else")
		})
	}
}
