// Package controlplane tells the tests, the demo, the benchmark and the e2e
// harness where things are on this machine: the kube-apiserver and etcd
// binaries of the Kubernetes version under test ($KUBEBUILDER_ASSETS when
// set, else the repository's bin/k8s/<version>, where `make control-plane`
// builds them), the other tools built there (helm, promtool), cert-manager's
// CRDs, the repository, and a free local address for the endpoints of a
// process about to start.
package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeVersionEnv names the variable that chooses the Kubernetes version the
// tests run against, e.g. KUBE_VERSION=v1.34.4; unset, the newest.
const KubeVersionEnv = "KUBE_VERSION"

// versionsDir holds one module file per supported Kubernetes version, the
// list that test/tools/tools.mk builds from.
const versionsDir = "test/tools/kube-apiserver/versions"

// KubeVersions are the Kubernetes versions the tests can run against, oldest
// first: one per module file in test/tools/kube-apiserver/versions.
func KubeVersions() ([]string, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(root, versionsDir, "v*.mod"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no Kubernetes version in %s: %w", versionsDir, errors.Join(err, os.ErrNotExist))
	}
	type parsed struct {
		name string
		v    *version.Version
	}
	var vs []parsed
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".mod")
		v, err := version.ParseSemantic(name)
		if err != nil {
			return nil, fmt.Errorf("module file %s: %w", f, err)
		}
		vs = append(vs, parsed{name, v})
	}
	slices.SortFunc(vs, func(a, b parsed) int {
		switch {
		case a.v.LessThan(b.v):
			return -1
		case b.v.LessThan(a.v):
			return 1
		}
		return 0
	})
	names := make([]string, len(vs))
	for i, p := range vs {
		names[i] = p.name
	}
	return names, nil
}

// KubeVersion is the Kubernetes version under test: $KUBE_VERSION, which
// must be one of KubeVersions, else the newest of them.
func KubeVersion() (string, error) {
	all, err := KubeVersions()
	if err != nil {
		return "", err
	}
	v := os.Getenv(KubeVersionEnv)
	if v == "" {
		return all[len(all)-1], nil
	}
	if !slices.Contains(all, v) {
		return "", fmt.Errorf("$%s=%s is not a supported version (%s)", KubeVersionEnv, v, strings.Join(all, ", "))
	}
	return v, nil
}

// Assets is the directory holding kube-apiserver and etcd, for
// envtest.Environment.BinaryAssetsDirectory: $KUBEBUILDER_ASSETS when set
// (make sets it to bin/k8s/$KUBE_VERSION), else the repository's
// bin/k8s/<KubeVersion>.
func Assets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	v, err := KubeVersion()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin", "k8s", v), nil
}

// ExpectKubeVersion fails unless the API server at cfg is the Kubernetes
// version under test, so that a run meant for one version never passes on
// another's binaries. It checks nothing when $KUBEBUILDER_ASSETS alone
// chose the binaries, without $KUBE_VERSION to say what they are.
func ExpectKubeVersion(cfg *rest.Config) error {
	if os.Getenv("KUBEBUILDER_ASSETS") != "" && os.Getenv(KubeVersionEnv) == "" {
		return nil
	}
	want, err := KubeVersion()
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("asking the API server its version: %w", err)
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return fmt.Errorf("asking the API server its version: %w", err)
	}
	if info.GitVersion != want {
		dir, _ := Assets()
		return fmt.Errorf("the API server is %s, not %s as $%s asks: %s holds another build (remove it, then make control-plane)",
			info.GitVersion, want, KubeVersionEnv, dir)
	}
	return nil
}

// RepoRoot is the nearest directory at or above the working directory whose
// go.mod is dualca's module: the repository, for anything run by go test
// or go run from inside it, test/programs (a module of its own) included.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresModule(filepath.Join(dir, "go.mod"), productModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s at or above the working directory", productModule)
		}
		dir = parent
	}
}

// ChdirRepoRoot makes the repository the working directory: a program of
// test/programs (a module of its own, run with go -C test/programs) then
// reads and writes the repository's paths, its flags' relative paths
// included, and runs go and git there, as from the repository's root.
func ChdirRepoRoot() error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	return os.Chdir(root)
}

// productModule is the module path of dualca's go.mod.
const productModule = "github.com/dualca/dualca"

// declaresModule tells whether the go.mod file at path declares module.
func declaresModule(path, module string) bool {
	b, err := os.ReadFile(path) //nolint:gosec // G304: a go.mod above the working directory
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == module
		}
	}
	return false
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
// on now: for the metrics or health endpoint of a process started next, or
// a gateway's listener.
//
// The port is taken below the kernel's ephemeral range. The kernel hands a
// port of that range to every listener on port 0 and every outgoing
// connection, so on a busy machine one of them can take a port of it in the
// moment between this call and the bind that follows; then the process
// started next fails to bind, or a test talks to a stranger's server. Below
// the range only an explicit bind takes a port, and the pick is random
// among thousands.
func FreeAddress() (string, error) {
	low := ephemeralLow()
	if low-portFloor < 1000 {
		return listenClose("127.0.0.1:0")
	}
	var last error
	for range 100 {
		port := portFloor + rand.IntN(low-portFloor) //nolint:gosec // G404: a port, not a secret
		addr, err := listenClose(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			return addr, nil
		}
		last = err
	}
	return "", fmt.Errorf("no free port in [%d, %d) after 100 tries: %w", portFloor, low, last)
}

// portFloor is the lowest port FreeAddress picks: above the ports that
// services of this machine commonly use.
const portFloor = 10000

// ephemeralLow is the first port of the kernel's ephemeral range, Linux's
// default (32768) when the range cannot be read.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &low)
	}
	return low
}

// listenClose binds addr and closes it again, returning the address bound.
func listenClose(addr string) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	bound := l.Addr().String()
	return bound, l.Close()
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

// AdminKubeconfig writes a kubeconfig of a cluster administrator of env (a
// user in system:masters, as helm is run by one) into a temporary directory
// of t and returns its path.
func AdminKubeconfig(t testing.TB, env *envtest.Environment) string {
	t.Helper()
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatalf("adding an administrator to the API server: %v", err)
	}
	kc, err := admin.KubeConfig()
	if err != nil {
		t.Fatalf("an administrator's kubeconfig: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
