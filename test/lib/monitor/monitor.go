// Package monitor checks every version of a gateway Secret that dualca
// writes against the Secrets of its clients, as the API server made them:
// the end-to-end suite, the demo and the soak all judge dualca through it.
//
// It follows the root Secret, the gateway Secret and the client Secrets of
// one namespace through a single watch, so it sees their versions in the
// order the API server wrote them (a watch the API server cannot resume,
// after a restart, is replaced by a list checked as one state), and after
// each one it checks:
//   - the gateway Secret parses: tls.crt and tls.key form a pair whose key
//     matches the certificate, and ca.crt holds certificates only;
//   - (zero-downtime versions) ca.crt holds the root the server certificate
//     chains to;
//   - every client's unexpired leaf chains to a root in ca.crt, so the
//     gateway accepts it;
//   - the server chain (the whole tls.crt) verifies for every client against
//     that client's own ca.crt, so every client accepts the gateway.
//
// A client that fails one of the last two because cert-manager signed it
// with a root that the root Secret holds but dualca has not bundled yet (it
// issued from a root it had just rotated to) is a race, not a violation:
// dualca cannot bundle a root before it exists. Each race is timed from the
// version that showed it to the version that resolved it, and a caller
// bounds the longest. Clients named in Options.Excused (broken on purpose)
// are counted apart, and so are the clients that a server adopted from the
// legacy strategy (which switched it before re-issuing them) does not serve
// yet. The monitor never records key or certificate bytes.
package monitor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/dualca/dualca/bundle"
)

// maxKept bounds the violation texts and races kept, so that a long run
// that goes wrong cannot grow without end; counts go on beyond it.
const maxKept = 10000

// Options say which Secrets of the namespace are whose.
type Options struct {
	// Root and Gateway are the names of the root and the gateway Secrets.
	Root, Gateway string
	// IsClient tells a client Secret by its labels.
	IsClient func(labels map[string]string) bool
	// Clients is the number of clients: the moment all of them are on the
	// root is timed once that many are seen.
	Clients int
}

// Monitor is the checker; feed it through Handler or Start.
type Monitor struct {
	opts Options

	mu       sync.Mutex
	excused  map[string]bool
	clients  map[string]*client
	root     *x509.Certificate
	roots    []*x509.Certificate // every root the root Secret held, in order
	gateway  *gatewayVersion
	versions int
	deleted  int
	// violations are kept up to maxKept; violationCount counts them all.
	violations     []string
	violationCount int
	excusedCount   int
	// adopted is the server fingerprint of a zero-downtime version that
	// followed a legacy one; inherited counts the clients it failed.
	adopted   string
	inherited int
	open      map[string]Race // client name -> its race still open
	races     []Race          // closed races, up to maxKept
	raceCount int
	history   []map[string]string
	firsts    map[string]time.Time
	// relists counts the lists after the first (Snapshot).
	relists int
}

// client is one client Secret as the monitor last saw it.
type client struct {
	leaf *x509.Certificate
	pool *x509.CertPool
	cas  string // fingerprints of ca.crt, sorted: the key of its trust
}

// gatewayVersion is a gateway Secret version, parsed once.
type gatewayVersion struct {
	rv          string
	annotations map[string]string
	zeroDown    bool
	roots       []*x509.Certificate
	chain       []*x509.Certificate // nil when tls.crt/tls.key are unusable
	// verified and trusted memoize the checks per client trust and leaf.
	verified map[string]error
	trusted  map[string]bool
}

// Race is a client that one gateway version could not serve because its
// Secret came from a root not bundled yet, and for how long.
type Race struct {
	// Client is the client Secret's name.
	Client string
	// Start is when the version that showed it was seen.
	Start time.Time
	// Window is how long it lasted (until now while Open).
	Window time.Duration
	// Open says no version has resolved it yet.
	Open bool
}

// Result is what the monitor found so far.
type Result struct {
	// Versions counts the gateway Secret versions seen; Deletions the times
	// it was deleted.
	Versions, Deletions int
	// Violations are the broken checks (the first ones), ViolationCount all
	// of them.
	Violations     []string
	ViolationCount int
	// Excused counts the failed checks of clients broken on purpose;
	// Inherited those of clients that a server adopted from the legacy
	// strategy does not serve (it switched before they were re-issued).
	Excused, Inherited int
	// Races are the races, closed then open; RaceCount counts them all.
	Races     []Race
	RaceCount int
	// Relists counts the times a watch could not be resumed and the
	// namespace was listed again: each list is checked as one state, the
	// versions between the last event and it are unseen.
	Relists int
}

