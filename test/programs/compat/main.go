// Command compat is `make test-compat`: it runs the suites that matter to a
// user's cluster (the integration suite, the e2e rotations of both
// strategies, the RBAC e2e and the chart on a real API server) against each
// supported Kubernetes version in turn, then writes docs/compatibility.md
// from what it measured. A failure names the version and the suite, and the
// exit code is non-zero; the remaining versions still run, so that one run
// shows the whole matrix.
package main

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// suite is one column of the matrix: a go test run of one package,
// restricted to some tests.
type suite struct {
	Name string
	pkg  string
	run  string // -run pattern; empty runs the whole package
}

// suites are the columns, in order.
var suites = []suite{
	{Name: "integration", pkg: "./test/integration/"},
	{Name: "e2e rotations", pkg: "./test/e2e/",
		run: "^(TestZeroDowntimeRotationsFailNoHandshake|TestLegacyRotationsCutClientsOffAndConverge)$"},
	{Name: "RBAC e2e", pkg: "./test/e2e/", run: "^TestChartRBAC"},
	{Name: "chart", pkg: "./test/chart/",
		run: "^(TestTheAPIServerAcceptsEveryRenderedObject|TestTheChartInstallsUpgradesAndUninstalls)$"},
}

// result is one cell of the matrix.
type result struct {
	Passed bool
	Took   time.Duration
}

// row is one version's results, in the order of suites.
type row struct {
	Version string
	Results []result
	Took    time.Duration
}

// report is what the template renders.
type report struct {
	Suites                    []suite
	Rows                      []row
	Date, Commit, Go, Machine string
	CertManager, Etcd         string
	Oldest, Newest            string
	ClientGo                  string // the client-go dualca is built with
	CertManagerAPI            string // the cert-manager module of dualca's go.mod
	Partial                   bool   // some supported versions did not run
	Took                      time.Duration
}

//go:embed compatibility.md.tmpl
var page string

func main() {
	if err := controlplane.ChdirRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
	k8sBin := flag.String("k8s-bin", "bin/k8s", "folder holding <version>/kube-apiserver and <version>/etcd for each version")
	versions := flag.String("versions", "", "the versions to run, separated by spaces or commas (default: every supported one)")
	certManager := flag.String("cert-manager", "", "the cert-manager version the e2e suites run (for the report)")
	etcdVersion := flag.String("etcd", "", "the etcd version serving every API server (for the report)")
	out := flag.String("out", "docs/compatibility.md", "the report to write")
	flag.Parse()
	if err := run(*k8sBin, *versions, *certManager, *etcdVersion, *out); err != nil {
		fmt.Fprintln(os.Stderr, "compat:", err)
		os.Exit(1)
	}
}

func run(k8sBin, versionList, certManager, etcdVersion, out string) error {
	all, err := controlplane.KubeVersions()
	if err != nil {
		return err
	}
	versions := strings.FieldsFunc(versionList, func(r rune) bool { return r == ' ' || r == ',' })
	if len(versions) == 0 {
		versions = all
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := &report{Suites: suites, CertManager: certManager, Etcd: etcdVersion,
		Oldest: all[0], Newest: all[len(all)-1], Partial: len(versions) < len(all), ClientGo: dependency("k8s.io/client-go"),
		CertManagerAPI: dependency("github.com/cert-manager/cert-manager"),
		Date:           time.Now().UTC().Format("2006-01-02 15:04 UTC"), Commit: commit(),
		Go: runtime.Version(), Machine: fmt.Sprintf("%s/%s, %d CPUs", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())}
	start := time.Now()
	var failed []string
	for _, v := range versions {
		assets, err := filepath.Abs(filepath.Join(k8sBin, v))
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
			return fmt.Errorf("kube-apiserver %s: %w (make control-planes builds every version)", v, err)
		}
		r := row{Version: v}
		for _, s := range suites {
			res := s.runOn(ctx, v, assets)
			r.Results = append(r.Results, res)
			r.Took += res.Took
			verdict := "ok  "
			if !res.Passed {
				verdict = "FAIL"
				failed = append(failed, v+" "+s.Name)
			}
			fmt.Printf("%s Kubernetes %s: %s (%s)\n", verdict, v, s.Name, res.Took.Round(time.Second))
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted during Kubernetes %s: %w", v, ctx.Err())
			}
		}
		rep.Rows = append(rep.Rows, r)
	}
	rep.Took = time.Since(start)
	if err := write(out, rep); err != nil {
		return err
	}
	fmt.Printf("wrote %s: %d versions in %s\n", out, len(versions), rep.Took.Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("failed on %s", strings.Join(failed, ", "))
	}
	return nil
}

// runOn runs the suite against Kubernetes version v, whose binaries are in
// assets, every line of its output prefixed with the version and the suite.
func (s suite) runOn(ctx context.Context, v, assets string) result {
	args := []string{"test", "-count=1", "-timeout", "15m"}
	if s.run != "" {
		args = append(args, "-run", s.run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, s.pkg)...)
	cmd.Env = append(os.Environ(), controlplane.KubeVersionEnv+"="+v, "KUBEBUILDER_ASSETS="+assets)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var wg sync.WaitGroup
	wg.Go(func() {
		prefix := fmt.Sprintf("[%s %s] ", v, s.Name)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
		for sc.Scan() {
			fmt.Println(prefix + sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr) // a line too long: drain, the exit code tells
	})
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	_ = pw.Close()
	wg.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Printf("[%s %s] running go test: %v\n", v, s.Name, err)
	}
	return result{Passed: err == nil, Took: took}
}

// dependency is the version of module path that dualca's go.mod requires.
func dependency(path string) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path).Output()
	if err != nil {
		return "(unknown version)"
	}
	return strings.TrimSpace(string(out))
}

// commit is the commit the run tested, with -dirty when the work tree had
// changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if exec.Command("git", "diff", "--quiet", "HEAD", "--", ".", ":!docs/compatibility.md").Run() != nil {
		c += "-dirty"
	}
	return c
}

// write renders the report into path.
func write(path string, rep *report) error {
	t, err := template.New("page").Funcs(template.FuncMap{
		"duration": func(d time.Duration) string { return d.Round(time.Second).String() },
		// v1.34.4 -> 1.34
		"minor": func(v string) string {
			parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
			return strings.Join(parts[:min(2, len(parts))], ".")
		},
	}).Parse(page)
	if err != nil {
		return fmt.Errorf("parsing the report's template: %w", err)
	}
	var b strings.Builder
	if err := t.Execute(&b, rep); err != nil {
		return fmt.Errorf("rendering the report: %w", err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil { //nolint:gosec // G306: a document of the repository, read by everyone
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}
