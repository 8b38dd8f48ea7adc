package gateways

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/controlplane"
)

var (
	reportPath = flag.String("gateways.report", "", "write the table of handshakes per gateway, client stack, shape, root key and strategy to this markdown file")
	rotations  = flag.Int("gateways.rotations", 3, "root rotations per scenario")
	// Each handshake is a curl or gnutls-cli process: with every scenario
	// at once, a handshake a second per pair started 72 processes a second,
	// which on two cores starved cert-manager (issuances past their waits).
	interval = flag.Duration("gateways.interval", 2*time.Second, "time between two handshakes of one client with one gateway")
)

var (
	// shared is the cluster every scenario runs on.
	shared *cluster.Cluster
	// traefikBinary is bin/traefik.
	traefikBinary string
	// results are every scenario's figures, for the report.
	results = &table{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The informers of the projectors log through controller-runtime's
	// logger when it is not set; dualca's own log is collected by run.Start.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(runSuite(m))
}

// runSuite starts the cluster with Traefik's CRDs, runs the tests, and
// writes the report if one was asked for and every test passed.
func runSuite(m *testing.M) int {
	root, err := controlplane.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	traefikBinary = filepath.Join(root, "bin", "traefik")
	if _, err := os.Stat(traefikBinary); err != nil {
		fmt.Fprintf(os.Stderr, "no Traefik at %s (run `make gateway-tools`): %v\n", traefikBinary, err)
		return 1
	}
	moduleDir, err := TraefikModuleDir(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every scenario rotates its root at once when its traffic starts, and
	// cert-manager then takes more than cluster's default 30 s to reissue
	// some of those roots on two cores (seen: 7 of 12 scenarios timed out at
	// their first rotation, none later): each wait for cert-manager gets
	// longer here. It bounds cert-manager's work, not dualca's.
	c, err := cluster.Start(context.Background(), cluster.Options{Timeout: 2 * time.Minute})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		return 1
	}
	shared = c
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the cluster:", err)
		}
	}()
	if err := InstallTraefikCRDs(c.RESTConfig, moduleDir); err != nil {
		fmt.Fprintln(os.Stderr, "installing Traefik's CRDs:", err)
		return 1
	}
	// Every scenario runs at once, whatever the number of cores: they spend
	// their time waiting for rotations, and one after another they would
	// take six times as long. go test's default -parallel is GOMAXPROCS.
	if !flagSet("test.parallel") {
		if err := flag.Set("test.parallel", fmt.Sprint(len(Shapes)*len(Algorithms)*2)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	start := time.Now()
	code := m.Run()
	if *reportPath != "" {
		if code != 0 {
			fmt.Fprintln(os.Stderr, "a test failed: the report is not written")
		} else if err := os.WriteFile(*reportPath, results.markdown(traefikVersion(moduleDir), time.Since(start)), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, "writing the report:", err)
			code = 1
		} else {
			fmt.Println("gateways report written to", *reportPath)
		}
	}
	return code
}

// flagSet is whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// traefikVersion is the version of the Traefik module directory.
func traefikVersion(moduleDir string) string {
	_, v, _ := cutLast(filepath.Base(moduleDir), "@")
	return v
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	for i := len(s) - len(sep); i >= 0; i-- {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
