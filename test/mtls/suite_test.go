package mtls_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// cs talks to the control plane that TestMain starts for all the tests.
var cs kubernetes.Interface

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env := &envtest.Environment{BinaryAssetsDirectory: assetsDir()}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane from %s (run `make control-plane`): %v\n", env.BinaryAssetsDirectory, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	// The API server warns about the unparsable tls.key a test writes on
	// purpose.
	cfg.WarningHandler = rest.NoWarnings{}
	if cs, err = kubernetes.NewForConfig(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// assetsDir is KUBEBUILDER_ASSETS, or the repository's ./bin where the
// Makefile builds kube-apiserver and etcd.
func assetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	d, _ := filepath.Abs(filepath.Join("..", "..", "bin"))
	return d
}
