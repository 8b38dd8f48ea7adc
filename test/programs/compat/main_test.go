package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTheReportHasACellPerVersionAndSuiteAndShowsAFailure(t *testing.T) {
	rep := &report{Suites: suites, Oldest: "v1.34.4", Newest: "v1.35.4", CertManager: "v1.21.2", Commit: "abc", Took: time.Minute}
	for _, v := range []string{"v1.34.4", "v1.35.4"} {
		r := row{Version: v, Took: 4 * time.Second}
		for i := range suites {
			r.Results = append(r.Results, result{Passed: v != "v1.34.4" || i != 1, Took: time.Second})
		}
		rep.Rows = append(rep.Rows, r)
	}
	path := filepath.Join(t.TempDir(), "compatibility.md")
	if err := write(path, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{
		"| v1.34.4 | pass (1s) | **FAIL** (1s) | pass (1s) | pass (1s) | 4s |",
		"| v1.35.4 | pass (1s) | pass (1s) | pass (1s) | pass (1s) | 4s |",
		"This run failed on at least one version",
		"Kubernetes 1.34 to 1.35,",
		"cert-manager v1.21.2",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the report lacks %q:\n%s", want, page)
		}
	}
}
