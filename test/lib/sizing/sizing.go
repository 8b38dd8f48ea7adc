// Package sizing turns dualca's measured memory into the memory request
// and limit to give it for a number of selected clients, and reads the
// sizing the chart claims.
//
// The model is two lines over the measured points: the resident set at
// rest (before and after a renewal fan-out) and at the process's highest
// (VmHWM, a renewal fan-out included), each a base plus so much per
// selected client (Fit). The request for n clients is the rest line's
// value, the limit the peak line's times (1 + Headroom), each rounded up
// to a multiple of Step. The benchmark's scale step (test/programs/bench)
// measures the points and prints the block the chart's README and the
// project's README hold; test/chart checks that the README's table is the
// model's and that values.yaml's defaults come from it, and the benchmark
// runs dualca at the table's largest size in a memory cgroup of that
// size's limit.
package sizing

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	// Headroom is the share the limit adds over the model's peak: the
	// per-client figures vary from run to run by up to about a fifth, and
	// dualca keeps Go's heap under 90 % of its limit (GOMEMLIMIT), so the
	// measured peak stays under that soft limit.
	Headroom = 0.25
	// Step is what requests and limits are rounded up to.
	Step = 16 << 20

	mib = 1 << 20
	kib = 1 << 10
)

// Line is a base plus so much per selected client, in the units the
// README states it: MiB for the base, KiB per client, each with one
// decimal.
type Line struct {
	BaseMiB, PerClientKiB float64
}

// At is the line's value for n clients, in bytes.
func (l Line) At(n int) float64 { return l.BaseMiB*mib + float64(n)*l.PerClientKiB*kib }

// Model is the measured lines: at rest and at the peak.
type Model struct {
	Rest, Peak Line
}

// Point is one measured resident set, in bytes, of a dualca selecting
// Clients clients.
type Point struct {
	Clients int
	Bytes   float64
}

// FitOver is the line over points: its slope is the least-squares slope
// of the points (none below zero), its base the least that leaves no
// point above it; both are rounded up to their unit's tenth, so the line
// as the README states it lies over every point too. A line through the
// largest per-client cost of any point would lie over them as well, but
// what a dualca with a few clients holds beyond one selecting none (the
// client caches' own structures, the collector's fixed headroom) is not
// per client, and spread over a thousand clients it made that line
// promise several times the memory fifty thousand were measured at.
func FitOver(points []Point) Line {
	if len(points) == 0 {
		return Line{}
	}
	var sn, sy float64
	for _, p := range points {
		sn += float64(p.Clients)
		sy += p.Bytes
	}
	n := float64(len(points))
	meanN, meanY := sn/n, sy/n
	var cov, vr float64
	for _, p := range points {
		dn := float64(p.Clients) - meanN
		cov += dn * (p.Bytes - meanY)
		vr += dn * dn
	}
	slope := 0.0
	if vr > 0 {
		slope = max(0, cov/vr)
	}
	up := func(x float64) float64 { return math.Ceil(x*10) / 10 }
	l := Line{PerClientKiB: up(slope / kib)}
	base := math.Inf(-1)
	for _, p := range points {
		base = max(base, p.Bytes-float64(p.Clients)*l.PerClientKiB*kib)
	}
	l.BaseMiB = up(base / mib)
	return l
}

// Fit is the model of the points measured at rest and at the peak.
func Fit(rest, peak []Point) Model {
	return Model{Rest: FitOver(rest), Peak: FitOver(peak)}
}

// Row is the request and limit, in bytes, for a number of clients.
type Row struct {
	Clients        int
	Request, Limit int64
}

// Row is the model's request and limit for n clients.
func (m Model) Row(n int) Row {
	return Row{Clients: n, Request: roundUp(m.Rest.At(n)), Limit: roundUp(m.Peak.At(n) * (1 + Headroom))}
}

func roundUp(x float64) int64 {
	return int64(math.Ceil(x/Step)) * Step
}

// Begin and End enclose the sizing block in a README.
const (
	Begin = "<!-- sizing: written by test/programs/bench's scale step, checked by test/chart -->"
	End   = "<!-- /sizing -->"
)

// Block is the sizing block for sizes: the model's line, and the table of
// requests and limits, between Begin and End. source says where the
// figures come from (a commit and a command).
func (m Model) Block(sizes []int, source string) string {
	var b strings.Builder
	b.WriteString(Begin + "\n")
	fmt.Fprintf(&b, "Measured %s.\n", source)
	fmt.Fprintf(&b, "Model: at rest %.1f MiB plus %.1f KiB per selected client; at the peak %.1f MiB plus %.1f KiB per selected client.\n\n",
		m.Rest.BaseMiB, m.Rest.PerClientKiB, m.Peak.BaseMiB, m.Peak.PerClientKiB)
	fmt.Fprintf(&b, "| selected clients | memory request (at rest) | memory limit (the peak + %.0f %%) |\n|---|---|---|\n", Headroom*100)
	for _, n := range sizes {
		r := m.Row(n)
		fmt.Fprintf(&b, "| %s | %s | %s |\n", Count(n), Quantity(r.Request), Quantity(r.Limit))
	}
	b.WriteString(End + "\n")
	return b.String()
}

