package syncer

import (
	"crypto/x509"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dualca/dualca/bundle"
)

// Metrics, on controller-runtime's registry, so the manager's metrics
// endpoint serves them. docs/metrics.md describes each one. Labels stay few:
// roots are named by a fingerprint prefix, never by certificate material,
// and nothing is labelled per client.
var (
	serverExpiry = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dualca_server_certificate_expiry_timestamp_seconds",
		Help: "When the certificate the gateway presents (tls.crt) expires, in Unix seconds.",
	})
	rootExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_root_expiry_timestamp_seconds",
		Help: "When each root in the gateway's trust bundle expires, in Unix seconds; role is current, server or previous.",
	}, []string{"root", "role"})
	rootClients = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_root_clients",
		Help: "Selected clients whose unexpired leaf chains to each root in the bundle.",
	}, []string{"root"})
	bundleRoots = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dualca_bundle_roots",
		Help: "Roots in the gateway's trust bundle (ca.crt).",
	})
	phase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_phase",
		Help: "1 for the rotation phase the gateway Secret records (Legacy for the legacy strategy), 0 for the others.",
	}, []string{"phase"})
	rotationLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dualca_rotation_lag_seconds",
		Help: "0 while the gateway Secret reflects the current root, else the seconds since dualca first saw that root.",
	})
	propagation = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "dualca_propagation_seconds",
		Help:    "Time from dualca first seeing a new root to the gateway Secret written with it.",
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 15), // 2 ms to 33 s
	})
	clientsByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_clients",
		Help: "Selected clients by state during a rotation: renewed (on the current root), pending, failed.",
	}, []string{"state"})
	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dualca_renewals_total",
		Help: "Client renewals acted on, by strategy, method (issuing-condition, secret-deletion) and result (triggered, skipped, failed).",
	}, []string{"strategy", "method", "result"})
	rootValid = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dualca_root_valid",
		Help: "1 when the root Secret holds a usable root, 0 when it is missing or invalid.",
	})
	strategyInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dualca_strategy_info",
		Help: "The active strategy: always 1, with the strategy as a label.",
	}, []string{"strategy"})
	syncErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dualca_sync_errors_total",
		Help: "Reconciles that failed, by reason: root_invalid, conflict, api_error.",
	}, []string{"reason"})
	switchesForced = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dualca_server_switch_forced_total",
		Help: "Server switches made before every client was ready: grace period over, server root expiring, or server credential broken.",
	})
	lastSync = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dualca_last_sync_timestamp_seconds",
		Help: "When the gateway Secret was last found or made in sync with the root, in Unix seconds.",
	})
)

var registerOnce sync.Once

func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(serverExpiry, rootExpiry, rootClients, bundleRoots, phase, rotationLag,
			propagation, clientsByState, renewals, rootValid, strategyInfo, syncErrors, switchesForced, lastSync)
	})
}

// Phase label of the legacy strategy, which has no rotation phases.
const phaseLegacy = "Legacy"

// allPhases are set to 0 or 1 together, so a query sees every phase.
var allPhases = []string{string(bundle.PhaseBundle), string(bundle.PhaseRenewing), string(bundle.PhaseRetiring), string(bundle.PhaseSteady), phaseLegacy}

// rootWatch remembers when dualca first saw each root, for the lag and the
// propagation time. A process that starts sees the current root for the
// first time at start: its own start-up is what it measures then.
type rootWatch struct {
	mu       sync.Mutex
	seen     map[string]time.Time
	observed map[string]bool
}

// saw records the first time fp was read and returns it.
func (w *rootWatch) saw(fp string, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seen == nil {
		w.seen, w.observed = map[string]time.Time{}, map[string]bool{}
	}
	if _, ok := w.seen[fp]; !ok {
		w.seen[fp] = now
	}
	return w.seen[fp]
}

// reflected records that the gateway now reflects fp: the propagation time
// is observed once per root, and the lag is 0 again.
func (w *rootWatch) reflected(fp string, now time.Time) {
	since := w.saw(fp, now)
	w.mu.Lock()
	first := !w.observed[fp]
	w.observed[fp] = true
	w.mu.Unlock()
	if first {
		propagation.Observe(now.Sub(since).Seconds())
	}
	rotationLag.Set(0)
}

// behind records that the gateway does not reflect fp yet.
func (w *rootWatch) behind(fp string, now time.Time) {
	rotationLag.Set(now.Sub(w.saw(fp, now)).Seconds())
}

// recordDecision sets the gauges that describe the gateway Secret as just
// written (or found already right).
func recordDecision(d bundle.Decision, clients bundle.Clients, legacy bool, now time.Time) {
	p := string(d.State.Phase)
	if legacy {
		p = phaseLegacy
	}
	for _, name := range allPhases {
		v := 0.0
		if name == p {
			v = 1
		}
		phase.WithLabelValues(name).Set(v)
	}
	if chain, err := bundle.ParseCertificates("tls.crt", d.CertPEM); err == nil {
		serverExpiry.Set(float64(chain[0].NotAfter.Unix()))
	}
	roots, err := bundle.ParseCertificates("ca.crt", d.CAPEM)
	if err != nil {
		roots = nil
	}
	bundleRoots.Set(float64(len(roots)))
	rootExpiry.Reset()
	rootClients.Reset()
	for _, r := range roots {
		fp := bundle.Fingerprint(r)
		rootExpiry.WithLabelValues(bundle.Short(fp), rootRole(fp, d.State)).Set(float64(r.NotAfter.Unix()))
		if clients.Tracked {
			rootClients.WithLabelValues(bundle.Short(fp)).Set(float64(using(clients, r, now)))
		}
	}
	if d.State.Clients != nil {
		clientsByState.WithLabelValues("renewed").Set(float64(d.State.Clients.Renewed))
		clientsByState.WithLabelValues("pending").Set(float64(d.State.Clients.Pending))
		clientsByState.WithLabelValues("failed").Set(float64(d.State.Clients.Failed))
	}
	for _, e := range d.Events {
		if e.Reason == bundle.ReasonServerSwitchForced {
			switchesForced.Inc()
		}
	}
	lastSync.Set(float64(now.Unix()))
}

func rootRole(fp string, st bundle.State) string {
	switch fp {
	case st.Root:
		return "current"
	case st.Server:
		return "server"
	}
	return "previous"
}

func using(clients bundle.Clients, root *x509.Certificate, now time.Time) int {
	n := 0
	for _, c := range clients.Items {
		if c.Uses(root, now) {
			n++
		}
	}
	return n
}
