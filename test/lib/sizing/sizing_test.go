package sizing

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRowRoundsUpWithHeadroom(t *testing.T) {
	g := NewWithT(t)
	m := Model{BaseMiB: 38, RestKiB: 13, PeakKiB: 25}
	r := m.Row(10000)
	// rest 38 MiB + 130000 KiB = 164.95 MiB → 176Mi; peak (38 MiB + 250000 KiB) × 1.25 = 352.7 MiB → 368Mi.
	g.Expect(Quantity(r.Request)).To(Equal("176Mi"))
	g.Expect(Quantity(r.Limit)).To(Equal("368Mi"))
	g.Expect(m.Row(0)).To(Equal(Row{Clients: 0, Request: 48 << 20, Limit: 48 << 20}))
}

func TestNewRoundsFiguresUp(t *testing.T) {
	g := NewWithT(t)
	g.Expect(New(38<<20+1, 13*1024+1, 25*1024)).To(Equal(Model{BaseMiB: 38.1, RestKiB: 13.1, PeakKiB: 25}))
}

func TestBlockParsesBack(t *testing.T) {
	g := NewWithT(t)
	m := New(39_900_000, 13_345.6, 25_611.2)
	block := m.Block([]int{1000, 10000}, "by `x` at commit `abc`")
	readme := "# chart\n\nSizing:\n\n" + block + "\nmore text\n"
	got, rows, gotBlock, err := Parse(readme)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(m))
	g.Expect(rows).To(Equal([]Row{m.Row(1000), m.Row(10000)}))
	g.Expect(gotBlock).To(Equal(block))
	g.Expect(block).To(ContainSubstring("| 10,000 | "))
	_, _, _, err = Parse("no block")
	g.Expect(err).To(MatchError(ContainSubstring("no sizing block")))
}

func TestQuantities(t *testing.T) {
	g := NewWithT(t)
	g.Expect(ParseQuantity("352Mi")).To(Equal(int64(352 << 20)))
	g.Expect(ParseQuantity("2Gi")).To(Equal(int64(2 << 30)))
	_, err := ParseQuantity("300M")
	g.Expect(err).To(HaveOccurred())
	g.Expect(Count(50000)).To(Equal("50,000"))
	g.Expect(Count(999)).To(Equal("999"))
}
