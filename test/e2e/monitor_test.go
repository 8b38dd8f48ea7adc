package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/monitor"
)

// maxRace bounds how long a client issued from a root the gateway does not
// trust yet may wait for it (see package monitor): dualca bundles a new
// root within milliseconds of cert-manager writing it; seconds are the
// margin of a busy two-core machine.
const maxRace = 10 * time.Second

// watcher is a scenario's monitor (package monitor) watching from before
// dualca starts.
type watcher struct{ *monitor.Monitor }

// startMonitor starts the monitor of namespace ns and returns once its
// watch has listed the namespace: every version after that is seen, in
// order, and none before it is left out of the first list.
func startMonitor(ctx context.Context, t *testing.T, kube kubernetes.Interface, ns string, clients int) watcher {
	t.Helper()
	m, err := monitor.Start(ctx, kube, ns, monitor.Options{
		Root: rootName, Gateway: gatewayName, Clients: clients,
		IsClient: func(l map[string]string) bool { return l[clientLabel] != "" },
	})
	if err != nil {
		t.Fatal(err)
	}
	return watcher{m}
}

// result returns the gateway versions seen, the races and the violations.
func (w watcher) result() (versions, races int, violations []string) {
	r := w.Result()
	return r.Versions, r.RaceCount, r.Violations
}

func (w watcher) phases(root *x509.Certificate) (bundled, renewing, clients, switched, steady time.Duration) {
	return w.Phases(root)
}

func (w watcher) firstGateway(match func(map[string]string) bool) map[string]string {
	return w.FirstGateway(match)
}

func (w watcher) bundleRegressions() []string { return w.BundleRegressions() }

// stormRegressions lists the gateway versions whose storm annotation is
// lower than an earlier version's: a writer that overwrote the storm with
// what it had read before.
func (w watcher) stormRegressions() []string {
	var out []string
	high := 0
	for i, a := range w.History() {
		n, _ := strconv.Atoi(a[stormAnnotation])
		if n < high {
			out = append(out, fmt.Sprintf("version %d: %s=%d after %d", i+1, stormAnnotation, n, high))
		}
		high = max(high, n)
	}
	return out
}

// gatewayLoad is when the scenario's gateway loaded a root that dualca
// moved clients to: after the gateway Secret named it (lag) and before the
// gateway Secret said Renewing for it (margin: what the propagation delay
// left; negative when clients were moved before the gateway could verify
// them).
type gatewayLoad struct {
	root        string
	loaded      bool
	lag, margin time.Duration
}

// gatewayLoads are the loads of every root the gateway Secret said
// Renewing for, in the order the root Secret held them. The Renewing
// version comes before any client is moved (dualca triggers renewals only
// once it is written) and a propagation delay after the version that named
// the root: the time the gateway is given to load it.
func (s *scenario) gatewayLoads() []gatewayLoad {
	var out []gatewayLoad
	for _, root := range s.watch.Roots() {
		fp := bundle.Fingerprint(root)
		renewing := s.watch.FirstSeen("phase " + string(bundle.PhaseRenewing) + " " + fp)
		if renewing.IsZero() {
			continue
		}
		l := gatewayLoad{root: bundle.Short(fp)}
		if loaded := s.gateway.RootLoaded(fp); !loaded.IsZero() {
			l.loaded = true
			l.lag = loaded.Sub(s.watch.FirstSeen("bundle " + fp)).Round(time.Millisecond)
			l.margin = renewing.Sub(loaded).Round(time.Millisecond)
		}
		out = append(out, l)
	}
	return out
}

// logGatewayLoads logs how long the gateway took to load each root dualca
// moved clients to, and the margin the propagation delay left: the
// information that tells a gateway slower than the delay (the machine)
// from a dualca that moved clients too soon.
func (s *scenario) logGatewayLoads() {
	for _, l := range s.gatewayLoads() {
		if !l.loaded {
			s.t.Logf("gateway load of %s: never loaded, yet dualca moved clients to it", l.root)
			continue
		}
		s.t.Logf("gateway load of %s: %v after the gateway Secret named it, %v before dualca moved clients to it (the running dualca's propagation delay: %v)",
			l.root, l.lag, l.margin, s.propagationDelay)
	}
}

// expectStrictlyClean asserts what the monitor and the TLS endpoints saw
// besides the handshakes: every gateway version was usable and kept the
// invariants, the gateway Secret was deleted exactly deletions times (as
// seen by the monitor and by the gateway), no gateway or client version
// failed to load, every race was resolved within maxRace, and the gateway
// had loaded every root before dualca moved a client to it (the invariant
// the propagation delay exists for; how long the load took is logged, not
// judged).
func (s *scenario) expectStrictlyClean(deletions int) {
	s.t.Helper()
	for _, l := range s.gatewayLoads() {
		s.g.Expect(l.loaded).To(BeTrue(), "the gateway loaded %s, which dualca moved clients to", l.root)
		s.g.Expect(l.margin).To(BeNumerically(">", 0),
			"the gateway loaded %s (%v after the gateway Secret named it) before dualca moved clients to it, a propagation delay later (the running dualca's: %v)", l.root, l.lag, s.propagationDelay)
	}
	r := s.watch.Result()
	gw, f := s.gateway.Stats(), s.fleet.Stats()
	s.t.Logf("monitor: %d gateway versions, %d deletions, %d violations, %d races (longest %v), %d checks failed by clients broken on purpose, %d by clients left behind by the legacy strategy; gateway load errors %d, deletions %d; client load errors %d",
		r.Versions, r.Deletions, r.ViolationCount, r.RaceCount, r.LongestRace().Round(time.Millisecond), r.Excused, r.Inherited, gw.LoadErrors, gw.Deletions, f.Total.LoadErrors)
	s.g.Expect(r.Violations).To(BeEmpty(), "every gateway version parsed, matched its key and served every client")
	s.g.Expect(r.Deletions).To(Equal(deletions), "the gateway Secret was deleted only when the test did")
	s.g.Expect(gw.Deletions).To(Equal(deletions), "the gateway saw only the deletions the test made")
	s.g.Expect(gw.LoadErrors).To(BeZero(), "every gateway version loaded: %s", gw.LastLoadError)
	s.g.Expect(f.Total.LoadErrors).To(BeZero(), "every client version loaded")
	s.g.Expect(r.LongestRace()).To(BeNumerically("<=", maxRace), "races resolved within %v: %v", maxRace, r.Races)
}
