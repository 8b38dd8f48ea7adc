package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
)

// roots measures how dualca's cost grows with the roots in its bundle, as
// rotations faster than the server switches pile them up. At each size a
// dualca of its own, in a namespace of its own, runs without client
// tracking (roots then stay until they expire) and a grace period of a
// day, so every rotation adds a root; the server chain grows with them
// until its bound (bundle.MaxServerChainLinks) switches the server. Once
// every size is piled up, each one's root is turned back and forth between
// its two newest roots: each turn is a rotation dualca handles in full (a
// new current root, its state written) with the bundle's size fixed. The
// turns of every size, and the writes of each size's floor, are
// interleaved in a random order each round, so that every size and its
// floor meet the same machine: a compaction or a busy moment of the API
// server lands on all of them, not on the size measured at that time.
func (b *bench) roots(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sizes := b.opts.rootSizes
	all, err := newRoots(sizes[len(sizes)-1])
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // G404: random pauses and order, nothing secret
	// 2-12 ms: with five sizes interleaved, a size's next turn comes after
	// the other sizes' turns and floors, eight writes and their pauses
	// later, and make bench ends within its 45 minutes.
	pause := func() { time.Sleep(2*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))) }
	var piles []*rootsPile
	for _, size := range sizes {
		if size < 2 {
			continue // a turn needs two roots
		}
		pl, err := b.pileUp(ctx, all[:size], pause)
		if pl != nil {
			defer pl.dualca.stop()
		}
		if err != nil {
			return fmt.Errorf("%d roots: %w", size, err)
		}
		piles = append(piles, pl)
	}
	cpuBefore := make([]time.Duration, len(piles))
	for k, pl := range piles {
		if cpuBefore[k], err = pl.dualca.cpu(); err != nil {
			return err
		}
	}
	for i := range b.opts.turns {
		for _, k := range rng.Perm(len(piles)) {
			pl := piles[k]
			pause()
			sample, v, err := rotateTo(ctx, pl.world, pl.gateway, pl.roots[len(pl.roots)-1-(i+1)%2])
			if err != nil {
				return fmt.Errorf("%d roots, turn %d: %w", len(pl.roots), i+1, err)
			}
			pl.point.samples = append(pl.point.samples, sample)
			pl.point.roots, pl.point.chainBytes, pl.point.links = len(v.trusts), v.chainBytes, v.links
			pause()
			if err := pl.floor.write(ctx, &pl.point.floor); err != nil {
				return fmt.Errorf("%d roots, the floor: %w", len(pl.roots), err)
			}
		}
	}
	for k, pl := range piles {
		cpuAfter, err := pl.dualca.cpu()
		if err != nil {
			return err
		}
		pl.point.cpuPerTurn = (cpuAfter - cpuBefore[k]) / time.Duration(b.opts.turns)
		if err := pl.dualca.alive(); err != nil {
			return err
		}
		b.report.roots = append(b.report.roots, pl.point)
		b.log("%d roots (%d in ca.crt, tls.crt %d bytes): %s, CPU %s per rotation; the floor at %d bytes: %s", pl.point.size, pl.point.roots,
			pl.point.chainBytes, summarize(pl.point.samples), pl.point.cpuPerTurn, pl.point.floor.bytes, summarize(pl.point.floor.samples))
	}
	return nil
}

// rootsPile is one size of the bundle: its namespace, its dualca, the
// roots it was brought to that size with, its floor.
type rootsPile struct {
	world   *world
	gateway *secretWatch
	dualca  *process
	roots   []*certs.CA
	floor   *sameSizeFloor
	point   rootsPoint
}

// pileUp starts a dualca on the first of roots in a namespace of its own
// and rotates through the others, so that its bundle holds them all; the
// last rotation's propagation is the new root's sample. The floor then
// takes the gateway Secret's data. The process is returned to be stopped
// even with an error.
func (b *bench) pileUp(ctx context.Context, roots []*certs.CA, pause func()) (*rootsPile, error) {
	w, err := b.newWorld(ctx, fmt.Sprintf("roots-%d", len(roots)), roots[0])
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
	pl := &rootsPile{world: w, gateway: gw, dualca: p, roots: roots, point: rootsPoint{size: len(roots)}}
	if _, err := gw.steadyOn(ctx, 0, roots[0]); err != nil {
		return pl, err
	}
	for have := 1; have < len(roots); have++ {
		pause()
		if pl.point.newRoot, _, err = rotateTo(ctx, w, gw, roots[have]); err != nil {
			return pl, fmt.Errorf("new root %d: %w", have+1, err)
		}
	}
	pl.floor, err = newSameSizeFloor(ctx, w, &pl.point.floor)
	return pl, err
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

// floorName is the Secret of the roots' floor (see sameSizeFloor).
const floorName = "roots-floor"

// sameSizeFloor is what the API server alone costs to store and deliver a
// gateway Secret of the size the bundle has reached, the least any system
// that writes it pays at each rotation: the gateway's data copied into a
// Secret of its own, then written in full (a new annotation each time),
// each write timed from the start of the PUT to its watch event.
type sameSizeFloor struct {
	secrets typedcorev1.SecretInterface
	target  *corev1.Secret
	watch   *secretWatch
	writes  int
}

// newSameSizeFloor copies the world's gateway Secret into the floor's and
// records its size in pt.
func newSameSizeFloor(ctx context.Context, w *world, pt *floorPoint) (*sameSizeFloor, error) {
	secrets := w.b.cs.CoreV1().Secrets(w.ns)
	gateway, err := secrets.Get(ctx, gatewayName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pt.bytes = 0
	for _, v := range gateway.Data {
		pt.bytes += len(v)
	}
	target, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: floorName}, Type: gateway.Type, Data: gateway.Data}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	watch, err := w.watchSecret(ctx, floorName)
	if err != nil {
		return nil, err
	}
	return &sameSizeFloor{secrets: secrets, target: target, watch: watch}, nil
}

// write writes the floor's Secret once and adds its propagation to pt.
func (f *sameSizeFloor) write(ctx context.Context, pt *floorPoint) error {
	mark := f.watch.mark()
	next := f.target.DeepCopy()
	f.writes++
	metav1.SetMetaDataAnnotation(&next.ObjectMeta, "bench.dualca.io/write", strconv.Itoa(f.writes))
	began := time.Now()
	target, err := f.secrets.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	f.target = target
	rv := target.ResourceVersion
	v, err := f.watch.waitFor(ctx, mark, time.Minute, "the floor's write "+rv, func(v version) bool { return v.rv == rv })
	if err != nil {
		return err
	}
	pt.samples = append(pt.samples, v.at.Sub(began))
	return nil
}

// floorPoint is the floor at one size of the bundle: the propagation of
// writes of a Secret holding bytes of data, the gateway's.
type floorPoint struct {
	samples []time.Duration
	bytes   int
}

// rootsPoint is the cost at one size of the bundle.
type rootsPoint struct {
	size int
	// samples are the propagation of the turns; newRoot that of the new
	// root that brought the bundle to size.
	samples    []time.Duration
	newRoot    time.Duration
	cpuPerTurn time.Duration
	// roots, chainBytes and links are ca.crt's roots, tls.crt's DER size
	// (what each handshake carries) and its cross-certificates, as last
	// written.
	roots, chainBytes, links int
	// floor is the API server's own cost for a Secret of this size.
	floor floorPoint
}
