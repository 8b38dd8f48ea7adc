// Command demo shows dualca rotating a root CA without downtime, against a
// real Kubernetes API server running on this machine.
//
// It starts kube-apiserver and etcd with envtest, creates a root CA Secret
// the way cert-manager writes one, runs the dualca binary next to it and
// rotates the root twice. After each step it prints what the gateway Secret
// holds: the phase, the root the server credential comes from, and every root
// in the trust bundle (ca.crt), with how long the gateway took to follow.
//
// With the default zero-downtime strategy a new root joins the bundle next to
// the old one at once, while the server keeps presenting the old root; the
// server moves to the new root only when the grace period is over, and the
// old root stays trusted. With -legacy the gateway Secret is a plain copy of
// the root: the old root leaves the bundle the moment the root rotates, which
// is the downtime dualca exists to prevent.
//
// Run it with `make demo`, or from the repository root:
//
//	go build -o bin/dualca ./cmd/dualca && go run ./test/demo [-legacy] [-v]
//
// It never prints key or certificate bytes: only subjects, SHA-256
// fingerprint prefixes and expiry dates.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Where the demo world lives and how fast dualca is told to rotate.
const (
	namespace             = "demo"
	trustPropagationDelay = 2 * time.Second
	serverSwitchGrace     = 6 * time.Second
)

var (
	rootKey    = types.NamespacedName{Namespace: namespace, Name: "root-ca"}
	gatewayKey = types.NamespacedName{Namespace: namespace, Name: "gateway-credential"}
)

// options are the demo's own flags.
type options struct {
	dualca  string        // path of the dualca binary
	legacy  bool          // run dualca with --cert-management-legacy
	verbose bool          // show dualca's log (info level) as it runs
	timeout time.Duration // longest wait for any one step
}

func main() {
	var o options
	flag.StringVar(&o.dualca, "dualca", "./bin/dualca", "path of the dualca binary (go build -o bin/dualca ./cmd/dualca)")
	flag.BoolVar(&o.legacy, "legacy", false, "run dualca with --cert-management-legacy (the old, plain-copy strategy)")
	flag.BoolVar(&o.verbose, "v", false, `show dualca's log, prefixed with "dualca| ", as it runs`)
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "longest wait for any one step before the demo gives up")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	interrupted := ctx.Err() != nil
	stop()

	switch {
	case interrupted:
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintln(os.Stderr, "demo:", err)
		}
		fmt.Fprintln(os.Stderr, "demo: interrupted; dualca and the control plane are stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo: FAILED:", err)
		os.Exit(1)
	}
}

// run sets the world up, plays the story and tears everything down again,
// whatever happened in between.
func run(ctx context.Context, o options) (err error) {
	if _, err := os.Stat(o.dualca); err != nil {
		return fmt.Errorf("dualca binary: %w (build it with `go build -o bin/dualca ./cmd/dualca`)", err)
	}
	begin := time.Now()

	fmt.Println("starting kube-apiserver and etcd (envtest) ...")
	cp, err := startControlPlane()
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.stop()) }()
	fmt.Printf("control plane up in %s\n", seconds(time.Since(begin)))

	s := &story{k8s: cp.client, timeout: o.timeout}
	if err := s.setUp(ctx); err != nil {
		return err
	}

	args, err := dualcaArgs(cp.kubeconfig, o.legacy, o.verbose)
	if err != nil {
		return err
	}
	if o.legacy {
		fmt.Printf("running %s (strategy legacy: the gateway Secret is a plain copy of the root)\n", o.dualca)
	} else {
		fmt.Printf("running %s (strategy zero-downtime, trust propagation delay %s, server switch grace %s)\n",
			o.dualca, trustPropagationDelay, serverSwitchGrace)
	}
	s.dualca, err = startDualca(o.dualca, args, o.verbose)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.dualca.stop()) }()

	if err := s.play(ctx); err != nil {
		return err
	}
	fmt.Printf("\ndemo finished in %s; stopping dualca and the control plane\n", seconds(time.Since(begin)))
	return nil
}

// seconds formats d for a human: "6.1s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// millis formats a short d with sub-millisecond precision: "4.2 ms".
func millis(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
