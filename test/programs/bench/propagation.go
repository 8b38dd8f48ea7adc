package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// propagation gives the three systems the same sequence of root rotations,
// each in a namespace of its own on the same API server, in interleaved
// blocks so that a noisy minute of the machine falls on all of them. Each
// sample runs from the moment the API server acknowledged the root's update
// (the PUT returned) to the watch event of the system's target Secret whose
// ca.crt first carries that root, or a later one: a copier that skips a
// root superseded before it got to it is not charged for it. Roots share
// one subject, with a new key each time; rotations come at random moments,
// a quarter of them before the previous one has arrived.
//
// The whole is done propagationRuns times, each run with fresh processes
// in fresh namespaces and its own roots, the same schedule of pauses, and
// the systems' order in the blocks shifted by one: every target on
// propagation is judged on each run, not on their pool.
func (b *bench) propagation(ctx context.Context) error {
	n := b.opts.rotations
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // G404: a reproducible schedule, nothing secret
	gaps := make([]time.Duration, n+1)
	for i := 1; i <= n; i++ {
		if rng.IntN(4) == 0 {
			gaps[i] = time.Duration(rng.Int64N(int64(4 * time.Millisecond))) // before the previous has arrived
		} else {
			gaps[i] = 10*time.Millisecond + time.Duration(rng.Int64N(int64(290*time.Millisecond)))
		}
	}
	for run := 1; run <= b.opts.propagationRuns; run++ {
		if err := b.propagationRun(ctx, run, gaps); err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
	}
	return nil
}

// propagationRun is one run of the propagation measurement.
func (b *bench) propagationRun(ctx context.Context, run int, gaps []time.Duration) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(gaps) - 1
	roots, err := newRoots(n + 1)
	if err != nil {
		return err
	}
	var runs []*propagationRun
	for _, s := range b.systems() {
		r, err := b.startPropagationRun(ctx, run, s, roots[0])
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		defer r.proc.stop()
		runs = append(runs, r)
	}
	load := readLoad()
	for _, r := range runs {
		if r.cpuBefore, err = r.proc.cpu(); err != nil {
			return err
		}
	}
	// With -profiles, dualca's CPU over the rotations of every system,
	// which its own are spread among.
	var profiled chan error
	if b.opts.profiles != "" {
		var span time.Duration
		for _, g := range gaps {
			span += g
		}
		seconds := int(span.Seconds()*float64(len(runs))) + 1
		for _, r := range runs {
			if r.system == systemDualca {
				profiled = make(chan error, 1)
				go func() { profiled <- b.profile(ctx, r.proc, "profile", seconds, fmt.Sprintf("propagation-%d-cpu", run)) }()
			}
		}
	}
	block := max(1, n/6)
	for from, turn := 1, run-1; from <= n; from, turn = from+block, turn+1 {
		to := min(n, from+block-1)
		for k := range runs {
			r := runs[(k+turn)%len(runs)]
			for i := from; i <= to; i++ {
				time.Sleep(gaps[i])
				if r.acked[i], err = r.w.writeRoot(ctx, roots[i]); err != nil {
					return err
				}
			}
		}
	}
	var results []propagationResult
	for _, r := range runs {
		if _, err := r.target.trustingWhile(ctx, r.proc, r.mark, roots[n].Cert); err != nil {
			return fmt.Errorf("%s: the last root: %w", r.system, err)
		}
		if err := r.proc.alive(); err != nil {
			return err
		}
		cpuAfter, err := r.proc.cpu()
		if err != nil {
			return err
		}
		res := r.result(roots)
		res.run = run
		res.cpuPerRotation = (cpuAfter - r.cpuBefore) / time.Duration(n)
		if len(res.samples) != n {
			return fmt.Errorf("%s: %d samples of %d rotations", r.system, len(res.samples), n)
		}
		results = append(results, res)
	}
	if profiled != nil {
		if err := <-profiled; err != nil {
			return err
		}
	}
	span := spanSince(load)
	for _, res := range results {
		res.load = span
		b.report.propagation = append(b.report.propagation, res)
		b.log("propagation run %d, %s: %s, %d overlapping, CPU %s per rotation", run, res.system, summarize(res.samples), res.overlapping, res.cpuPerRotation)
	}
	return nil
}

