// Package integration runs dualca's manager against a real kube-apiserver
// and etcd (envtest, built from Go modules by `make control-plane`) and
// asserts the state of the world: Secrets, annotations and events.
package integration

import (
	"fmt"
	"io"
	"os"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/controlplane"
)

var (
	restConfig *rest.Config
	k8s        client.Client
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Each manager logs to its own test; this catches the rest.
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	assets, err := controlplane.Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// cert-manager's CRDs, for the client Certificates; no cert-manager runs.
	crds, err := controlplane.CertManagerCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{crds}, ErrorIfCRDPathMissing: true}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane from %s (run `make control-plane`): %v\n", env.BinaryAssetsDirectory, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := controlplane.ExpectKubeVersion(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	restConfig = cfg
	scheme, err := syncer.Scheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
