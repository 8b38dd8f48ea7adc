package bundle_test

import (
	"crypto/x509"
	"math/rand/v2"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestBondsFollowTheClients: a Memory kept across decisions remembers
// each client's bond to each root by the certificates it was computed from.
// Whatever happens to the list between two decisions (a leaf renewed in
// place, a ca.crt rewritten, the list reordered, clients added or removed, a new list, a root
// parsed again into a new value, a client becoming unknown or back in view)
// the counts it gives are those computed afresh without it.
func TestBondsFollowTheClients(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	rng := rand.New(rand.NewPCG(7, 13))
	roots := []*certs.CA{newRoot(t, "dualca root"), newRoot(t, "dualca root"), newRoot(t, "dualca root")}
	// Leaves issued ahead of time, some expiring within the test's clock.
	// Half of them verified as read, half with their signature to check.
	var leaves []*bundle.ClientLeaf
	issuer := map[*bundle.ClientLeaf]int{}
	for i := range 24 {
		r := i % len(roots)
		notAfter := testNow.Add(time.Duration(1+rng.IntN(20)) * time.Minute)
		cert := certs.MustNew(t, "agent", testNow.Add(-time.Hour), notAfter, certs.Options{}, roots[r]).Cert
		var verifiers []*x509.Certificate
		if i%2 == 0 {
			verifiers = []*x509.Certificate{roots[r].Cert}
		}
		leaf := bundle.NewClientLeaf(cert, verifiers)
		leaves = append(leaves, leaf)
		issuer[leaf] = r
	}
	client := func(name string) bundle.Client {
		c := bundle.Client{Name: name, Failed: rng.IntN(4) == 0}
		if rng.IntN(6) == 0 {
			// Its CertificateRequest gone: neither leaf nor ca.crt, like a
			// missing Secret, yet a bond of its own.
			c.Unknown = true
			return c
		}
		if rng.IntN(8) != 0 {
			c.Leaf = leaves[rng.IntN(len(leaves))]
		}
		// Parsed afresh, as the tracker parses each Secret whose content
		// changed: the bonds know a ca.crt by its first certificate's
		// address and its length, so the same values in another ca.crt
		// (root-0 then root-1, root-0 then root-2) would share a bond.
		for _, r := range rng.Perm(len(roots))[:rng.IntN(len(roots)+1)] {
			c.CA = append(c.CA, reparse(t, roots[r].Cert))
		}
		return c
	}
	var items []bundle.Client
	for i := range 12 {
		items = append(items, client("ns/c"+string(rune('a'+i))))
	}
	sigs := bundle.NewMemory()
	now := testNow
	for step := range 400 {
		sigs.Advance()
		switch rng.IntN(8) {
		case 0: // a renewal, written into the same list
			items[rng.IntN(len(items))] = client(items[0].Name)
		case 1: // the cache lists in another order
			rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		case 2: // a client selected, or one no longer
			if rng.IntN(2) == 0 || len(items) < 2 {
				items = append(items, client("ns/new"))
			} else {
				items = items[:len(items)-1]
			}
		case 3: // a new list of the same length
			items = append([]bundle.Client(nil), items...)
			items[0] = client(items[0].Name)
		case 4: // ca.crt written again, the leaf kept
			i := rng.IntN(len(items))
			items[i].CA = client(items[i].Name).CA
		case 6: // a client's credential lost from view, or seen again as it was
			i := rng.IntN(len(items))
			if items[i].Unknown {
				items[i].Unknown = false
			} else {
				items[i] = bundle.Client{Name: items[i].Name, Failed: items[i].Failed, Unknown: true}
			}
		case 5:
			now = now.Add(time.Duration(rng.IntN(30)) * time.Second)
		}
		remembered := bundle.Clients{Tracked: true, Items: items, Memory: sigs}
		afresh := bundle.Clients{Tracked: true, Items: items}
		for j, r := range roots {
			root := r.Cert
			if rng.IntN(2) == 0 {
				root = reparse(t, root)
			}
			g.Expect(remembered.Using(root, now)).To(Equal(afresh.Using(root, now)), "step %d, root %d: using", step, j)
			g.Expect(bundle.CountProgress(remembered, root, now)).To(Equal(bundle.CountProgress(afresh, root, now)), "step %d, root %d: progress", step, j)
		}
	}
	// The afresh answers are right too: a leaf uses the root that issued it
	// until it expires.
	want := 0
	for _, c := range items {
		if r, ok := issuer[c.Leaf]; c.Unknown || ok && r == 0 && !now.After(c.Leaf.NotAfter()) {
			want++
		}
	}
	g.Expect(bundle.Clients{Items: items}.Using(roots[0].Cert, now)).To(Equal(want))
}

// TestBondsAtRestComputeNothing: a decision and the per-root client gauge
// over clients that did not change compute no bond again, even listed
// anew in another order, and a renewal
// computes the renewed client's bonds only. This is what keeps a reconcile
// at rest over fifty thousand clients to comparisons of addresses.
func TestBondsAtRestComputeNothing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	old, current := newRoot(t, "dualca root"), newRoot(t, "dualca root")
	var items []bundle.Client
	for i := range 30 {
		issuer := old
		if i%3 == 0 {
			issuer = current
		}
		items = append(items, newClient(t, "agent", issuer, old, current))
	}
	sigs := bundle.NewMemory()
	clients := bundle.Clients{Tracked: true, Items: items, Memory: sigs}
	root := validRoot(t, current, testNow)
	decide := func(gw bundle.Gateway) bundle.Decision {
		sigs.Advance()
		d := bundle.Plan(gw, root, clients, testTimings, testNow)
		for _, r := range d.Roots {
			clients.Using(r, testNow)
		}
		return d
	}
	gw := written(decide(legacyCopy(t, old)))
	d := decide(gw)
	g.Expect(d.Roots).To(HaveLen(2), "the old root and the new one")
	first := bundle.MemoryComputed(sigs)
	g.Expect(first).To(BeNumerically(">=", uint64(2*len(items))), "each client against each root, once")

	decide(written(d))
	g.Expect(bundle.MemoryComputed(sigs)).To(Equal(first), "at rest")

	// After any client change the cache lists afresh, in another order.
	items = append([]bundle.Client(nil), items...)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	clients.Items = items
	decide(written(d))
	g.Expect(bundle.MemoryComputed(sigs)).To(Equal(first), "a new list of the same clients, in another order")

	items[4] = newClient(t, "agent", current, current)
	decide(written(d))
	g.Expect(bundle.MemoryComputed(sigs)-first).To(Equal(uint64(2)), "one renewal: its bonds to the two roots")
	g.Expect(bundle.MemoryBondRoots(sigs)).To(Equal(2))

	// A root no decision asks about any more is forgotten at the second
	// generation without it.
	sigs.Advance()
	clients.Using(current.Cert, testNow)
	sigs.Advance()
	clients.Using(current.Cert, testNow)
	g.Expect(bundle.MemoryBondRoots(sigs)).To(Equal(1))
}

