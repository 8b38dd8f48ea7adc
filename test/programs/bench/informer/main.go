// Command informer is the third reference of the benchmarks' memory
// comparison (test/programs/bench): the obvious way to follow a root Secret, a
// controller-runtime manager whose cached client reads it, which starts an
// informer on every Secret of the namespace. A binary of its own, so that
// what is measured is that and nothing of the benchmark.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "informer:", err)
		os.Exit(1)
	}
}

// run reads the root Secret through the cache and then waits for SIGTERM,
// holding what the cache holds. It writes "ready" to standard output once
// the cache has synced.
func run(args []string) error {
	fs := flag.NewFlagSet("informer", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	namespace := fs.String("namespace", "", "namespace of the root Secret")
	name := fs.String("name", "root-ca", "name of the root Secret")
	metrics := fs.String("metrics-bind-address", "0", "address of the metrics endpoint")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: *metrics},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return
		}
		var s corev1.Secret
		if err := mgr.GetClient().Get(ctx, types.NamespacedName{Namespace: *namespace, Name: *name}, &s); err != nil {
			fmt.Fprintln(os.Stderr, "reading the root:", err)
			stop()
			return
		}
		fmt.Println("ready")
	}()
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
