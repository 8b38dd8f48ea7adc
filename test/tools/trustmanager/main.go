// Command trust-manager runs cert-manager trust-manager's Bundle controller,
// built from the github.com/cert-manager/trust-manager module, for the
// benchmarks (test/programs/bench) to compare dualca with what a user would install
// instead to copy a CA into a Secret a gateway reads. It is upstream's
// cmd/trust-manager without the webhook, which the benchmarks do not need
// (they write valid Bundles), and with every server on the address given,
// 127.0.0.1 in the benchmarks, instead of 0.0.0.0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	trustapi "github.com/cert-manager/trust-manager/pkg/apis/trust/v1alpha1"
	"github.com/cert-manager/trust-manager/pkg/bundle"
	"github.com/cert-manager/trust-manager/pkg/bundle/controller"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "trust-manager:", err)
		os.Exit(1)
	}
}

func run() error {
	var opts controller.Options
	metrics := flag.String("metrics-bind-address", "127.0.0.1:9402", "address of the metrics endpoint; 0 disables it")
	probes := flag.String("health-probe-bind-address", "127.0.0.1:6060", "address of /readyz and /healthz; 0 disables them")
	flag.StringVar(&opts.Namespace, "trust-namespace", "cert-manager", "namespace to source trust bundles from")
	flag.BoolVar(&opts.SecretTargetsEnabled, "secret-targets-enabled", true, "allow Secret targets in the Bundle API")
	flag.BoolVar(&opts.FilterExpiredCerts, "filter-expired-certificates", false, "filter expired certificates from the bundle")
	zopts := zap.Options{}
	zopts.BindFlags(flag.CommandLine)
	flag.Parse()

	log := zap.New(zap.UseFlagOptions(&zopts))
	ctrl.SetLogger(log)
	klog.SetLogger(log)
	// --kubeconfig is controller-runtime's own flag.
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(trustapi.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		HealthProbeBindAddress: *probes,
		Metrics:                metricsserver.Options{BindAddress: *metrics},
		Cache:                  bundle.CacheOpts(opts),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	if err := bundle.SetupWithManager(ctx, mgr, opts); err != nil {
		return fmt.Errorf("registering the Bundle controller: %w", err)
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
