// Package image tests dualca's container image the way a platform team
// gets it: built by ocibuild (what `make image` runs) into an OCI layout,
// pushed to a real registry (the CNCF distribution registry, on 127.0.0.1),
// pulled back by digest and inspected; the chart pushed to the same
// registry as an OCI artifact and installed from it on a real API server
// with the pushed digest; and the pulled image run with runc, as uid 65532
// on a read-only root, with the arguments the chart rendered.
//
// The image is built once per test run and shared; the tools come from
// bin/ (`make image-tools`, part of `make test`).
package image

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// The build every test shares: the chart's appVersion as the version,
// like `make image`, and a fixed revision and creation time.
const (
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	testEpoch    = int64(1767225600) // 2026-01-01T00:00:00Z
)

// shutdown holds what TestMain stops after the tests: the registry.
var shutdown struct {
	sync.Mutex
	funcs []func()
}

func atShutdown(f func()) {
	shutdown.Lock()
	defer shutdown.Unlock()
	shutdown.funcs = append(shutdown.funcs, f)
}

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime; nothing here needs it.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	shutdown.Lock()
	for _, f := range shutdown.funcs {
		f()
	}
	shutdown.Unlock()
	os.Exit(code)
}

// tool is the path of a tool `make image-tools` (or `make helm`) built.
func tool(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(controlplane.TestRepoRoot(t), "bin", name)
	if name == "helm" && os.Getenv("HELM") != "" {
		p = os.Getenv("HELM")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no %s (run `make image-tools helm`): %v", p, err)
	}
	return p
}

// chartField reads a top-level field of charts/dualca/Chart.yaml.
func chartField(t testing.TB, field string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(controlplane.TestRepoRoot(t), "charts", "dualca", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("no %s in Chart.yaml", field)
	return ""
}

// build is one run of ocibuild build.
type build struct {
	dir    string // its -out: dir/oci is the layout, dir/sbom the SBOMs
	digest string // the index digest it printed last
	output string
}

// buildImage runs ocibuild build into dir, as `make image` does, with
// extra flags; it fails the test unless the last line printed is exactly
// the index digest.
func buildImage(t testing.TB, dir string, extra ...string) build {
	t.Helper()
	args := append([]string{"build", "-dir", controlplane.TestRepoRoot(t), "-out", dir,
		"-version", chartField(t, "appVersion"), "-revision", testRevision, "-created", fmt.Sprint(testEpoch)}, extra...)
	start := time.Now()
	cmd := exec.Command(tool(t, "ocibuild"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ocibuild build: %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	last := lines[len(lines)-1]
	if !digestRE.MatchString(last) {
		t.Fatalf("the last line of ocibuild build is %q, not sha256:<64 hex>:\n%s", last, out)
	}
	t.Logf("built %s in %s:\n%s", last, time.Since(start).Round(100*time.Millisecond), out)
	return build{dir: dir, digest: last, output: string(out)}
}

// shared is the build every test uses, made by whichever test asks first.
var shared struct {
	once sync.Once
	b    build
	ok   bool
}

func sharedBuild(t testing.TB) build {
	t.Helper()
	shared.once.Do(func() {
		// Not t.TempDir: the build outlives the test that made it.
		dir, err := os.MkdirTemp("", "dualca-image-")
		if err != nil {
			t.Fatal(err)
		}
		atShutdown(func() { _ = os.RemoveAll(dir) })
		b := buildImage(t, dir)
		shared.b, shared.ok = b, true
	})
	if !shared.ok {
		t.Fatal("the shared image build failed (see the first test that asked for it)")
	}
	return shared.b
}
