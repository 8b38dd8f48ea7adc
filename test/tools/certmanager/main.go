// Command cert-manager-controller runs the part of cert-manager's controller
// that issues and renews certificates from SelfSigned and CA issuers, built
// from the github.com/cert-manager/cert-manager module alone: the upstream
// cmd/controller is a separate module that the Go module proxy does not
// serve. It is for end-to-end tests: no webhook, no ACME, Vault or Venafi, no
// ingress or gateway shims, no leader election, no metrics server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Issuer implementations register themselves with the issuers
	// controllers; without them no Issuer ever becomes Ready.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the control loops a Certificate needs to go from spec to
// Secret with SelfSigned and CA issuers. The names come from the packages,
// whose init functions register the constructors, so that a rename upstream
// breaks this build rather than an end-to-end test.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	approver.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

func main() {
	klog.InitFlags(nil) // -v and friends
	var opts controller.ContextOptions
	flag.StringVar(&opts.Kubeconfig, "kubeconfig", "", "path to a kubeconfig; empty means in-cluster")
	flag.StringVar(&opts.ClusterResourceNamespace, "cluster-resource-namespace", "kube-system",
		"namespace of the Secrets that ClusterIssuers refer to")
	// Upstream's defaults: a failed issuance is retried after 1h, 2h, ... 32h.
	flag.DurationVar(&opts.CertificateRequestMinimumBackoffDuration, "certificate-request-minimum-backoff-duration", time.Hour,
		"delay before a failed issuance is retried, doubled on every further failure")
	flag.DurationVar(&opts.CertificateRequestMaximumBackoffDuration, "certificate-request-maximum-backoff-duration", 32*time.Hour,
		"longest delay between retries of a failed issuance")
	workers := flag.Int("workers", 2, "workers per controller")
	stopOnStdinClose := flag.Bool("stop-on-stdin-close", false,
		"also stop when standard input reaches its end: a test harness holding a pipe to it takes this process down with it, even when the harness is killed")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *stopOnStdinClose {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	err := run(ctx, opts, *workers)
	if err != nil {
		klog.ErrorS(err, "cert-manager-controller failed")
	}
	klog.Flush()
	if err != nil {
		os.Exit(1)
	}
}

// run builds the controllers, starts the informers they registered and runs
// them until ctx is done.
func run(ctx context.Context, opts controller.ContextOptions, workers int) error {
	// Same QPS and burst as upstream; unused when the API server has API
	// Priority and Fairness on, as it has by default.
	opts.KubernetesAPIQPS, opts.KubernetesAPIBurst = 20, 50
	ctx = logf.NewContext(ctx, klog.Background(), "cert-manager")
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("building the controller context: %w", err)
	}
	loops := make(map[string]controller.Interface, len(controllers))
	for _, name := range controllers {
		newController, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		if loops[name], err = newController(factory); err != nil {
			return fmt.Errorf("building controller %q: %w", name, err)
		}
	}

	// The informer factories are shared by every context the factory builds,
	// and a factory starts only the informers asked for so far: start them
	// once every controller has asked for its own.
	informers, err := factory.Build("informers")
	if err != nil {
		return fmt.Errorf("building the informers context: %w", err)
	}
	informers.KubeSharedInformerFactory.Start(ctx.Done())
	informers.SharedInformerFactory.Start(ctx.Done())

	var wg sync.WaitGroup
	errs := make([]error, len(controllers))
	for i, name := range controllers {
		wg.Go(func() {
			if err := loops[name].Run(workers, ctx); err != nil {
				errs[i] = fmt.Errorf("controller %q: %w", name, err)
			}
		})
	}
	klog.InfoS("controllers started", "controllers", controllers)
	<-ctx.Done()
	klog.InfoS("shutting down")
	wg.Wait()
	return errors.Join(errs...)
}
