package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/certs"
)

// roots measures how dualca's cost grows with the roots in its bundle, as
// rotations faster than the server switches pile them up. dualca runs
// without client tracking (roots then stay until they expire) and a grace
// period of a day, so every rotation adds a root; the server chain grows
// with them until its bound (bundle.MaxServerChainLinks) switches the
// server. At each size, the root is then turned back and forth between the
// two newest roots: each turn is a rotation dualca handles in full (a new
// current root, its state written) with the bundle's size fixed, so that
// enough samples share one size. New roots' own samples are kept too.
func (b *bench) roots(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sizes := b.opts.rootSizes
	all, err := newRoots(sizes[len(sizes)-1])
	if err != nil {
		return err
	}
	w, err := b.newWorld(ctx, "roots", all[0])
	if err != nil {
		return err
	}
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return err
	}
	p, err := b.startDualca(b.cluster.Kubeconfig, w.rootFlag(), w.gatewayFlag(), "--trust-propagation-delay=20ms", "--server-switch-grace=24h")
	if err != nil {
		return err
	}
	defer p.stop()
	if _, err := gw.steadyOn(ctx, 0, all[0]); err != nil {
		return err
	}
	floor, err := w.watchSecret(ctx, floorName)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // G404: random pauses, nothing secret
	pause := func() { time.Sleep(5*time.Millisecond + time.Duration(rng.Int64N(int64(20*time.Millisecond)))) }
	have := 1
	for _, size := range sizes {
		point := rootsPoint{size: size}
		for ; have < size; have++ { // new roots up to size
			pause()
			sample, _, err := rotateTo(ctx, w, gw, all[have])
			if err != nil {
				return fmt.Errorf("new root %d: %w", have+1, err)
			}
			if have+1 == size {
				point.newRoot = sample
			}
		}
		if size < 2 {
			continue
		}
		cpuBefore, err := p.cpu()
		if err != nil {
			return err
		}
		for i := range b.opts.turns {
			pause()
			sample, v, err := rotateTo(ctx, w, gw, all[size-1-(i+1)%2])
			if err != nil {
				return fmt.Errorf("%d roots, turn %d: %w", size, i+1, err)
			}
			point.samples = append(point.samples, sample)
			point.roots, point.chainBytes, point.links = len(v.trusts), v.chainBytes, v.links
		}
		cpuAfter, err := p.cpu()
		if err != nil {
			return err
		}
		point.cpuPerTurn = (cpuAfter - cpuBefore) / time.Duration(b.opts.turns)
		if point.floor, err = sameSizeFloor(ctx, w, floor, b.opts.turns, pause); err != nil {
			return fmt.Errorf("%d roots, the floor: %w", size, err)
		}
		b.report.roots = append(b.report.roots, point)
		b.log("%d roots (%d in ca.crt, tls.crt %d bytes): %s, CPU %s per rotation; the floor at %d bytes: %s", size, point.roots, point.chainBytes,
			summarize(point.samples), point.cpuPerTurn, point.floor.bytes, summarize(point.floor.samples))
	}
	return p.alive()
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
// Secret of its own, then written n times in full (a new annotation each
// time, at the same random pauses as the turns), each timed from the
// start of the PUT to its watch event.
func sameSizeFloor(ctx context.Context, w *world, watch *secretWatch, n int, pause func()) (floorPoint, error) {
	secrets := w.b.cs.CoreV1().Secrets(w.ns)
	gateway, err := secrets.Get(ctx, gatewayName, metav1.GetOptions{})
	if err != nil {
		return floorPoint{}, err
	}
	pt := floorPoint{}
	for _, v := range gateway.Data {
		pt.bytes += len(v)
	}
	target, err := secrets.Get(ctx, floorName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		target, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: floorName}, Type: gateway.Type, Data: gateway.Data}, metav1.CreateOptions{})
	case err == nil:
		target.Data = gateway.Data
		target, err = secrets.Update(ctx, target, metav1.UpdateOptions{})
	}
	if err != nil {
		return pt, err
	}
	for i := range n {
		pause()
		mark := watch.mark()
		next := target.DeepCopy()
		metav1.SetMetaDataAnnotation(&next.ObjectMeta, "bench.dualca.io/write", strconv.Itoa(i))
		began := time.Now()
		if target, err = secrets.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
			return pt, err
		}
		rv := target.ResourceVersion
		v, err := watch.waitFor(ctx, mark, time.Minute, "the floor's write "+rv, func(v version) bool { return v.rv == rv })
		if err != nil {
			return pt, err
		}
		pt.samples = append(pt.samples, v.at.Sub(began))
	}
	return pt, nil
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