// LongestRace is the longest race window, open ones counted to now.
func (r Result) LongestRace() time.Duration {
	var longest time.Duration
	for _, race := range r.Races {
		longest = max(longest, race.Window)
	}
	return longest
}

// New returns a monitor; it checks nothing until fed.
func New(opts Options) *Monitor {
	return &Monitor{opts: opts, excused: map[string]bool{}, clients: map[string]*client{},
		open: map[string]Race{}, firsts: map[string]time.Time{}}
}

// Start runs a monitor of namespace ns until ctx is done and returns once it
// has listed the namespace: every version after that is seen, in order.
//
// It lists and watches itself rather than through an informer: an
// informer that lists again after its watch ended (an API server restart)
// hands the listed objects over one by one, in the order of their names,
// so the monitor would check new client leaves against a gateway version
// it has not been handed yet. Here a watch that ends is resumed from the
// last version seen; one the API server can no longer resume is replaced
// by a list, which is taken whole (Snapshot): one consistent state, the
// versions between the two unseen, and counted (Result.Relists).
func Start(ctx context.Context, kube kubernetes.Interface, ns string, opts Options) (*Monitor, error) {
	m := New(opts)
	secrets := kube.CoreV1().Secrets(ns)
	listCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rv, err := m.list(listCtx, secrets)
	if err != nil {
		return nil, fmt.Errorf("the monitor's list of namespace %s: %w", ns, err)
	}
	m.relists = 0 // the first list is no relist
	go m.follow(ctx, secrets, rv)
	return m, nil
}

// list takes the namespace's Secrets as one snapshot and returns the
// version to watch from.
func (m *Monitor) list(ctx context.Context, secrets typedcorev1.SecretInterface) (string, error) {
	l, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	objs := make([]*corev1.Secret, len(l.Items))
	for i := range l.Items {
		objs[i] = &l.Items[i]
	}
	m.Snapshot(objs)
	return l.ResourceVersion, nil
}

// follow watches from rv until ctx is done: resumed where it ended, listed
// again when it cannot be.
func (m *Monitor) follow(ctx context.Context, secrets typedcorev1.SecretInterface, rv string) {
	for ctx.Err() == nil {
		w, err := secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		expired := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		if err == nil {
			began := time.Now()
			rv, expired = m.events(w, rv)
			w.Stop()
			if !expired && time.Since(began) < time.Second {
				pause(ctx) // a watch the API server ends at once: no busy loop
			}
		}
		for expired && ctx.Err() == nil {
			if rv, err = m.list(ctx, secrets); err == nil {
				break
			}
			pause(ctx)
		}
		if err != nil && !expired {
			pause(ctx) // the API server is away
		}
	}
}

// events takes w's events until it ends; it returns the last version seen
// and whether the API server said that version is too old to resume from.
func (m *Monitor) events(w watch.Interface, rv string) (string, bool) {
	for e := range w.ResultChan() {
		switch e.Type {
		case watch.Error:
			err := apierrors.FromObject(e.Object)
			return rv, apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
		case watch.Bookmark:
		case watch.Deleted:
			m.Seen(e.Object, true)
		default:
			m.Seen(e.Object, false)
		}
		if o, ok := e.Object.(metav1.Object); ok && o.GetResourceVersion() != "" {
			rv = o.GetResourceVersion()
		}
	}
	return rv, false
}

// pause waits a second, or until ctx is done.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// Handler feeds the monitor from an informer of the namespace's Secrets.
func (m *Monitor) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.Seen(obj, false) },
		UpdateFunc: func(_, obj any) { m.Seen(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m.Seen(obj, true)
		},
	}
}

// Excuse counts the checks that client fails apart from the violations,
// from now on: a client broken on purpose. Forgive takes that back.
func (m *Monitor) Excuse(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.excused[name] = true
}

// Forgive ends Excuse for name.
func (m *Monitor) Forgive(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.excused, name)
}