// propagationRun is one system's share of the propagation measurement.
type propagationRun struct {
	system string
	w      *world
	proc   *process
	target *secretWatch
	mark   int
	acked  []time.Time // by root index
	// cpuBefore is the process's CPU time before the first rotation.
	cpuBefore time.Duration
}

// propagationClients are the selected clients dualca tracks meanwhile.
const propagationClients = 100

func (b *bench) startPropagationRun(ctx context.Context, run int, s system, first *certs.CA) (*propagationRun, error) {
	w, err := b.newWorld(ctx, fmt.Sprintf("propagation-%d-%s", run, s.name), first)
	if err != nil {
		return nil, err
	}
	var extra []string
	if s.name == systemDualca {
		// Clients stay on the first root (nothing renews them), so the
		// server switches when the grace period ends, and the roots nobody
		// uses retire: the bundle holds two or three roots, not hundreds.
		if err := b.createClients(ctx, w.ns, first, propagationClients); err != nil {
			return nil, err
		}
		extra = []string{"--client-selector=" + clientLabel + "=agent", "--client-namespaces=" + w.ns,
			"--trust-propagation-delay=20ms", "--server-switch-grace=100ms"}
	}
	target, err := w.watchSecret(ctx, s.target(w))
	if err != nil {
		return nil, err
	}
	p, err := s.start(ctx, w, b.cluster.Kubeconfig, extra...)
	if err != nil {
		return nil, err
	}
	if _, err := target.trustingWhile(ctx, p, 0, first.Cert); err != nil {
		p.stop()
		return nil, fmt.Errorf("waiting for the first root: %w", err)
	}
	return &propagationRun{system: s.name, w: w, proc: p, target: target, mark: target.mark(), acked: make([]time.Time, b.opts.rotations+1)}, nil
}

// result reads the samples from the target's history.
func (r *propagationRun) result(roots []*certs.CA) propagationResult {
	fps := make([]string, len(roots))
	for i, c := range roots {
		fps[i] = bundle.Fingerprint(c.Cert)
	}
	versions := r.target.since(r.mark)
	res := propagationResult{system: r.system, versions: len(versions)}
	arrived := time.Time{} // when the previous root arrived
	for i := 1; i < len(roots); i++ {
		if r.acked[i].IsZero() {
			continue
		}
		overlapping := i > 1 && r.acked[i].Before(arrived)
		if overlapping {
			res.overlapping++
		}
		for _, v := range versions {
			if carriesFrom(v, fps, i) {
				res.samples = append(res.samples, v.at.Sub(r.acked[i]))
				res.rotation = append(res.rotation, i)
				res.overlap = append(res.overlap, overlapping)
				arrived = v.at
				break
			}
		}
	}
	return res
}

// carriesFrom reports whether v's ca.crt carries root i or a later one.
func carriesFrom(v version, fps []string, i int) bool {
	for _, fp := range fps[i:] {
		if v.trusts[fp] {
			return true
		}
	}
	return false
}

// propagationResult is one system's propagation samples in one run.
type propagationResult struct {
	system  string
	run     int // from 1
	samples []time.Duration
	// rotation and overlap are each sample's rotation (its root's index)
	// and whether it was written before the previous root had arrived.
	rotation []int
	overlap  []bool
	// load is the machine's load over the run's rotations.
	load loadSpan
	// overlapping counts the rotations written before the previous root
	// had reached the target; versions the target's versions meanwhile.
	overlapping, versions int
	// cpuPerRotation is the process's CPU time from before the first
	// rotation to the last root's arrival, over the rotations.
	cpuPerRotation time.Duration
}
