package soak

import (
	"cmp"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/mtls"
)

// Cut-offs.
//
// A client issuance in flight when cert-manager rotates the root is signed
// with the new root R, whoever ordered it (dualca, for the previous
// rotation, or cert-manager itself). dualca bundles R within milliseconds,
// but a gateway that loads its Secret late (here 1-10 s) still verifies
// clients with the old ca.crt and serves the old chain: a client that loads
// its R leaf first fails its handshakes until the gateway loads R. dualca
// cannot close that window (docs/rotation.md, "What dualca cannot
// prevent"); its own renewals under R wait --trust-propagation-delay, above
// the lag. The soak counts such failures apart, as cut-offs, under a strict
// definition, and fails on any other failure of a healthy client. A failed
// attempt is part of a cut-off when all of these hold:
//   - the leaf it presented chains to a root R after the first, and the
//     issuance that signed it was ordered (the Certificate turned Issuing)
//     before dualca could know R: before the gateway Secret named R, or
//     within staleView after (dualca hands its renewer a decision once it
//     has written it, so a worker may still act on the previous root's
//     list that long). It was in flight when R came: no renewal dualca
//     ordered under R, which waits the propagation delay from that
//     version on (a dualca that ordered them sooner than that, but in the
//     first staleView, fails here);
//   - the leaf was signed less than the propagation delay after a gateway
//     Secret version first named R;
//   - the attempt began before the gateway loaded a ca.crt with R, no
//     later than the longest reload lag plus cutoffMargin after that
//     version.
//
// One case is told apart: when no gateway Secret version named R yet at
// the attempt (the leader was killed as R came, and the standby takes over
// only when its lease runs out), the issuance must have been ordered
// before the root Secret held R (within staleView), and the attempt come
// no later than maxRace after it, the bound the monitor puts on a root
// waiting to be bundled; the version naming R is then counted from the
// attempt.
//
// The attempts of one client under one root make one cut-off, which lasts
// from its first failed attempt to the gateway's loading R. Its part after
// a version named R is asserted under the same bound, and its part before
// under maxRace.

// cutoffMargin is what a cut-off may last beyond the longest reload lag:
// a watch event's delivery and a handshake on two busy cores.
const cutoffMargin = 5 * time.Second

// staleView is how long after writing a gateway version that names a new
// root dualca's renewer may still trigger renewals decided before it:
// the rest of the reconcile (its report) on two busy cores.
const staleView = 2 * time.Second

// maxCutoff bounds a cut-off: the longest reload lag and the margin.
func maxCutoff() time.Duration { return lag.hi + cutoffMargin }

// maxFailuresKept bounds the failed attempts kept for classification.
const maxFailuresKept = 100000

// cutoff is the failed attempts of one healthy client with a leaf of one
// root, classified as above.
type cutoff struct {
	client   string
	root     int // 2 for R2
	failures int
	first    time.Time     // the first failed attempt's start
	window   time.Duration // from first to the gateway's loading the root
	// unbundled is the part of window before a gateway Secret version
	// named the root (0 when one had): a leader handover.
	unbundled time.Duration
	// ordered is how long before the root Secret held the root the
	// issuance was ordered (negative: after), signed how long after the
	// gateway Secret named it the leaf was signed (whole seconds).
	ordered, signed time.Duration
	by              string // the Issuing reason of that issuance
}

// cutoffs is what the classification found.
type cutoffs struct {
	all      []cutoff
	failures int // the attempts in them
	// outside are the healthy clients' failed attempts outside the
	// definition, each with why; kept up to a few, counted all.
	outside      []string
	outsideCount int
	// lost counts the failed attempts not kept (beyond maxFailuresKept):
	// they cannot be classified, so they count as outside.
	lost int
}

// longest is the longest cut-off after the gateway Secret named its root:
// the gateway's reload lag.
func (c cutoffs) longest() time.Duration {
	return c.longestOf(func(k cutoff) time.Duration { return k.window - k.unbundled })
}

// longestUnbundled is the longest a cut-off lasted before a gateway
// Secret version named its root.
func (c cutoffs) longestUnbundled() time.Duration {
	return c.longestOf(func(k cutoff) time.Duration { return k.unbundled })
}

