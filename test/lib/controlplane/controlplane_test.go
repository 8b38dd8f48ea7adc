package controlplane

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

func TestKubeVersionsAreOldestFirstEachWithItsChecksums(t *testing.T) {
	vs, err := KubeVersions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) < 2 {
		t.Fatalf("want several supported versions, got %v", vs)
	}
	root := TestRepoRoot(t)
	for i, v := range vs {
		if _, err := os.Stat(filepath.Join(root, versionsDir, v+".sum")); err != nil {
			t.Errorf("%s: no go.sum beside its module file: %v", v, err)
		}
		if i > 0 && !version.MustParseSemantic(vs[i-1]).LessThan(version.MustParseSemantic(v)) {
			t.Errorf("not oldest first: %s before %s", vs[i-1], v)
		}
	}
}

func TestKubeVersionIsTheNewestUnlessChosen(t *testing.T) {
	vs, err := KubeVersions()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(KubeVersionEnv, "")
	if v, err := KubeVersion(); err != nil || v != vs[len(vs)-1] {
		t.Errorf("unset: got %q, %v; want the newest, %s", v, err, vs[len(vs)-1])
	}
	t.Setenv(KubeVersionEnv, vs[0])
	if v, err := KubeVersion(); err != nil || v != vs[0] {
		t.Errorf("%s: got %q, %v", vs[0], v, err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", "")
	if d, err := Assets(); err != nil || d != filepath.Join(TestRepoRoot(t), "bin", "k8s", vs[0]) {
		t.Errorf("assets of %s: got %q, %v", vs[0], d, err)
	}
	t.Setenv(KubeVersionEnv, "v1.20.0")
	if v, err := KubeVersion(); err == nil {
		t.Errorf("an unsupported version was accepted: %q", v)
	}
}

// The programs' module sits inside the repository with a go.mod of its
// own: run from there, a program or its tests still find the repository's
// bin/, docs/ and go.mod.
func TestRepoRootIsTheProductModuleNotANestedOne(t *testing.T) {
	root := t.TempDir()
	nested := filepath.Join(root, "test", "programs", "bench")
	if err := os.MkdirAll(nested, 0o750); err != nil {
		t.Fatal(err)
	}
	for path, module := range map[string]string{
		filepath.Join(root, "go.mod"):                     "github.com/dualca/dualca",
		filepath.Join(root, "test", "programs", "go.mod"): "github.com/dualca/dualca/test/programs",
	} {
		if err := os.WriteFile(path, []byte("module "+module+"\n\ngo 1.26\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(nested)
	got, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The temporary directory may be reached through a symbolic link.
	want, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	if got, err = filepath.EvalSymlinks(got); err != nil || got != want {
		t.Fatalf("RepoRoot() = %s (%v), want %s", got, err, want)
	}
}

func TestFreeAddressIsLoopbackBelowTheEphemeralRangeAndFree(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr, err := FreeAddress()
		if err != nil {
			t.Fatal(err)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		if host != "127.0.0.1" {
			t.Errorf("%s: not on 127.0.0.1", addr)
		}
		if n, _ := strconv.Atoi(port); n < portFloor || n >= low {
			t.Errorf("%s: port outside [%d, %d), where the kernel may hand it to another process", addr, portFloor, low)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s cannot be bound: %v", addr, err)
			continue
		}
		_ = l.Close()
	}
}