// Count writes n with thousands separated by commas.
func Count(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Quantity is bytes as a Kubernetes quantity in Mi.
func Quantity(bytes int64) string { return strconv.FormatInt(bytes/mib, 10) + "Mi" }

// ParseQuantity reads a quantity in Mi or Gi.
func ParseQuantity(q string) (int64, error) {
	for suffix, unit := range map[string]int64{"Mi": mib, "Gi": 1 << 30} {
		if v, ok := strings.CutSuffix(q, suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("%q is not a quantity", q)
			}
			return n * unit, nil
		}
	}
	return 0, fmt.Errorf("%q is not in Mi or Gi", q)
}

var (
	modelLine = regexp.MustCompile(`(?m)^Model: at rest ([0-9.]+) MiB plus ([0-9.]+) KiB per selected client; at the peak ([0-9.]+) MiB plus ([0-9.]+) KiB per selected client\.$`)
	tableRow  = regexp.MustCompile(`(?m)^\| ([0-9,]+) \| ([0-9]+[MG]i) \| ([0-9]+[MG]i) \|$`)
)

// Parse reads the sizing block of a README: its model and its rows, and
// the block itself.
func Parse(readme string) (Model, []Row, string, error) {
	_, rest, ok := strings.Cut(readme, Begin)
	block, _, ok2 := strings.Cut(rest, End)
	if !ok || !ok2 {
		return Model{}, nil, "", errors.New("no sizing block")
	}
	block = Begin + block + End + "\n"
	var m Model
	mm := modelLine.FindStringSubmatch(block)
	if mm == nil {
		return Model{}, nil, "", errors.New("the sizing block has no model line")
	}
	for i, p := range []*float64{&m.Rest.BaseMiB, &m.Rest.PerClientKiB, &m.Peak.BaseMiB, &m.Peak.PerClientKiB} {
		v, err := strconv.ParseFloat(mm[i+1], 64)
		if err != nil {
			return Model{}, nil, "", err
		}
		*p = v
	}
	var rows []Row
	for _, r := range tableRow.FindAllStringSubmatch(block, -1) {
		n, err := strconv.Atoi(strings.ReplaceAll(r[1], ",", ""))
		if err != nil {
			return Model{}, nil, "", err
		}
		req, err1 := ParseQuantity(r[2])
		lim, err2 := ParseQuantity(r[3])
		if err := errors.Join(err1, err2); err != nil {
			return Model{}, nil, "", err
		}
		rows = append(rows, Row{Clients: n, Request: req, Limit: lim})
	}
	if len(rows) == 0 {
		return Model{}, nil, "", errors.New("the sizing block has no rows")
	}
	return m, rows, block, nil
}

// ChartREADME is the chart's README, relative to the repository.
const ChartREADME = "charts/dualca/README.md"

// Claim is the largest size the chart's README claims, and its limit.
func Claim(root string) (Row, error) {
	b, err := os.ReadFile(filepath.Join(root, ChartREADME))
	if err != nil {
		return Row{}, err
	}
	_, rows, _, err := Parse(string(b))
	if err != nil {
		return Row{}, fmt.Errorf("%s: %w", ChartREADME, err)
	}
	largest := rows[0]
	for _, r := range rows[1:] {
		if r.Clients > largest.Clients {
			largest = r
		}
	}
	return largest, nil
}

// ChartValues is the chart's values file, relative to the repository.
const ChartValues = "charts/dualca/values.yaml"

// Defaults is the memory request and limit the chart gives dualca unless
// told otherwise (values.yaml), in bytes.
func Defaults(root string) (request, limit int64, err error) {
	raw, err := os.ReadFile(filepath.Join(root, ChartValues))
	if err != nil {
		return 0, 0, err
	}
	var values struct {
		Resources struct {
			Requests, Limits map[string]string
		}
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", ChartValues, err)
	}
	request, err1 := ParseQuantity(values.Resources.Requests["memory"])
	limit, err2 := ParseQuantity(values.Resources.Limits["memory"])
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, fmt.Errorf("%s: resources.requests/limits.memory: %w", ChartValues, err)
	}
	return request, limit, nil
}