// longestOf is the largest part of a cut-off that part measures; 0 with
// none.
func (c cutoffs) longestOf(part func(cutoff) time.Duration) time.Duration {
	var l time.Duration
	for _, k := range c.all {
		l = max(l, part(k))
	}
	return l
}

// failed is the fleet's OnFailure: it keeps the failed attempt.
func (s *soak) failed(f mtls.Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failures) >= maxFailuresKept {
		s.lostFailures++
		return
	}
	s.failures = append(s.failures, f)
}

// watchIssuing records when each client Certificate turned Issuing, from a
// watch of the namespace's Certificates started before the traffic.
func (s *soak) watchIssuing() {
	// The watch logs nothing worth reading; without a logger set,
	// controller-runtime prints a warning with a stack instead.
	logf.SetLogger(logr.Discard())
	informers, err := cache.New(s.c.RESTConfig, cache.Options{Scheme: s.c.Client.Scheme(),
		DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	s.g.Expect(err).NotTo(HaveOccurred())
	inf, err := informers.GetInformer(s.ctx, &cmapi.Certificate{})
	s.g.Expect(err).NotTo(HaveOccurred())
	seen := func(old, obj any) {
		crt, ok := obj.(*cmapi.Certificate)
		if !ok || issuingBy(crt) == "" {
			return
		}
		if prev, ok := old.(*cmapi.Certificate); ok && issuingBy(prev) != "" {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.issuing[crt.Name] = append(s.issuing[crt.Name], issuance{at: time.Now(), reason: issuingBy(crt)})
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(nil, obj) },
		UpdateFunc: seen,
	})
	s.g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = informers.Start(s.ctx) }()
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	s.g.Expect(informers.WaitForCacheSync(ctx)).To(BeTrue(), "the Certificates' watch synced")
}

// issuance is a Certificate turning Issuing, seen at a moment, and the
// reason given (dualca's is ManuallyTriggered).
type issuance struct {
	at     time.Time
	reason string
}

// issuingBy is the reason of crt's Issuing condition, "" unless it is True.
func issuingBy(crt *cmapi.Certificate) string {
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			return cmp.Or(c.Reason, "?")
		}
	}
	return ""
}

// classify sorts the healthy clients' failed attempts into cut-offs and
// the rest. Call it with s.mu held.
func (s *soak) classify() cutoffs {
	roots := s.mon.Roots()
	var out cutoffs
	out.lost = s.lostFailures
	out.outsideCount = s.lostFailures
	byKey := map[string]*cutoff{}
	for _, f := range s.failures {
		if f.Client == s.broken {
			continue
		}
		k, why := s.cutoffOf(f, roots)
		if why != "" {
			out.outsideCount++
			if len(out.outside) < 20 {
				out.outside = append(out.outside, fmt.Sprintf("%s at %s: %s (%v)", f.Client, minutes(f.Start.Sub(s.begin)), why, f.Err))
			}
			continue
		}
		out.failures++
		key := fmt.Sprintf("%s/%d", k.client, k.root)
		if prev, ok := byKey[key]; ok {
			prev.failures++
			continue
		}
		byKey[key] = &k
	}
	for _, k := range byKey {
		out.all = append(out.all, *k)
	}
	slices.SortFunc(out.all, func(a, b cutoff) int { return a.first.Compare(b.first) })
	return out
}

// cutoffOf tells whether a failed attempt is part of a cut-off (see
// above): the cut-off it starts, or why it is not one.
func (s *soak) cutoffOf(f mtls.Failure, roots []*x509.Certificate) (cutoff, string) {
	n := slices.IndexFunc(roots, func(r *x509.Certificate) bool { return bundle.ChainsTo(f.Leaf, r) })
	if n < 1 {
		return cutoff{}, "its leaf chains to no root after the first"
	}
	fp := bundle.Fingerprint(roots[n])
	at := rootTimes{arrived: s.mon.FirstSeen("root " + fp), named: s.mon.FirstSeen("bundle " + fp), loaded: s.gateway.RootLoaded(fp)}
	return judgeCutoff(f, n+1, at, s.issuing[f.Client], time.Now())
}

