// Command demo shows dualca rotating a cert-manager root CA twice, without
// one failed mTLS handshake, on this machine.
//
// It starts a local kube-apiserver and etcd (envtest) and the real
// cert-manager controller, which issues a self-signed root CA and, through
// a CA Issuer signing with it, a few dozen client certificates. It runs the
// dualca binary as an operator would, a TLS gateway that reloads its
// credential from the gateway Secret whenever dualca writes it, and one
// client per client certificate handshaking with it all the time. Then
// cert-manager re-issues the root twice, the second rotation arriving while
// the first is still in progress (every client already holds a certificate
// of the second root, the server still presents the first).
//
// While it runs it shows where the rotation stands, read from the gateway
// Secret through the code behind `dualca status`: a table redrawn in place
// on a terminal, one line per phase otherwise. It ends with a timeline of
// each rotation and the handshake counts, and exits non-zero if any
// handshake failed. With -legacy dualca runs with --cert-management-legacy,
// the plain copy of the root: the same story then shows the downtime the
// zero-downtime strategy avoids.
//
// Run it with `make demo` (`make demo LEGACY=1`), which builds what it
// needs first, or from the repository root (its relative paths are the
// repository's, wherever it runs):
//
//	go -C test/programs run ./demo -dualca bin/dualca [-legacy] [-v]
//
// It never prints key or certificate bytes: only root labels (R1, R2, …),
// SHA-256 fingerprint prefixes, subjects and expiry dates.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// Exit codes: a demo is also a check.
const (
	exitOK          = 0
	exitFailed      = 1 // a handshake failed, an invariant broke, or the demo could not run
	exitBadFlags    = 2
	exitInterrupted = 130 // as a shell reports a command ended by SIGINT
)

// options are the demo's flags.
type options struct {
	dualca   string        // path of the dualca binary
	legacy   bool          // run dualca with --cert-management-legacy
	clients  int           // client certificates, one TLS client each
	interval time.Duration // time between two handshakes of one client
	settle   time.Duration // handshaking that goes on once the last rotation is over
	timeout  time.Duration // longest wait for any one step
	verbose  bool          // show dualca's log as it runs
}

func main() {
	if err := controlplane.ChdirRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(exitFailed)
	}
	o := options{}
	flag.StringVar(&o.dualca, "dualca", "bin/dualca", "path of the dualca binary (make build)")
	flag.BoolVar(&o.legacy, "legacy", false, "run dualca with --cert-management-legacy: the old strategy, downtime included")
	flag.IntVar(&o.clients, "clients", 30, "client certificates, each with a TLS client handshaking with the gateway")
	flag.DurationVar(&o.interval, "interval", 150*time.Millisecond, "time between two handshakes of one client")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "how long the clients keep handshaking once the last rotation is over")
	flag.DurationVar(&o.timeout, "timeout", time.Minute, "longest wait for any one step before the demo gives up")
	flag.BoolVar(&o.verbose, "v", false, `show dualca's log (prefixed "dualca| ") as it runs, and the progress as lines`)
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(exitBadFlags)
	}

	// Ctrl-C or SIGTERM cancels the story; run then stops everything it
	// started, children in process groups of their own included, before
	// the demo exits. A second signal changes nothing: leaving now would
	// leave them running.
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		for range signals {
			fmt.Fprintln(os.Stderr, "demo: still stopping what it started, one moment")
		}
	}()

	d := newDemo(o)
	code := d.run(ctx)
	if ctx.Err() != nil {
		fmt.Fprintf(os.Stderr, "demo: interrupted after %s; everything it started is stopped\n", seconds(time.Since(d.begin)))
		code = exitInterrupted
	}
	os.Exit(code)
}

func (o options) validate() error {
	if _, err := os.Stat(o.dualca); err != nil {
		return fmt.Errorf("dualca binary: %w (build it with `make build`)", err)
	}
	switch {
	case o.clients < 1:
		return fmt.Errorf("-clients must be at least 1, not %d", o.clients)
	case o.interval <= 0:
		return fmt.Errorf("-interval must be positive, not %s", o.interval)
	case o.settle < 0:
		return fmt.Errorf("-settle must not be negative, not %s", o.settle)
	case o.timeout <= 0:
		return fmt.Errorf("-timeout must be positive, not %s", o.timeout)
	}
	return nil
}
