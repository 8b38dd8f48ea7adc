package chart

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/sizing"
)

// The chart README's sizing table is its model's (the figures the
// benchmark's scale step measured, stated above it), values.yaml's default
// memory request is the table's first row's and its limit the table's
// largest size's (the size the benchmark checks that limit at), and the
// project's README holds the same block.
func TestSizingTableAndValuesAgree(t *testing.T) {
	g := NewWithT(t)
	root := controlplane.TestRepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, sizing.ChartREADME))
	g.Expect(err).NotTo(HaveOccurred())
	model, rows, block, err := sizing.Parse(string(readme))
	g.Expect(err).NotTo(HaveOccurred())
	first, largest := chartSizing(g)
	g.Expect(first).To(Equal(rows[0]))
	for _, r := range rows {
		g.Expect(r).To(Equal(model.Row(r.Clients)), "the row of %d clients is the model's", r.Clients)
	}
	for i := 1; i < len(rows); i++ {
		g.Expect(rows[i].Clients).To(BeNumerically(">", rows[i-1].Clients), "rows in increasing order")
	}
	claim, err := sizing.Claim(root)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claim).To(Equal(largest), "the largest size claimed is the last row")

	request, limit, err := sizing.Defaults(root)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(request).To(Equal(first.Request), "values.yaml's memory request is the first row's")
	g.Expect(limit).To(Equal(claim.Limit), "values.yaml's memory limit is the largest size's")

	project, err := os.ReadFile(filepath.Join(root, "README.md"))
	g.Expect(err).NotTo(HaveOccurred())
	_, _, projectBlock, err := sizing.Parse(string(project))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(projectBlock).To(Equal(block), "README.md holds the chart README's sizing block")
}

// chartSizing is the first and the largest row of the chart README's
// sizing table: values.yaml's default request and limit.
func chartSizing(g *WithT) (first, largest sizing.Row) {
	root, err := controlplane.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	readme, err := os.ReadFile(filepath.Join(root, sizing.ChartREADME))
	g.Expect(err).NotTo(HaveOccurred())
	_, rows, _, err := sizing.Parse(string(readme))
	g.Expect(err).NotTo(HaveOccurred())
	return rows[0], rows[len(rows)-1]
}
