package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dualca/dualca/test/controlplane"
)

// controlPlane is a local kube-apiserver and etcd, a client for the demo and
// a kubeconfig file for dualca.
type controlPlane struct {
	env        *envtest.Environment
	client     client.Client
	kubeconfig string
}

// startControlPlane starts kube-apiserver and etcd from $KUBEBUILDER_ASSETS,
// or from ./bin where `make control-plane` builds them.
func startControlPlane() (*controlPlane, error) {
	// envtest logs through controller-runtime; the demo tells its own story.
	logf.SetLogger(zap.New(zap.WriteTo(io.Discard)))

	dir, err := controlplane.Assets()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: dir}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s (build them with `make control-plane`): %w", dir, err)
	}
	cp := &controlPlane{env: env}
	if err := cp.connect(cfg); err != nil {
		return nil, errors.Join(err, cp.stop())
	}
	return cp, nil
}

// connect makes the demo's client and writes a kubeconfig for dualca, as a
// user in system:masters.
func (cp *controlPlane) connect(cfg *rest.Config) error {
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("client for the control plane: %w", err)
	}
	cp.client = c

	user, err := cp.env.AddUser(envtest.User{Name: "demo", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding a user for dualca: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig for dualca: %w", err)
	}
	f, err := os.CreateTemp("", "dualca-demo-kubeconfig-*") // mode 0600
	if err != nil {
		return err
	}
	cp.kubeconfig = f.Name()
	_, err = f.Write(kubeconfig)
	return errors.Join(err, f.Close())
}

// stop removes the kubeconfig and stops kube-apiserver and etcd.
func (cp *controlPlane) stop() error {
	var errs []error
	if cp.kubeconfig != "" {
		errs = append(errs, os.Remove(cp.kubeconfig))
	}
	if err := cp.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping the control plane: %w", err))
	}
	return errors.Join(errs...)
}
