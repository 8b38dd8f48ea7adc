package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// The three systems measured side by side, each its own process against the
// same API server: dualca; cert-manager trust-manager, what a user would
// install instead to copy a CA into a Secret a gateway reads; and a trivial
// copier, the floor: what the API server itself costs to carry a change.

// system is one of them, as the benchmark drives it in a world.
type system struct {
	name string
	// target is the Secret of world w the system writes the root into.
	target func(w *world) string
	// start runs the system for world w with kubeconfig; extra flags go to
	// dualca only.
	start func(ctx context.Context, w *world, kubeconfig string, extra ...string) (*process, error)
}

const (
	systemDualca       = "dualca"
	systemTrustManager = "trust-manager"
	systemCopier       = "copier"
	// copierTarget and bundleTarget are the Secrets the copier and
	// trust-manager write.
	copierTarget = "copier-target"
)

func (b *bench) systems() []system {
	return []system{
		{name: systemDualca, target: func(*world) string { return gatewayName },
			start: func(_ context.Context, w *world, kubeconfig string, extra ...string) (*process, error) {
				return b.startDualca(kubeconfig, append([]string{w.rootFlag(), w.gatewayFlag()}, extra...)...)
			}},
		{name: systemTrustManager, target: bundleName,
			start: func(ctx context.Context, w *world, kubeconfig string, _ ...string) (*process, error) {
				return b.startTrustManager(ctx, w, kubeconfig)
			}},
		{name: systemCopier, target: func(*world) string { return copierTarget },
			start: func(_ context.Context, w *world, kubeconfig string, _ ...string) (*process, error) {
				return b.startCopier(w, kubeconfig)
			}},
	}
}

// bundleName is the name of a world's Bundle, and so of the Secret
// trust-manager writes in the world's namespace.
func bundleName(w *world) string { return "bench-" + w.ns }

// previousRootName is the Secret that holds the previous root for
// trust-manager's Bundle.
const previousRootName = "root-ca-previous"

// startTrustManager runs trust-manager with the world's namespace as its
// trust namespace, and a Bundle of two sources whose target is a Secret in
// the world's namespace: the root Secret's ca.crt, and a Secret holding a
// copy of the root as it was when trust-manager started. trust-manager's
// documentation ("Preparing for Production": cert-manager integration,
// intentionally copying CA certificates) warns that a Bundle reading only
// the issuer's Secret distrusts the old root the moment it rotates, and
// that both roots must be trusted for a while; a user who keeps the live
// Secret as a source copies the root into a second source before rotating,
// which is this. Removing the old root afterwards is the user's, by hand.
func (b *bench) startTrustManager(ctx context.Context, w *world, kubeconfig string) (*process, error) {
	if err := b.installTrustManagerCRDs(); err != nil {
		return nil, err
	}
	previous := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: previousRootName, Namespace: w.ns},
		Data: map[string][]byte{"ca.crt": w.root.Data["ca.crt"]}}
	if err := b.cluster.Client.Create(ctx, previous); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("creating Secret %s: %w", previousRootName, err)
	}
	name := bundleName(w)
	bundle := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"sources": []any{
				map[string]any{"secret": map[string]any{"name": rootName, "key": "ca.crt"}},
				map[string]any{"secret": map[string]any{"name": previousRootName, "key": "ca.crt"}},
			},
			"target": map[string]any{
				"secret":            map[string]any{"key": "ca.crt"},
				"namespaceSelector": map[string]any{"matchLabels": map[string]any{trustLabel: w.ns}},
			},
		},
	}}
	bundle.SetGroupVersionKind(schema.GroupVersionKind{Group: "trust.cert-manager.io", Version: "v1alpha1", Kind: "Bundle"})
	if err := b.cluster.Client.Create(ctx, bundle); client.IgnoreAlreadyExists(err) != nil {
		return nil, fmt.Errorf("creating Bundle %s: %w", name, err)
	}
	metrics, err := controlplane.FreeAddress()
	if err != nil {
		return nil, err
	}
	probes, err := controlplane.FreeAddress()
	if err != nil {
		return nil, err
	}
	p, err := startProcess(systemTrustManager, b.tool("trust-manager"), "--kubeconfig="+kubeconfig,
		"--trust-namespace="+w.ns, "--secret-targets-enabled", "--metrics-bind-address="+metrics, "--health-probe-bind-address="+probes)
	if err != nil {
		return nil, err
	}
	p.metrics, p.probes = metrics, probes
	return p, nil
}

// installTrustManagerCRDs installs trust-manager's Bundle CRD, from the
// module test/tools/trustmanager builds, once.
func (b *bench) installTrustManagerCRDs() error {
	if b.trustCRDs {
		return nil
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/trust-manager")
	cmd.Dir = filepath.Join(root, "test", "tools", "trustmanager")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("finding trust-manager's module (make trust-manager downloads it): %w", err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds", "trust.cert-manager.io_bundles.yaml")
	if _, err := envtest.InstallCRDs(b.cluster.RESTConfig, envtest.CRDInstallOptions{Paths: []string{crd}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("installing %s: %w", crd, err)
	}
	b.trustCRDs = true
	return nil
}

// startCopier runs the floor: the benchmark binary's copier command.
func (b *bench) startCopier(w *world, kubeconfig string) (*process, error) {
	return startCopying(w.ns, kubeconfig, rootName, copierTarget)
}

// startCopying runs the copier command from Secret source to Secret
// target of namespace ns, with extra flags.
func startCopying(ns, kubeconfig, source, target string, extra ...string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := append([]string{copierCommand, "--kubeconfig=" + kubeconfig, "--namespace=" + ns, "--root=" + source, "--target=" + target}, extra...)
	return startProcess(systemCopier, self, args...)
}

// tool is a binary of the repository's bin.
func (b *bench) tool(name string) string {
	return filepath.Join(b.root, "bin", name)
}
