package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// roots measures the propagation of a new root (one not in ca.crt yet,
// its PUT acknowledged → the gateway Secret's watch event naming it
// current) with 2, 30, 100 and 400 roots in the bundle, ECDSA P-256 and
// RSA-2048 roots alike. Each size of each algorithm has a dualca of its
// own, in a namespace of its own, without client tracking (roots then
// stay until they expire) and a grace period of a day: it is piled up to
// all but one of its roots with roots valid for a day. Then each round
// gives every pile a new root valid until the round ends: the next
// round's root enters as it expires and leaves, so every new root is
// written into a bundle of exactly its size. The rounds start a second
// and a fifth after the last ones' roots expired, when each dualca has
// woken to find its root expired (told once, nothing written), so that no
// write of its own lands on a measured one. Within a round the piles go
// in a random order, each new root followed by its floor (sameSizeFloor:
// a trivial copier writing the gateway's size), timed from the same event:
// the new root's PUT acknowledged, the same root put in the floor's own
// source. A
// size over the budget (bundle/budget.go: ca.crt within MaxPEMBytes) is
// piled up to the most roots that fit, measured there, and then given
// one root more, which the table shows refused.
func (b *bench) roots(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rounds := 100 // 5 minutes of rounds, about 8 with the pile-ups on an idle machine
	if b.opts.quick {
		rounds = 12
	}
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // G404: random pauses and order, nothing secret
	pause := func() { time.Sleep(2*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))) }
	var piles []*rootsPile
	defer func() {
		for _, pl := range piles {
			pl.dualca.stop()
			if pl.floor != nil {
				pl.floor.copier.stop()
			}
		}
	}()
	for _, alg := range rootAlgorithms {
		for _, size := range rootSizes {
			pl, err := b.pileUp(ctx, alg, size, rounds, pause)
			if pl != nil {
				piles = append(piles, pl)
			}
			if err != nil {
				return fmt.Errorf("%s, %d roots: %w", alg.name, size, err)
			}
		}
	}
	if err := b.newRootRounds(ctx, piles, rounds, rng, pause); err != nil {
		return err
	}
	for _, pl := range piles {
		if pl.point.fits < pl.point.size {
			if err := pl.overBudget(ctx); err != nil {
				return fmt.Errorf("%s, %d roots over the budget: %w", pl.point.alg, pl.point.size, err)
			}
		}
		if err := pl.dualca.alive(); err != nil {
			return err
		}
	}
	for _, pl := range piles {
		pt := pl.point
		b.log("%s, %d roots (%d in ca.crt, %d bytes): new root %s, CPU %s per rotation; the floor at %d bytes: %s%s", pt.alg, pt.size, pt.roots, pt.bundleBytes,
			summarize(pt.samples), pt.cpuPerTurn, pt.floor.bytes, summarize(pt.floor.samples), pt.budgetNote())
	}
	b.report.roots = rootsReported(piles)
	return nil
}

// rootAlgorithm is how the roots of a pile are made.
type rootAlgorithm struct {
	name    string
	keyType string
}

// rootAlgorithms are measured in this order; the first is the one the
// plot and the targets read (report.roots).
var rootAlgorithms = []rootAlgorithm{{"ECDSA P-256", certs.KeyECDSA}, {"RSA-2048", certs.KeyRSA}}

// rootSizes are the roots in the bundle measured.
var rootSizes = []int{2, 30, 100, 400}

// roundLength is how long a round of new roots lasts, and roundStart how
// long after the last round's roots expired it starts: a dualca wakes a
// second after a root's NotAfter (whole seconds), finds it expired and
// writes nothing.
const (
	roundLength = 3 * time.Second
	roundStart  = 1200 * time.Millisecond
)

// rootsPile is one size of the bundle with one algorithm: its namespace,
// its dualca, the keys of its new roots, its floor.
type rootsPile struct {
	world   *world
	gateway *secretWatch
	dualca  *process
	alg     rootAlgorithm
	// keys are those of the new roots, one a round, made before any
	// clock starts (cert-manager makes keys, not the systems measured).
	keys  []crypto.Signer
	floor *sameSizeFloor
	point rootsPoint
	// last is the pile's last root valid for a day.
	last *certs.CA
}

