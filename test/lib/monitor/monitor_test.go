package monitor_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/monitor"
)

const label = "dualca.io/client"

// world makes the Secrets a monitor sees, from test roots of one subject.
type world struct {
	t      *testing.T
	r1, r2 *certs.CA
}

func (w world) root(ca *certs.CA) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "root"},
		Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, "ca.crt": ca.CertPEM}}
}

// client is a client Secret with a leaf issued by leaf and trust as ca.crt.
func (w world) client(name string, leaf, trust *certs.CA) *corev1.Secret {
	l := certs.MustNew(w.t, name, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), certs.Options{}, leaf)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "x"}},
		Data: map[string][]byte{corev1.TLSCertKey: l.CertPEM, "ca.crt": trust.CertPEM}}
}

// gateway is a gateway Secret of strategy recording root as current,
// serving a leaf of server, trusting trusted.
func (w world) gateway(strategy string, root, server *certs.CA, trusted ...*certs.CA) *corev1.Secret {
	leaf := certs.MustNew(w.t, "gateway", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), certs.Options{}, server)
	st := bundle.State{Strategy: strategy, Phase: bundle.PhaseRenewing, Root: bundle.Fingerprint(root.Cert), Server: bundle.Fingerprint(server.Cert)}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gateway", Annotations: st.Annotations()},
		Data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": certs.Bundle(trusted...)}}
}

// with returns s with key set to value in a copy of its data.
func with(s *corev1.Secret, key string, value []byte) *corev1.Secret {
	s = s.DeepCopy()
	s.Data[key] = value
	return s
}

func TestEveryGatewayVersionIsChecked(t *testing.T) {
	t.Parallel()
	w := world{t: t, r1: certs.MustCA(t, "root-ca", time.Hour), r2: certs.MustCA(t, "root-ca", time.Hour)}
	zd, legacy := bundle.StrategyZeroDowntime, bundle.StrategyLegacy
	other := certs.MustCA(t, "other", time.Hour)
	tests := map[string]struct {
		events         []*corev1.Secret
		excuse         string
		wantViolations int
		wantRaces      int
		wantExcused    int
	}{
		"the old root stays trusted while a client still holds a certificate of it": {
			events: []*corev1.Secret{w.root(w.r2), w.client("a1", w.r1, w.r1), w.client("a2", w.r1, w.r1),
				w.gateway(zd, w.r2, w.r1, w.r2, w.r1)},
		},
		"a gateway that dropped the root of a client's certificate": {
			events:         []*corev1.Secret{w.root(w.r2), w.client("a1", w.r1, w.r1), w.gateway(zd, w.r2, w.r2, w.r2)},
			wantViolations: 1,
		},
		"a gateway that does not trust its own server's root": {
			events:         []*corev1.Secret{w.root(w.r2), w.gateway(zd, w.r2, w.r1, w.r2)},
			wantViolations: 1,
		},
		"a server chain that a client's ca.crt cannot verify (no cross-certificate)": {
			events:         []*corev1.Secret{w.root(w.r2), w.client("a1", w.r2, w.r2), w.gateway(zd, w.r2, w.r1, w.r2, w.r1)},
			wantViolations: 1,
		},
		"a tls.key that does not match tls.crt, whatever the strategy": {
			events:         []*corev1.Secret{with(w.gateway(legacy, w.r1, w.r1, w.r1), corev1.TLSPrivateKeyKey, other.KeyPEM)},
			wantViolations: 1,
		},
		"a ca.crt that does not parse": {
			events:         []*corev1.Secret{with(w.gateway(zd, w.r1, w.r1, w.r1), "ca.crt", []byte("garbage"))},
			wantViolations: 1,
		},
		"a client issued from a root dualca has not bundled yet is a race": {
			events:    []*corev1.Secret{w.gateway(zd, w.r1, w.r1, w.r1), w.root(w.r2), w.client("a1", w.r2, w.r2)},
			wantRaces: 1,
		},
		"a client broken on purpose is counted apart": {
			events:      []*corev1.Secret{w.root(w.r2), w.client("doomed", w.r1, w.r1), w.gateway(zd, w.r2, w.r2, w.r2, w.r1)},
			excuse:      "doomed",
			wantExcused: 1,
		},
		"the legacy strategy drops the old root by design: only parsed": {
			events: []*corev1.Secret{w.root(w.r2), w.client("a1", w.r1, w.r1), w.gateway(legacy, w.r2, w.r2, w.r2)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := monitor.New(monitor.Options{Root: "root", Gateway: "gateway", Clients: 2,
				IsClient: func(l map[string]string) bool { return l[label] != "" }})
			if tc.excuse != "" {
				m.Excuse(tc.excuse)
			}
			for _, s := range tc.events {
				m.Seen(s, false)
			}
			r := m.Result()
			if r.Versions != 1 || r.RaceCount != tc.wantRaces || r.ViolationCount != tc.wantViolations || r.Excused != tc.wantExcused {
				t.Errorf("got %d gateway versions, %d races, %d excused, violations %q; want 1, %d races, %d excused, %d violations",
					r.Versions, r.RaceCount, r.Excused, r.Violations, tc.wantRaces, tc.wantExcused, tc.wantViolations)
			}
		})
	}
}

