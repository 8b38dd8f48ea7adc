package sizing

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRowRoundsUpWithHeadroom(t *testing.T) {
	g := NewWithT(t)
	m := Model{Rest: Line{BaseMiB: 38, PerClientKiB: 13}, Peak: Line{BaseMiB: 40, PerClientKiB: 25}}
	r := m.Row(10000)
	// rest 38 MiB + 130000 KiB = 164.95 MiB → 176Mi; peak (40 MiB + 250000 KiB) × 1.25 = 355.2 MiB → 368Mi.
	g.Expect(Quantity(r.Request)).To(Equal("176Mi"))
	g.Expect(Quantity(r.Limit)).To(Equal("368Mi"))
	g.Expect(m.Row(0)).To(Equal(Row{Clients: 0, Request: 48 << 20, Limit: 64 << 20}))
}

// The line lies over every point, and its slope is the points' own: a
// point whose clients cost more each only because it has few of them
// raises the base, not the cost of every client.
func TestTheLineLiesOverEveryPoint(t *testing.T) {
	g := NewWithT(t)
	const mb = 1 << 20
	// The figures of a make bench run: at rest and after the fan-out.
	points := []Point{{0, 35.9 * mb}, {1000, 57.4 * mb}, {1000, 61.8 * mb}, {5000, 72.2 * mb}, {5000, 83.1 * mb},
		{10000, 98.3 * mb}, {10000, 128.6 * mb}, {50000, 317.6 * mb}, {50000, 384.4 * mb}}
	l := FitOver(points)
	for _, p := range points {
		g.Expect(l.At(p.Clients)).To(BeNumerically(">=", p.Bytes), "%d clients", p.Clients)
	}
	g.Expect(l.PerClientKiB).To(BeNumerically("~", 6.6, 0.3), "the points' slope")
	g.Expect(l.At(50000)).To(BeNumerically("<", 1.25*384.4*mb), "close over the largest point")
	// The largest per-client cost of any point, (61.8-35.9) MiB / 1000 = 26.5 KiB, is not the slope.
	g.Expect(l.PerClientKiB).To(BeNumerically("<", 10))

	g.Expect(FitOver([]Point{{0, 40 * mb}, {5000, 90 * mb}})).To(Equal(Line{BaseMiB: 40, PerClientKiB: 10.3}), "two points: the line through them, rounded up")
	g.Expect(FitOver([]Point{{0, 40 * mb}, {5000, 30 * mb}})).To(Equal(Line{BaseMiB: 40}), "no slope below zero")
	g.Expect(FitOver(nil)).To(Equal(Line{}))
}

func TestBlockParsesBack(t *testing.T) {
	g := NewWithT(t)
	m := Model{Rest: Line{BaseMiB: 39.9, PerClientKiB: 13.4}, Peak: Line{BaseMiB: 52.1, PerClientKiB: 25.7}}
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