// Seen takes one version of a Secret (deleted: its last state).
func (m *Monitor) Seen(obj any, deleted bool) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.apply(s, deleted, now) {
		m.check(now)
	}
}

// Snapshot takes the namespace's Secrets as one list returned them: the
// state of one moment, checked once it is whole. A gateway or a client
// missing from it was deleted; the gateway version seen last is not seen
// again.
func (m *Monitor) Snapshot(objs []*corev1.Secret) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	m.relists++
	listed, gatewayListed := map[string]bool{}, false
	for _, s := range objs {
		switch {
		case s.Name == m.opts.Gateway:
			gatewayListed = true
			if m.gateway != nil && m.gateway.rv == s.ResourceVersion {
				continue
			}
		case m.opts.IsClient != nil && m.opts.IsClient(s.Labels):
			listed[s.Name] = true
		}
		m.apply(s, false, now)
	}
	if !gatewayListed && m.gateway != nil {
		m.gateway = nil
		m.deleted++
	}
	for name := range m.clients {
		if !listed[name] {
			delete(m.clients, name)
		}
	}
	m.check(now)
}

// apply takes one version of a Secret into the monitor's state; it reports
// whether the gateway's checks are due.
func (m *Monitor) apply(s *corev1.Secret, deleted bool, now time.Time) bool {
	switch {
	case s.Name == m.opts.Root:
		if cs, err := bundle.ParseCertificates(corev1.TLSCertKey, s.Data[corev1.TLSCertKey]); err == nil && !deleted {
			if m.first("root "+bundle.Fingerprint(cs[0]), now) {
				m.roots = append(m.roots, cs[0])
			}
			m.root = cs[0]
		}
		return false
	case s.Name == m.opts.Gateway:
		if deleted {
			m.gateway = nil
			m.deleted++
			return false
		}
		m.gatewaySeen(s, now)
	case m.opts.IsClient != nil && m.opts.IsClient(s.Labels):
		m.clientSeen(s, deleted, now)
	default:
		return false
	}
	return true
}

func (m *Monitor) gatewaySeen(s *corev1.Secret, now time.Time) {
	m.versions++
	a := s.Annotations
	m.history = append(m.history, maps.Clone(a))
	m.first("bundle "+a[bundle.AnnotationRoot], now)
	m.first("phase "+a[bundle.AnnotationPhase]+" "+a[bundle.AnnotationRoot], now)
	m.first("server "+a[bundle.AnnotationServer], now)
	gv := &gatewayVersion{rv: s.ResourceVersion, annotations: a,
		zeroDown: a[bundle.AnnotationStrategy] == bundle.StrategyZeroDowntime,
		verified: map[string]error{}, trusted: map[string]bool{}}
	if gv.zeroDown && m.gateway != nil && !m.gateway.zeroDown {
		m.adopted = a[bundle.AnnotationServer]
	}
	m.gateway = gv
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		m.violate(fmt.Sprintf("gateway %s: tls.crt and tls.key are no usable pair: %v", gv.rv, err))
	} else if gv.chain, err = parseChain(pair); err != nil {
		m.violate(fmt.Sprintf("gateway %s: tls.crt: %v", gv.rv, err))
	}
	if gv.roots, err = bundle.ParseCertificates("ca.crt", s.Data["ca.crt"]); err != nil {
		m.violate(fmt.Sprintf("gateway %s: %v", gv.rv, err))
	}
}

func parseChain(pair tls.Certificate) ([]*x509.Certificate, error) {
	chain := make([]*x509.Certificate, 0, len(pair.Certificate))
	for _, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		chain = append(chain, c)
	}
	return chain, nil
}

func (m *Monitor) clientSeen(s *corev1.Secret, deleted bool, now time.Time) {
	delete(m.clients, s.Name)
	if deleted {
		return
	}
	c := &client{pool: x509.NewCertPool()}
	if cs, err := bundle.ParseCertificates(corev1.TLSCertKey, s.Data[corev1.TLSCertKey]); err == nil {
		c.leaf = cs[0]
	}
	cas, _ := bundle.ParseCertificates("ca.crt", s.Data["ca.crt"])
	fps := make([]string, 0, len(cas))
	for _, ca := range cas {
		c.pool.AddCert(ca)
		fps = append(fps, bundle.Fingerprint(ca))
	}
	slices.Sort(fps)
	c.cas = strings.Join(fps, ",")
	m.clients[s.Name] = c
	if m.root != nil && len(m.clients) >= m.opts.Clients && !slices.ContainsFunc(slices.Collect(maps.Values(m.clients)), func(c *client) bool {
		return c.leaf == nil || !bundle.ChainsTo(c.leaf, m.root)
	}) {
		m.first("clients "+bundle.Fingerprint(m.root), now)
	}
}

