package bundle_test

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// The benchmarks measure the pure work behind one reconcile: parsing and
// validating the root, merging the bundle, the chain checks and the whole
// decision, at rest and when a root rotates. `make bench` runs them with
// -benchmem and puts the figures in docs/benchmarks.md.

// benchWorld is a gateway in the Bundle phase of a rotation from root-1 to
// root-2, as the decision left it, with n clients on root-1.
type benchWorld struct {
	r1, r2, r3 *certs.CA
	root2      *bundle.Root
	root3      *bundle.Root
	gateway    bundle.Gateway
	clients    bundle.Clients
	timings    bundle.Timings
}

func newBenchWorld(b *testing.B, n int) *benchWorld {
	b.Helper()
	ca := func(cn string, age time.Duration) *certs.CA {
		return certs.MustNew(b, cn, testNow.Add(-age), testNow.Add(1000*time.Hour-age), certs.Options{IsCA: true}, nil)
	}
	// One subject, a new key each time, as cert-manager renews a root: the
	// chain checks cannot tell the roots apart by name.
	w := &benchWorld{r1: ca("agents-root-ca", 3*time.Hour), r2: ca("agents-root-ca", 2*time.Hour), r3: ca("agents-root-ca", time.Hour),
		timings: bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: 24 * time.Hour}}
	var err error
	if w.root2, err = bundle.ValidateRoot(w.r2.CertPEM, w.r2.KeyPEM, w.r2.CertPEM, testNow); err != nil {
		b.Fatal(err)
	}
	if w.root3, err = bundle.ValidateRoot(w.r3.CertPEM, w.r3.KeyPEM, w.r3.CertPEM, testNow); err != nil {
		b.Fatal(err)
	}
	root1, err := bundle.ValidateRoot(w.r1.CertPEM, w.r1.KeyPEM, w.r1.CertPEM, testNow)
	if err != nil {
		b.Fatal(err)
	}
	// The syncer keeps one Memory for as long as it runs. Each client
	// has a leaf of its own, as in a cluster: one leaf shared by every
	// client would keep the decision's chain checks in the CPU's caches.
	w.clients = bundle.Clients{Tracked: true, Memory: bundle.NewMemory()}
	for i := range n {
		leaf := certs.MustNew(b, fmt.Sprintf("client-%d", i), testNow.Add(-time.Hour), testNow.Add(100*time.Hour), certs.Options{}, w.r1)
		w.clients.Items = append(w.clients.Items, bundle.Client{Name: fmt.Sprintf("agents/client-%d", i), Leaf: bundle.NewClientLeaf(leaf.Cert, []*x509.Certificate{w.r1.Cert}), CA: []*x509.Certificate{w.r1.Cert}})
	}
	steady := bundle.Plan(bundle.Gateway{}, root1, w.clients, w.timings, testNow)
	w.gateway = written(steady)
	w.gateway = written(bundle.Plan(w.gateway, w.root2, w.clients, w.timings, testNow))
	w.gateway.Parsed = bundle.NewParsed() // the syncer's gateway store keeps one too
	if w.gateway.State.Phase != bundle.PhaseBundle {
		b.Fatalf("the world should be in the Bundle phase, is in %q", w.gateway.State.Phase)
	}
	return w
}

func BenchmarkParseCertificates(b *testing.B) {
	w := newBenchWorld(b, 0)
	data := w.gateway.CAPEM
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := bundle.ParseCertificates("ca.crt", data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateRoot(b *testing.B) {
	w := newBenchWorld(b, 0)
	for b.Loop() {
		if _, err := bundle.ValidateRoot(w.r2.CertPEM, w.r2.KeyPEM, w.r2.CertPEM, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNormalize(b *testing.B) {
	w := newBenchWorld(b, 0)
	// Three roots, each twice, newest last: the worst order to merge.
	set := []*x509.Certificate{w.r1.Cert, w.r2.Cert, w.r3.Cert, w.r1.Cert, w.r2.Cert, w.r3.Cert}
	for b.Loop() {
		if got := bundle.Normalize(set, testNow); len(got) != 3 {
			b.Fatalf("normalized to %d roots", len(got))
		}
	}
}

// BenchmarkChainsTo is a chain check as a decision makes it, remembered:
// the same leaf and root at every reconcile.
func BenchmarkChainsTo(b *testing.B) {
	w := newBenchWorld(b, 0)
	leaf := certs.MustNew(b, "client", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{}, w.r1)
	sigs := bundle.NewMemory()
	for b.Loop() {
		if !sigs.ChainsTo(leaf.Cert, w.r1.Cert) {
			b.Fatal("leaf does not chain to its issuer")
		}
	}
}

func BenchmarkVerifyServer(b *testing.B) {
	w := newBenchWorld(b, 0)
	for b.Loop() {
		if err := bundle.VerifyServer(w.gateway.CertPEM, w.r2.Cert, testNow); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlan is the decision of a reconcile: at rest (nothing to change,
// the cost of every poll and every client event) and when a new root
// arrives (a new bundle and server credential: the cost on the propagation
// path), with 0, 1,000 and 50,000 tracked clients. Each decision
// starts a generation of the Memory, as each reconcile does.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{0, 1000, 50000} {
		w := newBenchWorld(b, n)
		b.Run(fmt.Sprintf("at-rest/clients=%d", n), func(b *testing.B) {
			for b.Loop() {
				w.clients.Memory.Advance()
				if d := bundle.Plan(w.gateway, w.root2, w.clients, w.timings, testNow); len(d.Events) != 0 {
					b.Fatalf("a decision at rest has events: %v", d.Events)
				}
			}
		})
		b.Run(fmt.Sprintf("new-root/clients=%d", n), func(b *testing.B) {
			for b.Loop() {
				w.clients.Memory.Advance()
				if d := bundle.Plan(w.gateway, w.root3, w.clients, w.timings, testNow); d.State.Root != w.root3.Fingerprint {
					b.Fatal("the new root is not current")
				}
			}
		})
	}
}