// TestBondsTellAnUnknownClientFromAMissingSecret: an unknown client and a
// client whose Secret is missing both come without leaf and ca.crt, but the
// first uses every root and the second none. A Memory kept across
// decisions must not answer one with the other's bond, at the same position
// of the list from one decision to the next, nor at a first decision (a
// zero entry is a missing Secret's bond).
func TestBondsTellAnUnknownClientFromAMissingSecret(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	old, current := newRoot(t, "dualca root"), newRoot(t, "dualca root")
	onOld := newClient(t, "ns/on-old", old, old)
	missing := bundle.Client{Name: "ns/x"}
	unknown := bundle.Client{Name: "ns/x", Unknown: true}
	sigs := bundle.NewMemory()
	for i, step := range []struct {
		what      string
		x         bundle.Client
		wantUsing int // of the old root
	}{
		{"unknown at the first decision", unknown, 2},
		{"its Secret missing, at the same position", missing, 1},
		{"unknown again", unknown, 2},
		{"back in view on the current root", newClient(t, "ns/x", current, current), 1},
		{"back in view on the old root", newClient(t, "ns/x", old, old), 2},
		{"unknown once more", unknown, 2},
	} {
		sigs.Advance()
		items := []bundle.Client{step.x, onOld}
		remembered := bundle.Clients{Tracked: true, Items: items, Memory: sigs}
		g.Expect(remembered.Using(old.Cert, testNow)).To(Equal(step.wantUsing), "step %d, %s: using the old root", i, step.what)
		g.Expect(remembered.Using(current.Cert, testNow)).To(Equal(bundle.Clients{Items: items}.Using(current.Cert, testNow)),
			"step %d, %s: using the current root", i, step.what)
		g.Expect(bundle.CountProgress(remembered, current.Cert, testNow)).To(Equal(bundle.CountProgress(bundle.Clients{Items: items}, current.Cert, testNow)),
			"step %d, %s: progress", i, step.what)
	}
}