func TestARaceIsTimedUntilTheRootIsBundledAndDeletionsAreCounted(t *testing.T) {
	t.Parallel()
	w := world{t: t, r1: certs.MustCA(t, "root-ca", time.Hour), r2: certs.MustCA(t, "root-ca", time.Hour)}
	zd := bundle.StrategyZeroDowntime
	m := monitor.New(monitor.Options{Root: "root", Gateway: "gateway", Clients: 1,
		IsClient: func(l map[string]string) bool { return l[label] != "" }})
	for _, s := range []*corev1.Secret{w.gateway(zd, w.r1, w.r1, w.r1), w.root(w.r2), w.client("a1", w.r2, w.r2)} {
		m.Seen(s, false)
	}
	if r := m.Result(); r.RaceCount != 1 || !r.Races[0].Open {
		t.Fatalf("got races %+v; want one open", r.Races)
	}
	// Deleted and written again with R2 bundled but no cross-certificate
	// for a1: no longer a race (R2 is current), so a violation.
	gw := w.gateway(zd, w.r2, w.r1, w.r2, w.r1)
	m.Seen(gw, true)
	m.Seen(gw, false)
	r := m.Result()
	if r.Deletions != 1 || r.RaceCount != 1 || r.Races[0].Open || r.Races[0].Window <= 0 {
		t.Errorf("got %d deletions, races %+v; want 1 deletion and one race, closed", r.Deletions, r.Races)
	}
	if r.ViolationCount != 1 {
		t.Errorf("got violations %q; want the server chain a1 cannot verify", r.Violations)
	}
	// Served as it should be (the server on R2), nothing new.
	m.Seen(w.gateway(zd, w.r2, w.r2, w.r2), false)
	if r := m.Result(); r.ViolationCount != 1 || r.RaceCount != 1 {
		t.Errorf("got %d violations, %d races after a good version; want 1 and 1", r.ViolationCount, r.RaceCount)
	}
}

