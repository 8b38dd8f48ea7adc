package syncer

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
)

// Metrics are dualca's Prometheus metrics; docs/metrics.md describes each
// one. Labels stay few: roots are named by a fingerprint prefix, never by
// certificate material, and nothing is labelled per client.
//
// A Metrics is a prometheus.Collector. The binary registers the one it
// runs with on controller-runtime's metrics.Registry, which the manager's
// metrics endpoint serves and where controller-runtime's own metrics are;
// a process registers one Metrics there. A test that runs several managers
// in one process gives each its own Metrics and reads it through a registry
// of its own, so no two managers move the same gauge.
type Metrics struct {
	serverExpiry   prometheus.Gauge
	rootExpiry     *gaugeSet
	rootClients    *gaugeSet
	bundleRoots    prometheus.Gauge
	phase          *prometheus.GaugeVec
	rotationLag    prometheus.Gauge
	propagation    prometheus.Histogram
	clientsByState *prometheus.GaugeVec
	renewals       *prometheus.CounterVec
	rootValid      prometheus.Gauge
	strategyInfo   *gaugeSet
	syncErrors     *prometheus.CounterVec
	switchesForced prometheus.Counter
	lastSync       prometheus.Gauge
	paused         prometheus.Gauge
	tampered       prometheus.Counter
	foreign        prometheus.Gauge
	untrusted      prometheus.Counter
	abandoned      prometheus.Gauge
	issuingCurrent *prometheus.GaugeVec
	clientsRead    prometheus.Gauge
}

// NewMetrics returns metrics at their zero values, registered nowhere.
func NewMetrics() *Metrics {
	return &Metrics{
		serverExpiry: gauge("dualca_server_certificate_expiry_timestamp_seconds",
			"When the certificate the gateway presents (tls.crt) expires, in Unix seconds."),
		rootExpiry: newGaugeSet("dualca_root_expiry_timestamp_seconds",
			"When each root in the gateway's trust bundle expires, in Unix seconds; role is current, server or previous.", "root", "role"),
		rootClients: newGaugeSet("dualca_root_clients",
			"Selected clients whose unexpired leaf chains to each root in the bundle, unknown clients (whose certificates dualca cannot see) counted for every root.", "root"),
		bundleRoots: gauge("dualca_bundle_roots", "Roots in the gateway's trust bundle (ca.crt)."),
		phase: gaugeVec("dualca_phase",
			"1 for the rotation phase the gateway Secret records (Legacy for the legacy strategy), 0 for the others.", "phase"),
		rotationLag: gauge("dualca_rotation_lag_seconds",
			"0 while the gateway Secret reflects the current root, else the seconds since dualca first saw that root."),
		propagation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dualca_propagation_seconds",
			Help:    "Time from dualca first seeing a new root to the gateway Secret written with it.",
			Buckets: prometheus.ExponentialBuckets(0.002, 2, 15), // 2 ms to 33 s
		}),
		clientsByState: gaugeVec("dualca_clients",
			"Selected clients by state during a rotation: renewed (on the current root), pending, failed.", "state"),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dualca_renewals_total",
			Help: "Client renewals acted on, by strategy, method (issuing-condition, secret-deletion) and result (triggered, skipped, failed)."},
			[]string{"strategy", "method", "result"}),
		rootValid: gauge("dualca_root_valid", "1 when the root Secret holds a usable root, 0 when it is missing or invalid."),
		strategyInfo: newGaugeSet("dualca_strategy_info",
			"The active strategy: always 1, with the strategy as a label.", "strategy"),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dualca_sync_errors_total",
			Help: "Reconciles that failed, by reason: root_invalid, conflict, api_error, bundle_too_large (the plan did not fit the budget and was refused, the gateway left as it was)."}, []string{"reason"}),
		switchesForced: prometheus.NewCounter(prometheus.CounterOpts{Name: "dualca_server_switch_forced_total",
			Help: "Server switches made before every client was ready: grace period over, an operator's dualca promote, server root or server certificate about to expire, server chain full (one cross-certificate per rotation the server did not follow, up to the most dualca sends), or server credential missing or changed outside dualca."}),
		lastSync: gauge("dualca_last_sync_timestamp_seconds",
			"When the gateway Secret was last found or made in sync with the root, in Unix seconds (not by a refused plan, which leaves it behind)."),
		tampered: prometheus.NewCounter(prometheus.CounterOpts{Name: "dualca_gateway_tampered_total",
			Help: "Times a target (the gateway Secret, its -cacert Secret, a bundle target, the issuing Secret) was found changed outside dualca (the keys dualca owns there, a key that would shadow them, the dualca.io/ annotations) and written again from dualca's record."}),
		foreign: gauge("dualca_target_foreign_inputs",
			"Inputs found at the last reconcile that a gateway reads beside dualca's targets and dualca does not own: a ca.crl in an Istio target, a <name>-cacert Secret shadowing a combined gateway Secret's bundle."),
		untrusted: prometheus.NewCounter(prometheus.CounterOpts{Name: "dualca_untrusted_roots_total",
			Help: "Decisions that found a CA dualca never read from the root Secret where a root was expected (ca.crt, tls.crt, a selected client's ca.crt) and did not trust it."}),
		paused: gauge("dualca_paused",
			"1 while an operator holds the rotation (dualca pause): no client renewal, no planned server switch; else 0."),
		issuingCurrent: gaugeVec("dualca_issuing_secret_current",
			"1 when the issuing Secret (--issuing-secret) holds the current root, 0 while it keeps an older one for the gateway to trust the new one first; absent without an issuing Secret.", "secret"),
		clientsRead: gauge("dualca_clients_read",
			"1 once dualca has read the selected clients since it started (its cache of their Certificates and CertificateRequests has loaded); 0 while it loads, when decisions treat the clients as unknown, and without client tracking."),
		abandoned: gauge("dualca_clients_abandoned",
			"Selected clients still due whose renewal dualca no longer triggers: triggered the most times allowed on the current root and their Certificate's spec, and still not on it."),
	}
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.serverExpiry, m.rootExpiry, m.rootClients, m.bundleRoots, m.phase, m.rotationLag,
		m.propagation, m.clientsByState, m.renewals, m.rootValid, m.strategyInfo, m.syncErrors, m.switchesForced, m.lastSync, m.paused,
		m.tampered, m.foreign, m.untrusted, m.abandoned, m.issuingCurrent, m.clientsRead}
}

