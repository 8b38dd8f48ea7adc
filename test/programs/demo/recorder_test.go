package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// world is the Secrets a recorder sees, built from test roots.
type world struct {
	t      *testing.T
	r1, r2 *certs.CA
}

func newWorld(t *testing.T) world {
	return world{t: t, r1: certs.MustCA(t, "root-ca", time.Hour), r2: certs.MustCA(t, "root-ca", time.Hour)}
}

func (w world) root(ca *certs.CA) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: rootName},
		Data: map[string][]byte{corev1.TLSCertKey: ca.CertPEM, "ca.crt": ca.CertPEM}}
}

// client is a client Secret with a leaf issued by ca and ca as its ca.crt.
func (w world) client(name string, ca *certs.CA) *corev1.Secret {
	leaf := certs.MustNew(w.t, name, time.Now().Add(-time.Minute), time.Now().Add(time.Hour), certs.Options{}, ca)
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{clientLabel: clientLabelValue}},
		Data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, "ca.crt": ca.CertPEM}}
}

// gateway is a gateway Secret of strategy that serves a leaf of server,
// trusts bundle and records root as the current root.
func (w world) gateway(strategy string, phase bundle.Phase, root, server *certs.CA, trusted ...*certs.CA) *corev1.Secret {
	leaf := certs.MustNew(w.t, "gateway", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), certs.Options{}, server)
	st := bundle.State{Strategy: strategy, Phase: phase, Root: bundle.Fingerprint(root.Cert), Server: bundle.Fingerprint(server.Cert)}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: gatewayName, Annotations: st.Annotations()},
		Data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": certs.Bundle(trusted...)}}
}

// The checks themselves are package monitor's (and tested there); the
// recorder hands it every event it sees.
func TestRecorderHasEveryGatewayVersionChecked(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := newRecorder(1)
	for _, s := range []*corev1.Secret{w.root(w.r2), w.client("agent-1", w.r1),
		w.gateway(bundle.StrategyZeroDowntime, bundle.PhaseSteady, w.r2, w.r2, w.r2)} {
		r.seen(s, false)
	}
	if got := r.result(); got.Versions != 1 || got.ViolationCount == 0 {
		t.Errorf("got %d gateway versions and %d violations (%q); want 1 and the dropped root of agent-1", got.Versions, got.ViolationCount, got.Violations)
	}
}

func TestRecorderTimesARotation(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := newRecorder(2)
	fp1, fp2 := bundle.Fingerprint(w.r1.Cert), bundle.Fingerprint(w.r2.Cert)
	zd := bundle.StrategyZeroDowntime
	for _, s := range []*corev1.Secret{
		w.root(w.r1), w.client("agent-1", w.r1), w.client("agent-2", w.r1), w.gateway(zd, bundle.PhaseSteady, w.r1, w.r1, w.r1),
		w.root(w.r2), w.gateway(zd, bundle.PhaseBundle, w.r2, w.r1, w.r2, w.r1),
		w.gateway(zd, bundle.PhaseRenewing, w.r2, w.r1, w.r2, w.r1), w.client("agent-1", w.r2),
	} {
		r.seen(s, false)
	}
	if got := r.label(fp2); got != "R2" {
		t.Errorf("the second root the root Secret held is %q, want R2", got)
	}
	if got := r.label(bundle.Short(fp1)); got != "R1" {
		t.Errorf("a fingerprint prefix names R1 too, got %q", got)
	}
	if got := r.labels(r.bundleWhenTrusted(fp2)); got != "R2 R1" {
		t.Errorf("ca.crt when the gateway first trusted R2: %q, want R2 R1", got)
	}
	for _, m := range []moment{keyRoot, keyTrusted, keyRenewing, keyFirstClient} {
		if r.firstSeen(m, fp2).IsZero() {
			t.Errorf("%s: not seen for R2", m)
		}
	}
	if !r.firstSeen(keyAllClients, fp2).IsZero() {
		t.Errorf("one client of two is not every client")
	}
	if got := r.clientsOn(fp2); got != 1 {
		t.Errorf("clients on R2: %d, want 1", got)
	}

	r.seen(w.client("agent-2", w.r2), false)
	if r.firstSeen(keyAllClients, fp2).IsZero() {
		t.Errorf("both clients on R2 is every client")
	}
	if !r.firstSeen(keySteady, fp2).IsZero() {
		t.Errorf("Steady while the gateway still serves R1 and trusts R1")
	}
	r.seen(w.gateway(zd, bundle.PhaseSteady, w.r2, w.r2, w.r2), false)
	if r.firstSeen(keyServer, fp2).IsZero() || r.firstSeen(keySteady, fp2).IsZero() {
		t.Errorf("the server on R2 and R2 alone trusted is Steady")
	}
	if got := r.labels(r.largestBundle()); got != "R2 R1" {
		t.Errorf("largest bundle %q, want R2 R1", got)
	}
}