// The legacy strategy switches the server before re-issuing the clients;
// adopting it, the zero-downtime strategy inherits clients that cannot
// verify that server until they are re-issued: counted apart. A server
// that zero-downtime itself moved to is judged in full.
func TestAServerAdoptedFromTheLegacyStrategyIsCountedApart(t *testing.T) {
	t.Parallel()
	w := world{t: t, r1: certs.MustCA(t, "root-ca", time.Hour), r2: certs.MustCA(t, "root-ca", time.Hour)}
	m := monitor.New(monitor.Options{Root: "root", Gateway: "gateway", Clients: 1,
		IsClient: func(l map[string]string) bool { return l[label] != "" }})
	for _, s := range []*corev1.Secret{w.root(w.r2), w.client("a1", w.r1, w.r1),
		w.gateway(bundle.StrategyLegacy, w.r2, w.r2, w.r2), w.gateway(bundle.StrategyZeroDowntime, w.r2, w.r2, w.r2, w.r1)} {
		m.Seen(s, false)
	}
	if r := m.Result(); r.ViolationCount != 0 || r.Inherited != 1 {
		t.Errorf("got %d violations %q, %d inherited; want 0 and 1", r.ViolationCount, r.Violations, r.Inherited)
	}
	m = monitor.New(monitor.Options{Root: "root", Gateway: "gateway", Clients: 1,
		IsClient: func(l map[string]string) bool { return l[label] != "" }})
	for _, s := range []*corev1.Secret{w.root(w.r2), w.client("a1", w.r1, w.r1),
		w.gateway(bundle.StrategyZeroDowntime, w.r1, w.r1, w.r1), w.gateway(bundle.StrategyZeroDowntime, w.r2, w.r2, w.r2, w.r1)} {
		m.Seen(s, false)
	}
	if r := m.Result(); r.ViolationCount != 1 {
		t.Errorf("got %d violations %q; want the server that moved before a1 was re-issued", r.ViolationCount, r.Violations)
	}
}

// A list taken after a watch could not be resumed is one state of the
// namespace, checked whole: clients renewed onto R2 while the watch was
// down are judged against the gateway of that same moment (which bundles
// R2), not the one last seen before it, as an informer's relist, handing
// the objects over one by one in the order of their names, would have
// them judged. Deleted objects leave with the list that lacks them.
func TestAListIsCheckedAsOneState(t *testing.T) {
	t.Parallel()
	w := world{t: t, r1: certs.MustCA(t, "root-ca", time.Hour), r2: certs.MustCA(t, "root-ca", time.Hour)}
	zd := bundle.StrategyZeroDowntime
	before := []*corev1.Secret{w.root(w.r1), w.gateway(zd, w.r1, w.r1, w.r1), w.client("a1", w.r1, w.r1), w.client("a2", w.r1, w.r1)}
	// The namespace after the outage, in the order of names: clients
	// ("a…") before the gateway and the root.
	after := []*corev1.Secret{w.client("a1", w.r2, w.r2), w.gateway(zd, w.r2, w.r2, w.r2, w.r1), w.root(w.r2)}
	newMonitor := func() *monitor.Monitor {
		m := monitor.New(monitor.Options{Root: "root", Gateway: "gateway", Clients: 2,
			IsClient: func(l map[string]string) bool { return l[label] != "" }})
		for _, s := range before {
			s.ResourceVersion = "1"
			m.Seen(s, false)
		}
		return m
	}
	for _, s := range after {
		s.ResourceVersion = "2"
	}

	oneByOne := newMonitor()
	for _, s := range after {
		oneByOne.Seen(s, false)
	}
	if r := oneByOne.Result(); r.ViolationCount == 0 {
		t.Fatalf("handed over one by one, a1's new leaf met the old gateway: want a violation, got none")
	}

	whole := newMonitor()
	whole.Snapshot(after)
	r := whole.Result()
	if r.ViolationCount != 0 || r.RaceCount != 0 || r.Relists != 1 || r.Versions != 2 {
		t.Errorf("got %d violations %q, %d races, %d relists, %d versions; want none, none, 1, 2", r.ViolationCount, r.Violations, r.RaceCount, r.Relists, r.Versions)
	}
	// a2 is gone with the list that lacks it: a gateway that drops R1
	// now serves every client left.
	whole.Seen(w.gateway(zd, w.r2, w.r2, w.r2), false)
	if r := whole.Result(); r.ViolationCount != 0 {
		t.Errorf("got violations %q after a2 left; want none", r.Violations)
	}
}