// rootTimes are the moments of one root: when the root Secret held it,
// when a gateway Secret version first named it, when the gateway loaded
// it (zero: never).
type rootTimes struct{ arrived, named, loaded time.Time }

// judgeCutoff tells whether f, whose leaf chains to root Rn, is part of a
// cut-off, given the root's moments and the turns to Issuing of the
// client's Certificate: the cut-off it starts, or why it is not one.
func judgeCutoff(f mtls.Failure, n int, at rootTimes, issuing []issuance, now time.Time) (cutoff, string) {
	// The issuance that signed the leaf: the last turn to Issuing before
	// it was signed (NotBefore is the signing second, rounded down).
	var ordered time.Time
	var by string
	for _, is := range issuing {
		if is.at.Before(f.Leaf.NotBefore.Add(time.Second)) {
			ordered, by = is.at, is.reason
		}
	}
	if ordered.IsZero() {
		return cutoff{}, fmt.Sprintf("no issuance of its R%d leaf seen", n)
	}
	named, unbundled := at.named, time.Duration(0)
	if named.IsZero() || f.Start.Before(named) {
		// No gateway Secret named R yet: the leader was killed as R came,
		// and its lease had to run out before the standby bundled R. The
		// issuance must then have been in flight when R came, and the
		// wait is the monitor's race, bounded by maxRace.
		switch {
		case !ordered.Before(at.arrived.Add(staleView)):
			return cutoff{}, fmt.Sprintf("no gateway Secret version named R%d yet, and its leaf was ordered (%s) %v after the root Secret held R%d", n, by, ordered.Sub(at.arrived).Round(time.Millisecond), n)
		case f.Start.Sub(at.arrived) > maxRace:
			return cutoff{}, fmt.Sprintf("no gateway Secret version named R%d %v after the root Secret held it, beyond %v", n, f.Start.Sub(at.arrived).Round(time.Millisecond), maxRace)
		}
		if named.IsZero() {
			unbundled = now.Sub(f.Start)
		} else {
			unbundled = named.Sub(f.Start)
		}
		named = f.Start
	}
	switch {
	case !ordered.Before(named.Add(staleView)):
		return cutoff{}, fmt.Sprintf("its R%d leaf was ordered (%s) %v after the gateway Secret named R%d", n, by, ordered.Sub(at.named).Round(time.Millisecond), n)
	case !f.Leaf.NotBefore.Before(named.Add(propagationDelay())):
		return cutoff{}, fmt.Sprintf("its leaf was signed %v after the gateway Secret named R%d", f.Leaf.NotBefore.Sub(named).Round(time.Second), n)
	case !at.loaded.IsZero() && !f.Start.Before(at.loaded):
		return cutoff{}, fmt.Sprintf("the gateway had loaded R%d", n)
	case f.Start.Sub(named) > maxCutoff():
		return cutoff{}, fmt.Sprintf("%v after the gateway Secret named R%d, beyond %v", f.Start.Sub(named).Round(time.Millisecond), n, maxCutoff())
	}
	k := cutoff{client: f.Client, root: n, failures: 1, first: f.Start, by: by, unbundled: unbundled,
		ordered: at.arrived.Sub(ordered), signed: f.Leaf.NotBefore.Sub(named.Truncate(time.Second))}
	if at.loaded.IsZero() {
		k.window = now.Sub(f.Start) // never loaded: open, and too long
	} else {
		k.window = at.loaded.Sub(f.Start)
	}
	return k, ""
}

// cutoffTable writes the cut-offs, if any.
func (o *outcome) cutoffTable(w func(string, ...any)) {
	if len(o.cutoffs.all) == 0 {
		return
	}
	w("## Cut-offs")
	w("")
	w("A healthy client cut off until the lagging gateway loaded a root: its issuance was ordered before the root Secret held the root or at the latest %v after the gateway Secret named it, when dualca's renewer may still act on the decision before (in flight when it rotated), signed with that root and loaded by the client before the gateway loaded the version that bundles it (see test/soak/cutoff_test.go for the exact definition). Bound: the longest reload lag plus %v, %v.", staleView, cutoffMargin, maxCutoff())
	w("")
	w("| client | root | from | failed attempts | lasted | issuance ordered (reason) before the root Secret held the root | signed after the gateway Secret named it |")
	w("|---|---|---|---|---|---|---|")
	all := slices.Clone(o.cutoffs.all)
	slices.SortStableFunc(all, func(a, b cutoff) int { return cmp.Compare(a.root, b.root) })
	for _, k := range all {
		w("| %s | R%d | %s | %d | %v | %v (%s) | %v |", k.client, k.root, minutes(k.first.Sub(o.begin())), k.failures,
			k.window.Round(time.Millisecond), k.ordered.Round(time.Millisecond), k.by, k.signed)
	}
	w("")
}