// Describe sends the descriptions of every metric, for prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect sends the current value of every metric, for prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// allPhases are set to 0 or 1 together, so a query sees every phase.
var allPhases = []string{string(bundle.PhaseBundle), string(bundle.PhaseRenewing), string(bundle.PhaseRetiring), string(bundle.PhaseSteady), legacy.Phase}

// strategy records the strategy the process runs, and starts its renewal
// counters at 0: a series that first appears at its first increment hides
// that increment from rate() and increase(), so the first renewals after a
// start would be missing from every graph of them.
func (m *Metrics) strategy(s strategy) {
	m.strategyInfo.replace(gaugeValue{1, []string{s.Name()}})
	for _, result := range []string{renewalTriggered, renewalSkipped, renewalFailed} {
		m.renewals.WithLabelValues(s.Name(), s.RenewalMethod(), result)
	}
}

// decision sets the gauges that describe the gateway Secret as just
// written (or found already right); phase is its phase label.
func (m *Metrics) decision(d bundle.Decision, phase string, clients bundle.Clients, now time.Time) {
	for _, name := range allPhases {
		v := 0.0
		if name == phase {
			v = 1
		}
		m.phase.WithLabelValues(name).Set(v)
	}
	leaf, roots := d.Leaf, d.Roots
	if leaf == nil {
		if chain, err := bundle.ParseCertificates("tls.crt", d.CertPEM); err == nil {
			leaf = chain[0]
		}
	}
	if leaf != nil {
		m.serverExpiry.Set(float64(leaf.NotAfter.Unix()))
	}
	if roots == nil {
		roots, _ = bundle.ParseCertificates("ca.crt", d.CAPEM)
	}
	m.bundleRoots.Set(float64(len(roots)))
	expiry := make([]gaugeValue, 0, len(roots))
	var using []gaugeValue
	for _, r := range roots {
		fp := bundle.Fingerprint(r)
		expiry = append(expiry, gaugeValue{float64(r.NotAfter.Unix()), []string{bundle.Short(fp), rootRole(fp, d.State)}})
		if clients.Tracked && !clients.Unread {
			using = append(using, gaugeValue{float64(clients.Using(r, now)), []string{bundle.Short(fp)}})
		}
	}
	m.rootExpiry.replace(expiry...)
	if !clients.Unread {
		// Unread, the clients are not counted: the last counts stay.
		m.rootClients.replace(using...)
	}
	if d.State.Clients != nil {
		m.clientsByState.WithLabelValues("renewed").Set(float64(d.State.Clients.Renewed))
		m.clientsByState.WithLabelValues("pending").Set(float64(d.State.Clients.Pending))
		m.clientsByState.WithLabelValues("failed").Set(float64(d.State.Clients.Failed))
	}
	for _, e := range d.Events {
		if e.Reason == bundle.ReasonUntrustedRoot {
			m.untrusted.Inc()
		}
		if e.Reason == bundle.ReasonServerSwitchForced {
			m.switchesForced.Inc()
		}
	}
	if d.Refused == "" {
		m.lastSync.Set(float64(now.Unix()))
	}
	m.recordPause(d.State)
}

