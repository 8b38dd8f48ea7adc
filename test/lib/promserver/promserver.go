// Package promserver runs a real Prometheus server (bin/prometheus, built
// by `make prometheus` from the module promtool comes from) for a test: on
// 127.0.0.1, with storage of its own in the test's temporary directory,
// scraping the targets it is given and evaluating the rule files it is
// given. Its HTTP API answers through client_golang's API client, plus
// parse_query, which hands back the abstract syntax tree of an expression
// as Prometheus's own parser builds it.
package promserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"sigs.k8s.io/yaml"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/run"
)

// Target is one scrape job of a single target.
type Target struct {
	// Job is the job label Prometheus gives the target's series.
	Job string
	// Addr is host:port of its /metrics endpoint.
	Addr string
	// Labels are added to every series scraped from it, as a Kubernetes
	// service discovery would (namespace, pod).
	Labels map[string]string
}

// Options say what the server scrapes and evaluates.
type Options struct {
	// Interval is both the scrape and the rule evaluation interval.
	// Default: 1s.
	Interval time.Duration
	// Targets are scraped every Interval.
	Targets []Target
	// RuleFiles are rule files (Prometheus' format: groups), by file name.
	RuleFiles map[string][]byte
}

// Server is a running Prometheus.
type Server struct {
	// API is client_golang's client of its HTTP API.
	API promv1.API
	// URL is where it serves, http://127.0.0.1:port.
	URL string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
	logs *run.Buffer
}

// readyTimeout bounds the wait for /-/ready: opening an empty storage and
// loading the configuration take well under a second on an idle machine.
const readyTimeout = time.Minute

// Start writes the configuration and rule files into a temporary directory
// of the test, starts the Prometheus Tool ($PROMETHEUS overrides it) on a
// free loopback port and returns once /-/ready answers 200, so that
// queries never race its start-up. It is stopped when the test ends, and
// its log shown if the test failed.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := controlplane.Tool(t, "prometheus", "PROMETHEUS")
	dir := t.TempDir()
	config, err := writeConfig(dir, o)
	if err != nil {
		t.Fatalf("writing Prometheus' configuration: %v", err)
	}
	addr, err := controlplane.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{URL: "http://" + addr, done: make(chan struct{}), logs: &run.Buffer{}}
	s.cmd = exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := run.StartChild(s.cmd); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("prometheus: %v", err)
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", s.logs.String())
		}
	})
	client, err := api.NewClient(api.Config{Address: s.URL})
	if err != nil {
		t.Fatal(err)
	}
	s.API = promv1.NewAPI(client)
	if err := s.waitReady(); err != nil {
		t.Fatalf("prometheus at %s: %v", addr, err)
	}
	return s
}

// writeConfig writes prometheus.yml and the rule files into dir and
// returns the configuration's path.
func writeConfig(dir string, o Options) (string, error) {
	interval := o.Interval
	if interval == 0 {
		interval = time.Second
	}
	cfg := map[string]any{
		"global": map[string]any{"scrape_interval": interval.String(), "evaluation_interval": interval.String(),
			"scrape_timeout": interval.String()},
	}
	var rules []string
	for _, name := range slices.Sorted(maps.Keys(o.RuleFiles)) {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, o.RuleFiles[name], 0o600); err != nil {
			return "", err
		}
		rules = append(rules, path)
	}
	if len(rules) > 0 {
		cfg["rule_files"] = rules
	}
	var jobs []any
	for _, tg := range o.Targets {
		static := map[string]any{"targets": []string{tg.Addr}}
		if len(tg.Labels) > 0 {
			static["labels"] = tg.Labels
		}
		jobs = append(jobs, map[string]any{"job_name": tg.Job, "static_configs": []any{static}})
	}
	cfg["scrape_configs"] = jobs
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "prometheus.yml")
	return path, os.WriteFile(path, data, 0o600)
}

// waitReady waits until /-/ready answers 200, failing at once if the
// process exits (a bad configuration, say), and after readyTimeout.
func (s *Server) waitReady() error {
	err := run.WaitServing(s.URL+"/-/ready", readyTimeout, s.done)
	if errors.Is(err, run.ErrExited) {
		return fmt.Errorf("exited before it was ready: %w\n%s", s.err, s.logs.String())
	}
	return err
}

// stop sends SIGTERM and waits for the exit, killing it after 10s.
func (s *Server) stop() error {
	select {
	case <-s.done:
		return fmt.Errorf("exited before the test ended: %w", s.err)
	default:
	}
	if run.Terminate(s.cmd, s.done, 10*time.Second) {
		return errors.New("ignored SIGTERM for 10s and was killed")
	}
	if s.err != nil {
		return fmt.Errorf("exited uncleanly after SIGTERM: %w", s.err)
	}
	return nil
}

// Log is what Prometheus wrote so far (warnings and errors only).
func (s *Server) Log() string { return s.logs.String() }

// MetricNames parses expr with the server's PromQL parser (the parse_query
// endpoint) and returns the metric names its selectors read, sorted and
// without duplicates. A parse error is returned as Prometheus words it.
func (s *Server) MetricNames(ctx context.Context, expr string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/parse_query?query="+url.QueryEscape(expr), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("parse_query: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse_query: %w", err)
	}
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   any    `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("parse_query answered %s: %w", resp.Status, err)
	}
	if out.Status != "success" {
		return nil, fmt.Errorf("parse_query: %s", out.Error)
	}
	var names []string
	selectors(out.Data, &names)
	slices.Sort(names)
	return slices.Compact(names), nil
}

// selectors walks the tree parse_query returns and collects the metric
// name of every vector and matrix selector: its name, or its __name__
// equality matcher when it is written {__name__="..."}.
func selectors(node any, names *[]string) {
	switch n := node.(type) {
	case []any:
		for _, c := range n {
			selectors(c, names)
		}
	case map[string]any:
		if typ, _ := n["type"].(string); strings.HasSuffix(typ, "Selector") {
			name, _ := n["name"].(string)
			if name == "" {
				name = nameMatcher(n["matchers"])
			}
			*names = append(*names, name)
		}
		for _, c := range n {
			selectors(c, names)
		}
	}
}

// nameMatcher is the value of a __name__="..." matcher, or "".
func nameMatcher(matchers any) string {
	ms, _ := matchers.([]any)
	for _, m := range ms {
		mm, _ := m.(map[string]any)
		if mm["name"] == "__name__" && mm["type"] == "=" {
			v, _ := mm["value"].(string)
			return v
		}
	}
	return ""
}

// RuleFile is the rule file Prometheus reads for a rendered
// prometheus-operator PrometheusRule (YAML or JSON): its spec's groups,
// exactly as rendered, which is what the operator hands Prometheus.
func RuleFile(prometheusRule []byte) ([]byte, error) {
	var pr struct {
		Kind string `json:"kind"`
		Spec struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(prometheusRule, &pr); err != nil {
		return nil, fmt.Errorf("parsing the PrometheusRule: %w", err)
	}
	if pr.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("a %q, not a PrometheusRule", pr.Kind)
	}
	return yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
}