// newRootOf is a root of alg valid from a minute ago until notAfter, with
// key (a new one when nil).
func newRootOf(alg rootAlgorithm, key crypto.Signer, notAfter time.Time) (*certs.CA, error) {
	return certs.New(rootSubject, time.Now().Add(-time.Minute), notAfter, certs.Options{IsCA: true, KeyType: alg.keyType, Key: key}, nil)
}

// newKeys makes n keys of alg, two at a time.
func newKeys(alg rootAlgorithm, n int) ([]crypto.Signer, error) {
	keys := make([]crypto.Signer, n)
	var g errgroup.Group
	g.SetLimit(2)
	for i := range keys {
		g.Go(func() error {
			ca, err := newRootOf(alg, nil, time.Now().Add(time.Hour))
			if err == nil {
				keys[i] = ca.Key
			}
			return err
		})
	}
	return keys, g.Wait()
}

// pileUp starts a dualca on a first root of alg in a namespace of its own
// and rotates through more, valid for a day, until its bundle holds all
// but one of size roots, or the most that leave room within the budget
// for one new root. The floor then takes the gateway Secret's data. The
// pile is returned to be stopped even with an error.
func (b *bench) pileUp(ctx context.Context, alg rootAlgorithm, size, rounds int, pause func()) (*rootsPile, error) {
	keys, err := newKeys(alg, size-1+rounds+2)
	if err != nil {
		return nil, err
	}
	day := time.Now().Add(24 * time.Hour)
	first, err := newRootOf(alg, keys[0], day)
	if err != nil {
		return nil, err
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("roots-%s-%d", alg.keyType, size), first)
	if err != nil {
		return nil, err
	}
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return nil, err
	}
	p, err := b.startDualca(b.cluster.Kubeconfig, w.rootFlag(), w.gatewayFlag(), "--trust-propagation-delay=20ms", "--server-switch-grace=24h")
	if err != nil {
		return nil, err
	}
	pl := &rootsPile{world: w, gateway: gw, dualca: p, alg: alg, keys: keys[size-1:], last: first, point: rootsPoint{alg: alg.name, size: size}}
	if _, err := gw.steadyOn(ctx, 0, first); err != nil {
		return pl, err
	}
	piled := []*x509.Certificate{first.Cert}
	one := bundle.EncodedLen(piled)
	for have := 1; have < size-1; have++ {
		next, err := newRootOf(alg, keys[have], day)
		if err != nil {
			return pl, err
		}
		// Room for this root and a new one, a few bytes larger at most.
		if bundle.EncodedLen(append(piled, next.Cert))+one+16 > bundle.MaxPEMBytes {
			break
		}
		pause()
		if _, _, err = rotateTo(ctx, w, gw, next); err != nil {
			return pl, fmt.Errorf("root %d: %w", have+1, err)
		}
		piled, pl.last = append(piled, next.Cert), next
	}
	pl.point.fits = len(piled) + 1
	pl.floor, err = b.newSameSizeFloor(ctx, w, pl.last, &pl.point.floor, bundle.EncodedLen(piled)+one)
	return pl, err
}

// newRootRounds gives every pile a new root per round, each valid until
// the round ends, in a random order of the piles each round, each
// followed by a write of its floor.
func (b *bench) newRootRounds(ctx context.Context, piles []*rootsPile, rounds int, rng *rand.Rand, pause func()) error {
	cpuBefore := make([]time.Duration, len(piles))
	for k, pl := range piles {
		var err error
		if cpuBefore[k], err = pl.dualca.cpu(); err != nil {
			return err
		}
	}
	start := time.Now().Truncate(time.Second).Add(time.Second)
	for r := range rounds {
		end := start.Add(time.Duration(r+1) * roundLength)
		time.Sleep(time.Until(start.Add(time.Duration(r)*roundLength + roundStart)))
		for _, k := range rng.Perm(len(piles)) {
			pl := piles[k]
			if time.Until(end) < roundLength/4 {
				pl.point.late++ // no time left for its root to be measured before it expires
				continue
			}
			root, err := newRootOf(pl.alg, pl.keys[r], end)
			if err != nil {
				return err
			}
			pause()
			sample, v, err := rotateTo(ctx, pl.world, pl.gateway, root)
			if err != nil {
				return fmt.Errorf("%s, %d roots, round %d: %w", pl.alg.name, pl.point.size, r+1, err)
			}
			pl.point.samples = append(pl.point.samples, sample)
			if len(v.trusts) != pl.point.fits {
				pl.point.offSize++
			}
			pl.point.roots, pl.point.chainBytes, pl.point.links = len(v.trusts), v.chainBytes, v.links
			pause()
			if err := pl.floor.write(ctx, &pl.point.floor, root); err != nil {
				return fmt.Errorf("%s, %d roots, the floor: %w", pl.alg.name, pl.point.size, err)
			}
		}
	}
	for k, pl := range piles {
		cpuAfter, err := pl.dualca.cpu()
		if err != nil {
			return err
		}
		if n := len(pl.point.samples); n > 0 {
			pl.point.cpuPerTurn = (cpuAfter - cpuBefore[k]) / time.Duration(n)
		}
		pl.point.bundleBytes = 0
		if gw, err := pl.world.b.cs.CoreV1().Secrets(pl.world.ns).Get(ctx, gatewayName, metav1.GetOptions{}); err == nil {
			pl.point.bundleBytes = len(gw.Data["ca.crt"])
		}
	}
	return nil
}

