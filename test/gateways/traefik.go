package gateways

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// TraefikName is the Traefik gateway's name in the report.
const TraefikName = "traefik"

// ErrShapeUnsupported is what a gateway says of a shape it cannot read:
// the report shows the cell as not applicable, and the suite does not run
// it.
var ErrShapeUnsupported = errors.New("the gateway cannot read this shape")

// traefikError marks a line of Traefik's log at level error: whatever it
// could not take in (a CA it could not load from the bundle Secret, a
// certificate it could not parse, a TLS option it could not build) is one,
// and counts as a refusal.
const traefikError = " ERR "

// Traefik is Traefik v3 (Go's TLS) reading Kubernetes itself with its CRD
// provider, restricted to one namespace: an IngressRoute on an entrypoint
// on 127.0.0.1, its TLS from the gateway's server credential Secret
// (tls.secretName) and a TLSOption requiring and verifying a client
// certificate against the bundle Secret (clientAuth.secretNames; Traefik
// reads its ca.crt). A client it lets through is answered by
// noop@internal, 418.
type Traefik struct {
	p    *proc
	addr string
	log  string
}

// Addr is where its entrypoint listens.
func (t *Traefik) Addr() string { return t.addr }

// Expect is noop@internal's status.
func (t *Traefik) Expect() int { return 418 }

// Refused counts the errors in its log.
func (t *Traefik) Refused() int { return countIn(t.log, traefikError) }

// Problems are the errors in its log, base64 runs (Traefik names a
// certificate by the start of its PEM) cut out: no certificate bytes in a
// test's output.
func (t *Traefik) Problems() string {
	var errs []string
	for line := range strings.Lines(tailFile(t.log, 200)) {
		if strings.Contains(line, traefikError) {
			errs = append(errs, base64Run.ReplaceAllString(strings.TrimSpace(line), "[…]"))
		}
	}
	return strings.Join(errs[max(0, len(errs)-3):], "\n")
}

// base64Run is a run of base64 long enough to be a piece of a certificate.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{24,}={0,2}`)

// Stop stops it.
func (t *Traefik) Stop() { t.p.stop() }

// traefikSources checks that Traefik can read shape: the server credential
// from one Secret's tls.crt and tls.key, the bundle from a Secret's ca.crt.
func traefikSources(shape Shape, gateway string) (server, bundle string, err error) {
	cert, key, ca := shape.Cert(gateway), shape.Key(gateway), shape.Bundle(gateway)
	if cert.Kind != KindSecret || key.Kind != KindSecret || cert.Name != key.Name || cert.Key != "tls.crt" || key.Key != "tls.key" {
		return "", "", fmt.Errorf("%w: Traefik reads the server credential from one Secret's tls.crt and tls.key", ErrShapeUnsupported)
	}
	if ca.Kind != KindSecret || (ca.Key != "ca.crt" && ca.Key != "tls.ca") {
		return "", "", fmt.Errorf("%w: Traefik's TLSOption reads the client CAs from a Secret's ca.crt or tls.ca", ErrShapeUnsupported)
	}
	return cert.Name, ca.Name, nil
}

// CheckTraefikShape is nil when Traefik can read shape.
func CheckTraefikShape(shape Shape) error {
	_, _, err := traefikSources(shape, "gateway")
	return err
}

// StartTraefik creates the TLSOption and the IngressRoute for the gateway
// Secret in shape in namespace ns, starts binary with its CRD provider
// reading that namespace through kubeconfig, on a new entrypoint in dir,
// and returns once the entrypoint serves TLS.
func StartTraefik(ctx context.Context, c client.Client, kubeconfig, binary, ns string, shape Shape, gateway, dir string) (*Traefik, error) {
	server, bundle, err := traefikSources(shape, gateway)
	if err != nil {
		return nil, err
	}
	for _, obj := range traefikObjects(ns, server, bundle) {
		if err := c.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("creating Traefik's %s: %w", obj.GetKind(), err)
		}
	}
	addr, err := controlplane.FreeAddress()
	if err != nil {
		return nil, err
	}
	t := &Traefik{addr: addr, log: filepath.Join(dir, "traefik.log")}
	args := []string{
		"--global.checkNewVersion=false", "--global.sendAnonymousUsage=false",
		"--entryPoints.mtls.address=" + addr,
		"--providers.kubernetesCRD.namespaces=" + ns,
		"--providers.kubernetesCRD.disableClusterScopeResources=true",
		"--log.level=INFO", "--log.noColor=true",
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	t.p, err = startCmd(t.log, cmd)
	if err != nil {
		return nil, err
	}
	if err := waitTLS(ctx, t.p, addr, 2*time.Minute); err != nil {
		t.Stop()
		return nil, err
	}
	return t, nil
}

// traefikObjects are the TLSOption and the IngressRoute of a gateway.
func traefikObjects(ns, server, bundle string) []*unstructured.Unstructured {
	option := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "TLSOption",
		"metadata": map[string]any{"namespace": ns, "name": "mtls"},
		"spec": map[string]any{
			"clientAuth": map[string]any{"secretNames": []any{bundle}, "clientAuthType": "RequireAndVerifyClientCert"},
		},
	}}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
		"metadata": map[string]any{"namespace": ns, "name": "gateway"},
		"spec": map[string]any{
			"entryPoints": []any{"mtls"},
			"routes": []any{map[string]any{
				"kind": "Rule", "match": "Host(`" + ServerName + "`)",
				"services": []any{map[string]any{"kind": "TraefikService", "name": "noop@internal"}},
			}},
			"tls": map[string]any{"secretName": server, "options": map[string]any{"name": "mtls", "namespace": ns}},
		},
	}}
	return []*unstructured.Unstructured{option, route}
}

// InstallTraefikCRDs installs the CRDs of the Traefik module that built
// the binary, found in moduleDir, on the API server of cfg.
func InstallTraefikCRDs(cfg *rest.Config, moduleDir string) error {
	path := filepath.Join(moduleDir, "docs", "content", "reference", "dynamic-configuration", "kubernetes-crd-definition-v1.yml")
	_, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true})
	return err
}

// TraefikModuleDir is the directory of the Traefik module that
// test/tools/traefik pins, in the module cache (make traefik downloads it).
func TraefikModuleDir(repoRoot string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/traefik/traefik/v3")
	cmd.Dir = filepath.Join(repoRoot, "test", "tools", "traefik")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating the Traefik module (run `make traefik`): %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