// check runs the checks of the gateway's trust against every client, for
// the versions the zero-downtime strategy wrote (the legacy one drops the
// old root by design).
func (m *Monitor) check(now time.Time) {
	gv := m.gateway
	if gv == nil || !gv.zeroDown || gv.roots == nil {
		return
	}
	if gv.chain != nil && !gv.trusts(gv.chain[0]) {
		m.violate("gateway " + gv.rv + ": the server's root is not in ca.crt")
	}
	for _, name := range slices.Sorted(maps.Keys(m.clients)) {
		c := m.clients[name]
		problem := m.problem(gv, c, now)
		race, open := m.open[name]
		switch {
		case problem == nil:
			if open {
				m.closeRace(name, race, now)
			}
		case m.excused[name]:
			m.excusedCount++
		case m.adopted != "" && gv.annotations[bundle.AnnotationServer] == m.adopted && errors.Is(problem, errServerChain):
			// The legacy strategy moved the server before the clients; the
			// adopting version can only keep it until they are re-issued.
			m.inherited++
		case m.unbundled(c):
			if !open {
				m.open[name] = Race{Client: name, Start: now, Open: true}
			}
		default:
			if open {
				m.closeRace(name, race, now)
			}
			m.violate(fmt.Sprintf("gateway %s and client %s: %v", gv.rv, name, problem))
		}
	}
	for name, race := range m.open {
		if _, ok := m.clients[name]; !ok {
			m.closeRace(name, race, now)
		}
	}
}

// problem is why the gateway version and a client do not work together,
// nil when they do.
func (m *Monitor) problem(gv *gatewayVersion, c *client, now time.Time) error {
	if c.leaf != nil && now.Before(c.leaf.NotAfter) && !gv.trusts(c.leaf) {
		return fmt.Errorf("the gateway's ca.crt holds no root of the client's leaf (leaf issued %s by key %s; gateway phase %s, root %s, bundle keys %s; root Secret's key %s)",
			c.leaf.NotBefore.UTC().Format(time.TimeOnly), keyID(c.leaf.AuthorityKeyId), gv.annotations[bundle.AnnotationPhase],
			bundle.Short(gv.annotations[bundle.AnnotationRoot]), bundleKeys(gv.roots), m.rootKey())
	}
	if gv.chain == nil {
		return nil // reported once per version already
	}
	err, ok := gv.verified[c.cas]
	if !ok {
		inter := x509.NewCertPool()
		for _, ic := range gv.chain[1:] {
			inter.AddCert(ic)
		}
		_, err = gv.chain[0].Verify(x509.VerifyOptions{Roots: c.pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: now})
		gv.verified[c.cas] = err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errServerChain, err)
	}
	return nil
}

// errServerChain is a client that cannot verify the gateway's server chain.
var errServerChain = errors.New("the server chain does not verify against the client's ca.crt")

// unbundled says the client's leaf or ca.crt comes from the root Secret's
// current root while the gateway does not record it as current yet.
func (m *Monitor) unbundled(c *client) bool {
	if m.root == nil || m.gateway.annotations[bundle.AnnotationRoot] == bundle.Fingerprint(m.root) {
		return false
	}
	return (c.leaf != nil && bundle.ChainsTo(c.leaf, m.root)) || strings.Contains(c.cas, bundle.Fingerprint(m.root))
}

func (gv *gatewayVersion) trusts(c *x509.Certificate) bool {
	fp := bundle.Fingerprint(c)
	ok, seen := gv.trusted[fp]
	if !seen {
		ok = slices.ContainsFunc(gv.roots, func(r *x509.Certificate) bool { return bundle.ChainsTo(c, r) })
		gv.trusted[fp] = ok
	}
	return ok
}