// overBudget shows what the rule does with a pile that the budget capped:
// once the last round's root has expired, a root valid for a day fills the
// bundle to the most that fit, and one more is refused: the gateway keeps
// what it held, and dualca tells BundleTooLarge.
func (pl *rootsPile) overBudget(ctx context.Context) error {
	day := time.Now().Add(24 * time.Hour)
	fill, err := newRootOf(pl.alg, pl.keys[len(pl.keys)-2], day)
	if err != nil {
		return err
	}
	time.Sleep(roundLength) // the last round's roots expire
	if _, _, err := rotateTo(ctx, pl.world, pl.gateway, fill); err != nil {
		return fmt.Errorf("the root that fills the bundle: %w", err)
	}
	over, err := newRootOf(pl.alg, pl.keys[len(pl.keys)-1], day)
	if err != nil {
		return err
	}
	mark := pl.gateway.mark()
	if _, err := pl.world.writeRoot(ctx, over); err != nil {
		return err
	}
	events := pl.world.b.cs.EventsV1().Events(pl.world.ns)
	for deadline := time.Now().Add(30 * time.Second); pl.point.refusal == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s event within 30 s of a root over the budget", bundle.ReasonBundleTooLarge)
		}
		list, err := events.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Reason == bundle.ReasonBundleTooLarge {
				pl.point.refusal = e.Note
			}
		}
	}
	fp := bundle.Fingerprint(over.Cert)
	if slices.ContainsFunc(pl.gateway.since(mark), func(v version) bool { return v.trusts[fp] || v.state.Root == fp }) {
		return fmt.Errorf("the gateway took the root over the budget")
	}
	gw, err := pl.world.b.cs.CoreV1().Secrets(pl.world.ns).Get(ctx, gatewayName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pl.point.refusedBytes = len(gw.Data["ca.crt"]) + bundle.EncodedLen([]*x509.Certificate{over.Cert})
	return nil
}

// rotateTo writes root and waits for the gateway to name it current.
func rotateTo(ctx context.Context, w *world, gw *secretWatch, root *certs.CA) (time.Duration, version, error) {
	mark := gw.mark()
	acked, err := w.writeRoot(ctx, root)
	if err != nil {
		return 0, version{}, err
	}
	fp := bundle.Fingerprint(root.Cert)
	v, err := gw.waitFor(ctx, mark, time.Minute, "root "+bundle.Short(fp)+" current", func(v version) bool { return v.state.Root == fp })
	return v.at.Sub(acked), v, err
}

// floorSource and floorTarget are the Secrets of the roots' floor (see
// sameSizeFloor).
const (
	floorSource = "roots-floor-source"
	floorTarget = "roots-floor"
)

// sameSizeFloor is the least any system that writes the gateway Secret
// pays for a new root, timed from the same event as dualca's sample: a
// trivial copier (the copier command, its own process) watches a Secret of
// its own, and at each event writes the Secret the event carries into its
// target, filled to the gateway's data at the size the bundle has when a
// new root enters, with no read (dualca reads the root from its cache), no
// check and no rate limit. Each write of the floor puts the round's new
// root into the source, as the root Secret was given it, and is timed from
// that PUT's return to the watch event of the target carrying it: the PUT
// acknowledged, a watch event to a process, a PUT of the gateway's size, its
// watch event, as for dualca, without dualca's work.
type sameSizeFloor struct {
	secrets typedcorev1.SecretInterface
	source  *corev1.Secret // as last written
	target  *secretWatch
	copier  *process
}

