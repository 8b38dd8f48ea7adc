package alerts

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// defaultRunbooks is the chart's default prometheusRule.runbookBaseURL.
const defaultRunbooks = "https://github.com/dualca/dualca/blob/main/docs/runbooks.md"

// runbookSections returns the anchors of the second-level headings of
// docs/runbooks.md, as a Markdown renderer (GitHub's) makes them: lower
// case, spaces as dashes, other punctuation dropped.
func runbookSections(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(controlplane.TestRepoRoot(t), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	anchors := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		heading, ok := strings.CutPrefix(s.Text(), "## ")
		if !ok {
			continue
		}
		anchor := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(heading))
		anchors[anchor] = heading
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}

// An alert pages someone who then needs to know what to do: each one links
// to its own section of docs/runbooks.md, and each section there belongs to
// an alert the chart ships.
func TestEveryAlertLinksItsRunbook(t *testing.T) {
	sections := runbookSections(t)
	pr, _ := render(t, "dualca", testValues...)
	alerts := pr.alerts()
	if len(alerts) == 0 {
		t.Fatal("the PrometheusRule holds no alert")
	}
	linked := map[string]bool{}
	for name, r := range alerts {
		url, ok := r.Annotations["runbook_url"]
		if !ok {
			t.Errorf("%s has no runbook_url annotation", name)
			continue
		}
		base, anchor, found := strings.Cut(url, "#")
		if !found || base != defaultRunbooks {
			t.Errorf("%s: runbook_url %q, want %s#<anchor>", name, url, defaultRunbooks)
			continue
		}
		heading, ok := sections[anchor]
		if !ok {
			t.Errorf("%s: runbook_url %q: docs/runbooks.md has no section #%s", name, url, anchor)
			continue
		}
		if heading != name {
			t.Errorf("%s: runbook_url %q leads to the section of %s", name, url, heading)
		}
		linked[anchor] = true
	}
	for anchor, heading := range sections {
		if !linked[anchor] {
			t.Errorf("docs/runbooks.md has a section %q that no alert links to", heading)
		}
	}
}

// The runbooks may live where the on-call reads them (a wiki, a fork): the
// base URL is a value, and the anchors stay.
func TestRunbookBaseURLComesFromValues(t *testing.T) {
	const base = "https://wiki.example.com/sre/dualca"
	pr, _ := render(t, "dualca", append(testValues, "--set", "prometheusRule.runbookBaseURL="+base)...)
	for name, r := range pr.alerts() {
		if want := base + "#" + strings.ToLower(name); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", name, r.Annotations["runbook_url"], want)
		}
	}
	if _, err := helmTemplate(t, "dualca", append(testValues, "--set", "prometheusRule.runbookBaseURL=wiki page")...); err == nil {
		t.Error("helm template accepted prometheusRule.runbookBaseURL=\"wiki page\", want the schema to reject it")
	}
}