func TestCutoffsAreStrictlyDefined(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)
	sec := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// R3 came at 0 s, dualca named it at 0.05 s, the gateway loaded it at
	// 8 s; the client's renewal was ordered at -0.5 s, signed at 1 s, and
	// the client failed from 3 s.
	at := rootTimes{arrived: sec(0), named: sec(0.05), loaded: sec(8)}
	ordered := []issuance{{at: sec(-0.5), reason: "ManuallyTriggered"}}
	failure := func(start, signed float64) mtls.Failure {
		return mtls.Failure{Client: "agent-1", Start: sec(start), Leaf: &x509.Certificate{NotBefore: sec(signed)}}
	}
	tests := map[string]struct {
		f       mtls.Failure
		at      rootTimes
		issuing []issuance
		outside string // part of why it is no cut-off; "" for a cut-off
	}{
		"an issuance in flight when the root came, the gateway behind": {f: failure(3, 1), at: at, issuing: ordered},
		"ordered within the renewer's stale view of the gateway version": {f: failure(3, 1), at: at,
			issuing: []issuance{{at: sec(1), reason: "ManuallyTriggered"}}},
		"a later issuance, after the leaf was signed, is not the leaf's": {f: failure(3, 1), at: at,
			issuing: append(slices.Clone(ordered), issuance{at: sec(5), reason: "ManuallyTriggered"})},
		"no issuance seen": {f: failure(3, 1), at: at, outside: "no issuance"},
		"ordered after dualca had named the root (a renewal ordered early)": {f: failure(5, 3), at: at,
			issuing: []issuance{{at: sec(2.1), reason: "ManuallyTriggered"}}, outside: "ordered (ManuallyTriggered) 2.05s after"},
		"signed after the propagation delay": {f: failure(30, 21), at: rootTimes{arrived: sec(0), named: sec(0.05), loaded: sec(40)},
			issuing: ordered, outside: "signed"},
		"in flight when the root came, no leader to bundle it yet": {f: failure(3, 1), at: rootTimes{arrived: sec(0), named: sec(16), loaded: sec(20)},
			issuing: ordered},
		"no leader to bundle the root, and ordered after the root came": {f: failure(3, 2), at: rootTimes{arrived: sec(0), named: sec(16), loaded: sec(20)},
			issuing: []issuance{{at: sec(2.5), reason: "ManuallyTriggered"}}, outside: "no gateway Secret version named R3 yet, and its leaf was ordered"},
		"the root unbundled for longer than a race may last": {f: failure(31, 1), at: rootTimes{arrived: sec(0), named: sec(40), loaded: sec(45)},
			issuing: ordered, outside: "beyond 30s"},
		"the gateway had loaded the root": {f: failure(9, 1), at: at, issuing: ordered, outside: "the gateway had loaded R3"},
		"longer than the longest lag and the margin": {f: failure(16, 1), at: rootTimes{arrived: sec(0), named: sec(0.05)},
			issuing: ordered, outside: "beyond 15s"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			k, why := judgeCutoff(tc.f, 3, tc.at, tc.issuing, sec(60))
			if tc.outside != "" {
				g.Expect(why).To(ContainSubstring(tc.outside))
				return
			}
			g.Expect(why).To(BeEmpty())
			g.Expect([]any{k.client, k.root, k.first, k.window, k.unbundled}).To(Equal([]any{"agent-1", 3, tc.f.Start,
				tc.at.loaded.Sub(tc.f.Start), max(0, tc.at.named.Sub(tc.f.Start))}))
		})
	}
}