// newSameSizeFloor starts the floor in the world's namespace on root: its
// copier fills its target to the world's gateway data with ca.crt at
// caBytes, a size it records in pt.
func (b *bench) newSameSizeFloor(ctx context.Context, w *world, root *certs.CA, pt *floorPoint, caBytes int) (*sameSizeFloor, error) {
	secrets := b.cs.CoreV1().Secrets(w.ns)
	gateway, err := secrets.Get(ctx, gatewayName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pt.bytes = dataBytes(gateway.Data) - len(gateway.Data["ca.crt"]) + max(caBytes, len(gateway.Data["ca.crt"]))
	f := &sameSizeFloor{secrets: secrets}
	if _, err := writeCA(ctx, secrets, floorSource, &f.source, root); err != nil {
		return nil, err
	}
	if f.target, err = w.watchSecret(ctx, floorTarget); err != nil {
		return nil, err
	}
	if f.copier, err = startCopying(w.ns, b.cluster.Kubeconfig, floorSource, floorTarget, "--from-event", "--pad-to="+strconv.Itoa(pt.bytes)); err != nil {
		return nil, err
	}
	if _, err := f.target.trustingWhile(ctx, f.copier, 0, root.Cert); err != nil {
		f.copier.stop()
		return nil, fmt.Errorf("the floor's first copy: %w", err)
	}
	return f, nil
}

// write gives the floor's source root and adds its propagation to the
// target to pt.
func (f *sameSizeFloor) write(ctx context.Context, pt *floorPoint, root *certs.CA) error {
	mark := f.target.mark()
	acked, err := writeCA(ctx, f.secrets, floorSource, &f.source, root)
	if err != nil {
		return err
	}
	v, err := f.target.trustingWhile(ctx, f.copier, mark, root.Cert)
	if err != nil {
		return err
	}
	pt.samples = append(pt.samples, v.at.Sub(acked))
	return nil
}

// floorPoint is the floor at one size of the bundle: the propagation of
// writes of a Secret holding bytes of data.
type floorPoint struct {
	samples []time.Duration
	bytes   int
}

// rootsPoint is the cost at one size of the bundle with one algorithm.
type rootsPoint struct {
	alg  string
	size int
	// fits is the roots the bundle holds when a new root enters: size, or
	// fewer when the budget caps it.
	fits int
	// samples are the propagation of the new roots; late counts the
	// rounds that had no time left for this pile, offSize the new roots
	// written into a bundle of another size than fits.
	samples       []time.Duration
	late, offSize int
	cpuPerTurn    time.Duration
	// roots, chainBytes and links are ca.crt's roots, tls.crt's DER size
	// (what each handshake carries) and its cross-certificates, as last
	// written; bundleBytes ca.crt's size after the rounds.
	roots, chainBytes, links, bundleBytes int
	// floor is the API server's own cost for a Secret of this size.
	floor floorPoint
	// refusal is the BundleTooLarge event's note for the root over the
	// budget, refusedBytes the ca.crt it would have made; "" and 0 for a
	// size that fits.
	refusal      string
	refusedBytes int
	// rsa is the same size with RSA roots, for the point of the plot's
	// algorithm (see rootsReported).
	rsa *rootsPoint
}

// budgetNote is what the rule did at this size, for the log.
func (pt rootsPoint) budgetNote() string {
	if pt.refusal == "" {
		return ""
	}
	return fmt.Sprintf("; capped at %d roots by the budget, one more (ca.crt %d bytes) refused", pt.fits, pt.refusedBytes)
}

// rootsReported is the points as the report keeps them: those of the
// first algorithm, which the plot and the targets read, each with the
// same size of the second.
func rootsReported(piles []*rootsPile) []rootsPoint {
	var out []rootsPoint
	for _, pl := range piles {
		if pl.alg == rootAlgorithms[0] {
			out = append(out, pl.point)
		}
	}
	for _, pl := range piles {
		for i := range out {
			if pl.alg != rootAlgorithms[0] && out[i].size == pl.point.size {
				pt := pl.point
				out[i].rsa = &pt
			}
		}
	}
	return out
}

// rootsRaw is every sample of the roots measurement, for roots.csv.
func (r *report) rootsRaw() *rawTable {
	t := &rawTable{name: "roots.csv", about: "every sample of the roots measurement: the algorithm, the bundle's size, the roots in ca.crt as a new root entered, the series (new-root: dualca writing a root not in ca.crt yet; floor: the floor's writes), the sample's index, its latency",
		header: []string{"algorithm", "size", "roots", "series", "i", "latency_us"}}
	for _, pt := range r.roots {
		for _, pt := range []*rootsPoint{&pt, pt.rsa} {
			if pt == nil {
				continue
			}
			for i, d := range pt.samples {
				t.add(pt.alg, pt.size, pt.fits, "new-root", i, d)
			}
			for i, d := range pt.floor.samples {
				t.add(pt.alg, pt.size, pt.fits, "floor", i, d)
			}
		}
	}
	return t
}

// rootsPoints returns the points with a and b roots.
func (r *report) rootsPoints(a, b int) (rootsPoint, rootsPoint, bool) {
	var pa, pb rootsPoint
	var oka, okb bool
	for _, pt := range r.roots {
		switch pt.size {
		case a:
			pa, oka = pt, len(pt.samples) > 0
		case b:
			pb, okb = pt, len(pt.samples) > 0
		}
	}
	return pa, pb, oka && okb
}

// writeRoots is the report's section on the roots in the bundle.
func (r *report) writeRoots(p func(string, ...any)) {
	if len(r.roots) == 0 {
		return
	}
	var all []rootsPoint
	for _, pt := range r.roots {
		all = append(all, pt)
		if pt.rsa != nil {
			all = append(all, *pt.rsa)
		}
	}
	slices.SortStableFunc(all, func(a, b rootsPoint) int { return compareStrings(a.alg, b.alg) })
	p("")
	p("## A new root against the roots in the bundle")
	p("")
	p("Each size of each algorithm (ECDSA P-256 and RSA-2048 roots, one subject, a new key each) has a dualca of its own in a")
	p("namespace of its own, without client tracking (roots stay until they expire) and a grace period of a day, piled up")
	p("to all but one of its roots with roots valid for a day. Then, in each of %d rounds, each pile gets a new root, one not in", len(r.roots[0].samples)+r.roots[0].late)
	p("`ca.crt` yet, valid until the round ends: the next round's root enters as it expires and leaves, so every new root")
	p("is written into a bundle of exactly the size. Each is timed from its PUT's return to the gateway Secret's watch")
	p("event naming it current. The rounds start %s after the last round's roots expired (a dualca wakes a second", roundStart)
	p("after, finds its root expired, and writes nothing), the piles in a new random order each round, each new root")
	p("followed by its floor: the same root written into a Secret of the floor's own, which a trivial copier (its own")
	p("process, a watch of that Secret, no read, no check, no rate limit) writes at each watch event into a Secret of the")
	p("gateway's size (its data with `ca.crt` at the size the new root makes, the rest as a padding key), timed from the")
	p("same event as dualca's sample: from the source's PUT's return to the watch event of the copier's Secret carrying")
	p("the root. A pile the round has no time left for (its root would expire before it")
	p("is measured) skips it: *late*. CPU is each dualca's user and system time over the rounds, from `/proc`, per new")
	p("root (it includes the wake at the root's expiry).")
	p("A size over the budget (`ca.crt` within %d bytes, docs/rotation.md) is piled up to the most roots that fit and", bundle.MaxPEMBytes)
	p("measured there; then one root more is written, and the table says what dualca did.")
	p("")
	p("| roots | in ca.crt | ca.crt bytes | new root p50 | p99 | max | samples | floor p50 | floor p99 | CPU per rotation | tls.crt links | the budget |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, pt := range all {
		d, f := distributionOf(pt.samples), distributionOf(pt.floor.samples)
		rule := "fits"
		if pt.refusal != "" {
			rule = fmt.Sprintf("capped at %d roots; one more (ca.crt %d bytes) refused, the gateway left as it was (BundleTooLarge)", pt.fits, pt.refusedBytes)
		}
		samples := strconv.Itoa(d.n)
		if pt.late+pt.offSize > 0 {
			samples += fmt.Sprintf(" (%d rounds late, %d off size)", pt.late, pt.offSize)
		}
		p("| %s, %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %d | %s |", pt.alg, pt.size, pt.roots, pt.bundleBytes, ms(d.p50), ms(d.p99), ms(d.max), samples,
			ms(f.p50), ms(f.p99), ms(pt.cpuPerTurn), pt.links, rule)
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