// recordPause sets dualca_paused from the state the decision obeys: the
// legacy strategy keeps a pause for later but does not obey it.
func (m *Metrics) recordPause(st bundle.State) {
	if st.Held() {
		m.paused.Set(1)
		return
	}
	m.paused.Set(0)
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

// rootWatch remembers when dualca first saw the root it reads now, for the
// lag and the propagation time: one root at a time, so that a process
// living through rotation after rotation keeps nothing of the roots
// before. A root that comes back after another is timed from its return.
// A process that starts sees the current root for the first time at
// start: its own start-up is what it measures then.
type rootWatch struct {
	metrics *Metrics
	mu      sync.Mutex
	// root is the fingerprint of the root last read, seen when it was
	// first read in a row, observed whether its propagation was observed.
	root     string
	seen     time.Time
	observed bool
}

// saw records that fp was read and returns when it was first read in a
// row.
func (w *rootWatch) saw(fp string, now time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	if fp != w.root {
		w.root, w.seen, w.observed = fp, now, false
	}
	return w.seen
}

// reflected records that the gateway now reflects fp: the propagation time
// is observed once per root, and the lag is 0 again.
func (w *rootWatch) reflected(fp string, now time.Time) {
	since := w.saw(fp, now)
	w.mu.Lock()
	first := !w.observed
	w.observed = true
	w.mu.Unlock()
	if first {
		w.metrics.propagation.Observe(now.Sub(since).Seconds())
	}
	w.metrics.rotationLag.Set(0)
}

// behind records that the gateway does not reflect fp yet.
func (w *rootWatch) behind(fp string, now time.Time) {
	w.metrics.rotationLag.Set(now.Sub(w.saw(fp, now)).Seconds())
}

// gaugeSet is a family of gauges replaced as a whole, whose series come
// and go with what they describe (the roots of the bundle): a scrape sees
// the set before a replacement or after it, never a part of it or none,
// as it could between a GaugeVec's Reset and its next Set.
type gaugeSet struct {
	desc   *prometheus.Desc
	series atomic.Pointer[[]prometheus.Metric]
}

func newGaugeSet(name, help string, labels ...string) *gaugeSet {
	return &gaugeSet{desc: prometheus.NewDesc(name, help, labels, nil)}
}

// Describe sends the family's description, for prometheus.Collector.
func (s *gaugeSet) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect sends the series of the last replace, for prometheus.Collector.
func (s *gaugeSet) Collect(ch chan<- prometheus.Metric) {
	if p := s.series.Load(); p != nil {
		for _, m := range *p {
			ch <- m
		}
	}
}

// gaugeValue is one series of a gaugeSet: its value and label values.
type gaugeValue struct {
	value  float64
	labels []string
}

// replace makes values the family's series, in one step.
func (s *gaugeSet) replace(values ...gaugeValue) {
	series := make([]prometheus.Metric, 0, len(values))
	for _, v := range values {
		series = append(series, prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, v.value, v.labels...))
	}
	s.series.Store(&series)
}
