// Package run runs dualca's manager inside a test process, the way the
// integration and end-to-end tests both need it: its log collected (and
// shown when the test fails, and checked to hold no certificate or key
// material), stopped when the test ends or when asked.
package run

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/syncer"
)

// Dualca is a running manager.
type Dualca struct {
	// R is its reconciler, for what tests may look at.
	R      *syncer.Reconciler
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	logs   *Buffer
}

// Start runs dualca against rc with cfg until ctx ends, Stop is called or
// the test ends. cfg.Logger, when not set, writes to a buffer of the test.
func Start(ctx context.Context, t testing.TB, rc *rest.Config, cfg syncer.Config) *Dualca {
	t.Helper()
	logs := &Buffer{}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = ctrlzap.New(ctrlzap.WriteTo(logs), ctrlzap.Level(zapcore.InfoLevel))
	}
	mgr, r, err := syncer.NewManager(rc, cfg)
	if err != nil {
		t.Fatalf("creating dualca: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx) //nolint:gosec // G118: Stop calls it, and t.Cleanup calls Stop
	d := &Dualca{R: r, cancel: cancel, done: make(chan struct{}), logs: logs}
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
