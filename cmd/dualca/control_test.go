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

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// TestControlsCheckTheirFlagsFirst: pause, resume and promote exit 2 on a
// bad flag, before any request.
func TestControlsCheckTheirFlagsFirst(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no gateway secret":    {[]string{}, "--gateway-secret is required"},
		"a malformed gateway":  {[]string{"--gateway-secret=gw"}, "want NAMESPACE/NAME"},
		"an unknown flag":      {[]string{"--gateway-secret=ns/gw", "--now"}, "flag provided but not defined"},
		"a stray argument":     {[]string{"--gateway-secret=ns/gw", "R2"}, `unexpected argument "R2"`},
		"a namespace in caps":  {[]string{"--gateway-secret=NS/gw"}, `namespace "NS"`},
		"an empty gateway key": {[]string{"--gateway-secret=/"}, "want NAMESPACE/NAME"},
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

// gatewayServer is an API server holding one gateway Secret with the given
// annotations, which records the patches it is sent.
type gatewayServer struct {
	mu          sync.Mutex
	annotations map[string]string
	patches     []string
}

func (s *gatewayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path != "/api/v1/namespaces/agents/secrets/gw" {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodPatch {
		body, _ := io.ReadAll(r.Body)
		s.patches = append(s.patches, r.Header.Get("Content-Type")+" "+string(body))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Secret", "apiVersion": "v1",
		"metadata": map[string]any{"namespace": "agents", "name": "gw", "resourceVersion": "7", "annotations": s.annotations}})
}

// TestControlsPatchOneAnnotation runs each command against an API server
// and checks the one patch it sends: pause sets the annotation, resume
// removes it, promote names the recorded current root at the version read,
// and refuses (exit 1) when the server already presents it.
func TestControlsPatchOneAnnotation(t *testing.T) {
	const r1, r2 = "1111111111111111", "2222222222222222"
	rotating := map[string]string{bundle.AnnotationStrategy: bundle.StrategyZeroDowntime, bundle.AnnotationRoot: r2, bundle.AnnotationServer: r1}
	switched := map[string]string{bundle.AnnotationStrategy: bundle.StrategyZeroDowntime, bundle.AnnotationRoot: r2, bundle.AnnotationServer: r2}
	tests := map[string]struct {
		cmd         string
		annotations map[string]string
		code        int
		patch       string
		out         string
	}{
		"pause":   {"pause", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/paused":"true"}}}`, "agents/gw paused"},
		"resume":  {"resume", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/paused":null}}}`, "agents/gw resumed"},
		"promote": {"promote", rotating, 0, `application/merge-patch+json {"metadata":{"annotations":{"dualca.io/promote":"` + r2 + `"},"resourceVersion":"7"}}`, "promote to root 222222222222 requested"},
		"promote with the server on the current root already": {"promote", switched, 1, "", ""},
		"promote on a legacy gateway":                         {"promote", map[string]string{bundle.AnnotationStrategy: bundle.StrategyLegacy}, 1, "", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := &gatewayServer{annotations: tc.annotations}
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			var stdout, stderr bytes.Buffer
			code := control(context.Background(), tc.cmd, []string{"--kubeconfig=" + writeKubeconfig(t, srv.URL), "--gateway-secret=agents/gw"}, &stdout, &stderr)
			g.Expect(code).To(Equal(tc.code), stderr.String())
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

// TestControlsFailOnAMissingGateway: a gateway Secret that does not exist
// is an error (exit 2), not a success.
func TestControlsFailOnAMissingGateway(t *testing.T) {
	for _, cmd := range []string{"pause", "resume", "promote"} {
		t.Run(cmd, func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewServer(&gatewayServer{})
			t.Cleanup(srv.Close)
			var stdout, stderr bytes.Buffer
			code := control(context.Background(), cmd, []string{"--kubeconfig=" + writeKubeconfig(t, srv.URL), "--gateway-secret=agents/other"}, &stdout, &stderr)
			g.Expect(code).To(Equal(2))
			g.Expect(stderr.String()).To(ContainSubstring("agents/other"))
		})
	}
}
