package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// startInProcess runs dualca inside the benchmark, for what the binary
// cannot show: the poll alone (watches disabled, a test knob) and every
// request it makes (through a counting transport). stop ends it and waits.
func (b *bench) startInProcess(ctx context.Context, disableWatches bool, counter *requestCounter, args ...string) (stop func(), err error) {
	opts, err := flags.Parse("dualca", append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, args...))
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(b.cluster.RESTConfig)
	cfg.QPS = -1 // as ctrl.GetConfig leaves it for the binary
	if counter != nil {
		cfg.Wrap(counter.wrap)
	}
	o := opts.Syncer()
	o.DisableWatches, o.Logger, o.Metrics = disableWatches, logr.Discard(), syncer.NewMetrics()
	mgr, err := syncer.NewManager(cfg, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.log("dualca stopped with an error: %v", err)
		}
	}, nil
}

// requestCounter counts the requests dualca sends, by verb and resource.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		c.counts[describeRequest(r)]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// snapshot returns the counts so far and starts again from zero.
func (c *requestCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// describeRequest names a request the way kubectl -v=6 would sum it up:
// "GET secrets/root-ca", "WATCH secrets", "LIST certificates".
func describeRequest(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	// /api/v1/namespaces/NS/secrets/NAME or /apis/G/V/namespaces/NS/R[/NAME[/status]]
	var rest []string
	for i, p := range parts {
		if p == "namespaces" && i+2 < len(parts) {
			rest = parts[i+2:]
			break
		}
	}
	if rest == nil && len(parts) > 0 {
		rest = parts[len(parts)-1:]
	}
	verb := r.Method
	q, _ := url.ParseQuery(r.URL.RawQuery)
	switch {
	case r.Method == http.MethodGet && q.Get("watch") == "true":
		verb = "WATCH"
	case r.Method == http.MethodGet && len(rest) == 1:
		verb = "LIST"
	}
	return fmt.Sprintf("%s %s", verb, strings.Join(rest, "/"))
}
