// Package controlplane tells the tests, the demo, the benchmark and the e2e
// harness where things are on this machine: the kube-apiserver and etcd
// binaries ($KUBEBUILDER_ASSETS when set, else the repository's bin, where
// `make control-plane` builds them), the other tools built there (helm,
// promtool), cert-manager's CRDs, the repository, and a free local address
// for the endpoints of a process about to start.
package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Assets is the directory holding kube-apiserver and etcd, for
// envtest.Environment.BinaryAssetsDirectory.
func Assets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// RepoRoot is the nearest directory at or above the working directory that
// holds a go.mod: the repository, for anything run by go test or go run
// from inside it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// CertManagerCRDs is the directory of cert-manager's CRDs: deploy/crds of
// the cert-manager module that the repository's go.mod requires, which the
// module cache holds already since dualca imports its API types.
func CertManagerCRDs() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "-C", root, "list", "-m", "-f", "{{.Dir}}", "github.com/cert-manager/cert-manager").Output()
	if err != nil {
		return "", fmt.Errorf("locating the cert-manager module: %w", err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// FreeAddress is a loopback address, host:port, with a port nobody listens
// on now: for the metrics or health endpoint of a process started next.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// TestRepoRoot is RepoRoot for a test, which fails when there is none.
func TestRepoRoot(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Tool is the path of the tool that `make <name>` builds into the
// repository's bin, or $env when that is set. It fails the test, saying
// what to run, when there is no such file.
func Tool(t testing.TB, name, env string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = filepath.Join(TestRepoRoot(t), "bin", name)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no %s at %s (run `make %s`, or set $%s): %v", name, path, name, env, err)
	}
	return path
}

// Helm runs the helm Tool ($HELM overrides it) with args and returns its
// standard output; on failure the error carries its standard error. It
// runs with a configuration, cache and data directory of the test's own,
// so no user's repositories or plugins play a part.
func Helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(Tool(t, "helm", "HELM"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("running helm: %w: %s", err, stderr.String())
	}
	return stdout.Bytes(), nil
}
