// Package run runs dualca's manager inside a test process, the way the
// integration and end-to-end tests both need it: its log collected (and
// shown when the test fails, and checked to hold no certificate or key
// material), its metrics and its requests to the API server readable by
// the test, stopped when the test ends
// or when asked.
package run

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/apirequest"
)

// Dualca is a running manager.
type Dualca struct {
	// metrics is a registry of this manager's metrics alone: tests run
	// several managers in one process.
	metrics *prometheus.Registry
	// requests are those it sent, as the API server saw them.
	requests *apirequest.Log
	t        testing.TB
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
	logs     *Buffer
}

// Start runs dualca against rc with o until ctx ends, Stop is called or
// the test ends. o.Logger, when not set, writes to a buffer of the test;
// o.Metrics, when not set, are metrics of this manager's own.
func Start(ctx context.Context, t testing.TB, rc *rest.Config, o syncer.Options) *Dualca {
	t.Helper()
	logs := &Buffer{}
	if o.Logger.GetSink() == nil {
		o.Logger = ctrlzap.New(ctrlzap.WriteTo(logs), ctrlzap.Level(zapcore.InfoLevel))
	}
	if o.Metrics == nil {
		o.Metrics = syncer.NewMetrics()
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(o.Metrics); err != nil {
		t.Fatalf("registering dualca's metrics: %v", err)
	}
	requests := &apirequest.Log{}
	rc = rest.CopyConfig(rc)
	rc.Wrap(requests.Wrap)
	mgr, err := syncer.NewManager(rc, o)
	if err != nil {
		t.Fatalf("creating dualca: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx) //nolint:gosec // G118: Stop calls it, and t.Cleanup calls Stop
	d := &Dualca{metrics: reg, requests: requests, t: t, cancel: cancel, done: make(chan struct{}), logs: logs}
	go func() {
		defer close(d.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("dualca stopped with an error: %v", err)
		}
	}()
	t.Cleanup(func() {
		d.Stop()
		// Secrets stay secret: no PEM, not even a line of one, in the log.
		if log := d.Log(); strings.Contains(log, "-----BEGIN") || strings.Contains(log, "MIIB") {
			t.Errorf("dualca's log contains certificate or key material")
		}
		if t.Failed() {
			t.Logf("dualca log:\n%s", d.Log())
		}
	})
	return d
}

// Stop stops dualca and waits until its manager returned.
func (d *Dualca) Stop() {
	d.once.Do(d.cancel)
	<-d.done
}

// Log is what dualca logged so far.
func (d *Dualca) Log() string { return d.logs.String() }

// Requests returns the requests dualca sent so far, in the order they were
// answered: what it asked of the API server, and so all its caches can hold.
func (d *Dualca) Requests() []apirequest.Request { return d.requests.All() }

// Renewals returns the client renewals acted on so far, by result
// ("triggered", "skipped", "failed"), from dualca_renewals_total: a result
// that never happened has no key.
func (d *Dualca) Renewals() map[string]int {
	out := map[string]int{}
	for result, n := range CountersBy(d.family("dualca_renewals_total"), "result") {
		out[result] = int(n)
	}
	return out
}

// Synced reports whether a reconcile brought the gateway in sync: it sets
// dualca_last_sync_timestamp_seconds, and nothing else does.
func (d *Dualca) Synced() bool {
	ms := d.family("dualca_last_sync_timestamp_seconds").GetMetric()
	return len(ms) == 1 && ms[0].GetGauge().GetValue() > 0
}

// Gauge is the value of dualca's gauge name, which has no labels; -1 when
// it has no series.
func (d *Dualca) Gauge(name string) float64 {
	f := d.family(name)
	if f == nil || len(f.GetMetric()) != 1 {
		return -1
	}
	return f.GetMetric()[0].GetGauge().GetValue()
}

// GaugeTotal is the sum of every series of dualca's gauge name (0 when it
// has none): a gauge with labels, such as the clients counted by root.
func (d *Dualca) GaugeTotal(name string) float64 {
	return d.sum(name, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

// sum is the sum of value over every series of dualca's metric name (0
// when it has none).
func (d *Dualca) sum(name string, value func(*dto.Metric) float64) float64 {
	total := 0.0
	if f := d.family(name); f != nil {
		for _, m := range f.GetMetric() {
			total += value(m)
		}
	}
	return total
}

// family is one of dualca's metric families now; nil when it has no series.
func (d *Dualca) family(name string) *dto.MetricFamily {
	fams, err := d.metrics.Gather()
	if err != nil {
		d.t.Errorf("gathering dualca's metrics: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

// Buffer collects a log that many goroutines (or a child's output
// copiers) write to while others read it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Counter is the value of dualca's counter name, which has no labels; -1
// when it has no series.
func (d *Dualca) Counter(name string) float64 {
	f := d.family(name)
	if f == nil || len(f.GetMetric()) != 1 {
		return -1
	}
	return f.GetMetric()[0].GetCounter().GetValue()
}

// Total is the sum of every series of dualca's counter name (0 when it
// has none yet): a counter with labels, such as its sync errors by reason.
func (d *Dualca) Total(name string) float64 {
	return d.sum(name, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}
