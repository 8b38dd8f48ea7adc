package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// apiServer counts every request that reaches it.
func apiServer(t *testing.T) (kubeconfig string, requests *atomic.Int64) {
	requests = &atomic.Int64{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	return writeKubeconfig(t, srv.URL), requests
}

// writeKubeconfig points a kubeconfig file at server.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

func TestABadFlagFailsBeforeAnyAPICall(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"a root secret without a namespace": {[]string{"--root-secret=nonsense", "--gateway-secret=ns/gw"}, `--root-secret="nonsense": want NAMESPACE/NAME`},
		"a missing gateway secret":          {[]string{"--root-secret=ns/root"}, "--gateway-secret is required"},
		"the gateway is the root":           {[]string{"--root-secret=ns/a", "--gateway-secret=ns/a"}, "--gateway-secret must differ from --root-secret"},
		"an invalid namespace":              {[]string{"--root-secret=Not_A_Namespace/a", "--gateway-secret=ns/gw"}, `namespace "Not_A_Namespace"`},
		"a negative poll interval":          {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw", "--poll-interval=-5s"}, "--poll-interval must be positive"},
		"a grace shorter than the delay": {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw",
			"--trust-propagation-delay=10m", "--server-switch-grace=5m"}, "--server-switch-grace (5m0s) must be longer than --trust-propagation-delay (10m0s)"},
		"a duration that is not one": {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw", "--poll-interval=often"}, `invalid value "often" for flag -poll-interval`},
		"an unknown flag":            {[]string{"--root=ns/a"}, "flag provided but not defined: -root"},
		"no server names":            {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw"}, "--server-dns-names or --server-ip-addresses is required"},
		"a server lifetime too short for the grace": {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw", "--server-without-names", "--server-lifetime=24h",
			"--server-switch-grace=8h"}, "--server-lifetime 24h0m0s is too short"},
		"a stray argument": {[]string{"--root-secret=ns/a", "--gateway-secret=ns/gw", "extra"}, `unexpected argument "extra"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			kubeconfig, requests := apiServer(t)
			err := run(context.Background(), append([]string{"--kubeconfig=" + kubeconfig}, tc.args...))
			g.Expect(err).To(MatchError(ContainSubstring(tc.want)))
			g.Expect(requests.Load()).To(BeZero(), "no request may reach the API server")
		})
	}
}

// The control for the test above: with good flags the same fake API server
// is reached, so a zero there means something.
func TestGoodFlagsReachTheAPIServer(t *testing.T) {
	g := NewWithT(t)
	kubeconfig, requests := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--kubeconfig=" + kubeconfig, "--root-secret=ns/root", "--gateway-secret=ns/gw", "--server-dns-names=gw.example.com",
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--zap-log-level=error"})
	}()
	g.Eventually(requests.Load, 10*time.Second).Should(BeNumerically(">", 0))
	cancel()
	g.Eventually(done, 40*time.Second).Should(Receive())
}

// TestStatusChecksItsFlagsFirst: `dualca status` exits 2 on a bad flag
// without a request to the cluster, and 2 when the cluster cannot be read.
func TestStatusChecksItsFlagsFirst(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no configmap":              {[]string{}, "--status-configmap is required"},
		"a malformed configmap":     {[]string{"--status-configmap=gw"}, `want NAMESPACE/NAME`},
		"a malformed gateway":       {[]string{"--gateway-secret=Root/x"}, `namespace "Root"`},
		"a root secret, not needed": {[]string{"--gateway-secret=ns/gw", "--root-secret=ns/root"}, "--root-secret is no longer needed"},
		"a selector, not needed":    {[]string{"--gateway-secret=ns/gw", "--client-selector=a=b"}, "--client-selector is no longer needed"},
		"an unknown output":         {[]string{"--gateway-secret=ns/gw", "-o=yaml"}, `-o="yaml": want text or json`},
		"a zero stall threshold":    {[]string{"--gateway-secret=ns/gw", "--stalled-after=0s"}, "--stalled-after must be positive"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			kubeconfig, requests := apiServer(t)
			var stdout, stderr bytes.Buffer
			code := status(context.Background(), append([]string{"--kubeconfig=" + kubeconfig}, tc.args...), &stdout, &stderr)
			g.Expect(code).To(Equal(statusError))
			g.Expect(stderr.String()).To(ContainSubstring(tc.want))
			g.Expect(requests.Load()).To(BeZero(), "no request before the flags are valid")
		})
	}
	t.Run("an unreachable cluster", func(t *testing.T) {
		g := NewWithT(t)
		kubeconfig, requests := apiServer(t)
		var stdout, stderr bytes.Buffer
		code := status(context.Background(), []string{"--kubeconfig=" + kubeconfig, "--gateway-secret=ns/gw"}, &stdout, &stderr)
		g.Expect(code).To(Equal(statusError))
		g.Expect(requests.Load()).To(BeNumerically(">", 0))
		g.Expect(stdout.String()).To(BeEmpty())
	})
}

// TestStatusReportsAMissingConfigMapAsNeedingAttention goes through the
// whole command against an API server that has no status ConfigMap: the
// report says dualca has not published (is it running?) and the exit
// code is 1, in text and in JSON.
func TestStatusReportsAMissingConfigMapAsNeedingAttention(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"not found"}`)
	}))
	t.Cleanup(srv.Close)
	kubeconfig := writeKubeconfig(t, srv.URL)

	var stdout, stderr bytes.Buffer
	code := status(context.Background(), []string{"--kubeconfig=" + kubeconfig, "--gateway-secret=agents/gw"}, &stdout, &stderr)
	g.Expect(code).To(Equal(statusAttention), stderr.String())
	g.Expect(stdout.String()).To(ContainSubstring("attention: dualca has not published status to configmap agents/gw-dualca-status: is it running?"))

	stdout.Reset()
	code = status(context.Background(), []string{"--kubeconfig=" + kubeconfig, "--status-configmap=dualca/gw-status", "-o=json"}, &stdout, &stderr)
	g.Expect(code).To(Equal(statusAttention))
	g.Expect(stdout.String()).To(ContainSubstring(`"attention": [`))
	g.Expect(stdout.String()).To(ContainSubstring("configmap dualca/gw-status"))
}