func (m *Monitor) closeRace(name string, race Race, now time.Time) {
	delete(m.open, name)
	race.Window, race.Open = now.Sub(race.Start), false
	m.raceCount++
	if len(m.races) < maxKept {
		m.races = append(m.races, race)
	}
}

func (m *Monitor) violate(what string) {
	m.violationCount++
	if len(m.violations) < maxKept && !slices.Contains(m.violations, what) {
		m.violations = append(m.violations, what)
	}
}

// first records when k was first seen; it reports whether that is now.
func (m *Monitor) first(k string, now time.Time) bool {
	if _, ok := m.firsts[k]; ok {
		return false
	}
	m.firsts[k] = now
	return true
}

// Roots are the roots the root Secret held, in the order it held them.
func (m *Monitor) Roots() []*x509.Certificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.roots)
}

// Current is the annotations of the gateway version seen last, nil while
// it is deleted.
func (m *Monitor) Current() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gateway == nil {
		return nil
	}
	return maps.Clone(m.gateway.annotations)
}

// Result returns what the monitor found so far.
func (m *Monitor) Result() Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	r := Result{Versions: m.versions, Deletions: m.deleted, Violations: slices.Clone(m.violations),
		ViolationCount: m.violationCount, Excused: m.excusedCount, Inherited: m.inherited,
		Races: slices.Clone(m.races), RaceCount: m.raceCount + len(m.open), Relists: m.relists}
	for _, name := range slices.Sorted(maps.Keys(m.open)) {
		race := m.open[name]
		race.Window = now.Sub(race.Start)
		r.Races = append(r.Races, race)
	}
	return r
}

// History returns the annotations of every gateway version, in order.
func (m *Monitor) History() []map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.history)
}

// FirstGateway returns the annotations of the first gateway version that
// satisfies match, nil if none did.
func (m *Monitor) FirstGateway(match func(map[string]string) bool) map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range m.history {
		if match(a) {
			return a
		}
	}
	return nil
}

// FirstSeen is when the monitor first saw what (zero if never): "root FP"
// (the root Secret held it), "bundle FP" (a gateway version named it
// current), "phase PHASE FP", "server FP", "clients FP" (every client's
// leaf chained to it).
func (m *Monitor) FirstSeen(what string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.firsts[what]
}

// Phases returns how long after the root Secret held root the gateway
// first named it current, moved to Renewing, every client was on it, the
// server switched to it, and the gateway was Steady with it (zero when not
// seen).
func (m *Monitor) Phases(root *x509.Certificate) (bundled, renewing, clients, switched, steady time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	fp := bundle.Fingerprint(root)
	start, ok := m.firsts["root "+fp]
	if !ok {
		return
	}
	since := func(k string) time.Duration {
		if t, ok := m.firsts[k]; ok {
			return t.Sub(start).Round(time.Millisecond)
		}
		return 0
	}
	return since("bundle " + fp), since("phase Renewing " + fp), since("clients " + fp), since("server " + fp), since("phase Steady " + fp)
}

// BundleRegressions lists the gateway versions that name as current a root
// that an earlier version had already moved on from.
func (m *Monitor) BundleRegressions() []string {
	var out []string
	var current string
	seen := map[string]bool{}
	for i, a := range m.History() {
		fp := a[bundle.AnnotationRoot]
		if fp == "" || fp == current {
			continue
		}
		if seen[fp] {
			out = append(out, fmt.Sprintf("version %d: root %s is current again after %s", i+1, bundle.Short(fp), bundle.Short(current)))
		}
		seen[fp], current = true, fp
	}
	return out
}

// keyID is the first bytes of a key identifier, in hex: enough to tell
// the roots of a run apart in a message.
func keyID(id []byte) string {
	if len(id) > 4 {
		id = id[:4]
	}
	return fmt.Sprintf("%x", id)
}

// bundleKeys is the key identifiers of roots, for a message.
func bundleKeys(roots []*x509.Certificate) string {
	ids := make([]string, len(roots))
	for i, r := range roots {
		ids[i] = keyID(r.SubjectKeyId)
	}
	return strings.Join(ids, ",")
}

// rootKey is the key identifier of the root Secret's root as last seen.
func (m *Monitor) rootKey() string {
	if m.root == nil {
		return "none"
	}
	return keyID(m.root.SubjectKeyId)
}
