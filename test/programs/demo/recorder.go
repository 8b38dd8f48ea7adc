package main

import (
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/monitor"
)

// moment names what the recorder times in a rotation, each the first time
// it was seen for a root.
type moment string

const (
	keyRoot        moment = "the root Secret holds it"
	keyTrusted     moment = "the gateway trusts it"
	keyRenewing    moment = "phase Renewing"
	keyFirstClient moment = "a client holds a certificate of it"
	keyAllClients  moment = "every client holds a certificate of it"
	keyServer      moment = "the server presents it"
	keySteady      moment = "the gateway trusts it alone"
)

// recorder follows every Secret of the demo namespace through one informer,
// so it sees their versions in the order the API server wrote them. It
// names the roots R1, R2, … in the order the root Secret held them, times
// when each rotation reached each moment, and has a monitor (package
// monitor) check every version of the gateway Secret.
type recorder struct {
	mu       sync.Mutex
	expected int // client Secrets

	order   []*x509.Certificate            // roots as the root Secret held them, oldest first
	names   map[string]string              // fingerprint → "R1"
	root    *x509.Certificate              // the root Secret's root now
	clients map[string]bundle.Client       // client Secret name → its leaf and ca.crt
	gwState bundle.State                   // the gateway Secret's annotations
	gwRoots []*x509.Certificate            // its ca.crt
	gwLeaf  *x509.Certificate              // the certificate its tls.crt presents
	firsts  map[string]time.Time           // moment+fingerprint → first seen
	bundles map[string][]*x509.Certificate // fingerprint → ca.crt when the gateway first trusted it
	largest []*x509.Certificate            // the largest ca.crt seen

	// mon checks every gateway version against the clients (package
	// monitor): it sees the same events.
	mon *monitor.Monitor
}

func newRecorder(expected int) *recorder {
	return &recorder{
		expected: expected,
		names:    map[string]string{},
		clients:  map[string]bundle.Client{},
		firsts:   map[string]time.Time{},
		bundles:  map[string][]*x509.Certificate{},
		mon: monitor.New(monitor.Options{Root: rootName, Gateway: gatewayName, Clients: expected,
			IsClient: func(l map[string]string) bool { return l[clientLabel] == clientLabelValue }}),
	}
}

// handler feeds the recorder from a Secret informer.
func (r *recorder) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.seen(obj, false) },
		UpdateFunc: func(_, obj any) { r.seen(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			r.seen(obj, true)
		},
	}
}

func (r *recorder) seen(obj any, deleted bool) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	r.mon.Seen(s, deleted)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	switch {
	case s.Name == rootName:
		if c := firstCert(s, corev1.TLSCertKey); c != nil && !deleted {
			fp := bundle.Fingerprint(c)
			if _, ok := r.names[fp]; !ok {
				r.order = append(r.order, c)
				r.names[fp] = fmt.Sprintf("R%d", len(r.order))
			}
			r.root = c
			r.first(keyRoot, fp, now)
		}
	case s.Name == gatewayName:
		if deleted {
			r.gwState, r.gwRoots, r.gwLeaf = bundle.State{}, nil, nil
			return
		}
		r.gwState = bundle.ParseState(s.Annotations)
		r.gwRoots, _ = bundle.ParseCertificates("ca.crt", s.Data["ca.crt"])
		r.gwLeaf = firstCert(s, corev1.TLSCertKey)
		if len(r.gwRoots) > len(r.largest) {
			r.largest = r.gwRoots
		}
		for _, c := range r.gwRoots {
			fp := bundle.Fingerprint(c)
			if r.first(keyTrusted, fp, now) {
				r.bundles[fp] = r.gwRoots
			}
		}
		if r.gwState.Phase == bundle.PhaseRenewing {
			r.first(keyRenewing, r.gwState.Root, now)
		}
		r.first(keyServer, r.gwState.Server, now)
	case s.Labels[clientLabel] == clientLabelValue:
		delete(r.clients, s.Name)
		if !deleted {
			ca, _ := bundle.ParseCertificates("ca.crt", s.Data["ca.crt"])
			r.clients[s.Name] = bundle.Client{Name: s.Name, Leaf: bundle.NewClientLeaf(firstCert(s, corev1.TLSCertKey), ca), CA: ca}
		}
	default:
		return
	}
	if r.root != nil {
		fp := bundle.Fingerprint(r.root)
		switch on := r.onLocked(r.root, now); {
		case on == r.expected:
			r.first(keyFirstClient, fp, now)
			r.first(keyAllClients, fp, now)
			if len(r.gwRoots) == 1 && bundle.Fingerprint(r.gwRoots[0]) == fp && r.gwState.Server == fp &&
				(r.gwState.Strategy == bundle.StrategyLegacy || r.gwState.Phase == bundle.PhaseSteady) {
				r.first(keySteady, fp, now)
			}
		case on > 0:
			r.first(keyFirstClient, fp, now)
		}
	}
}

// first records moment m for root fp at now unless seen before; it reports
// whether this was the first time.
func (r *recorder) first(m moment, fp string, now time.Time) bool {
	if fp == "" {
		return false
	}
	k := string(m) + " " + fp
	if _, ok := r.firsts[k]; ok {
		return false
	}
	r.firsts[k] = now
	return true
}

func (r *recorder) onLocked(root *x509.Certificate, now time.Time) int {
	n := 0
	for _, c := range r.clients {
		if c.On(root, now) {
			n++
		}
	}
	return n
}

// currentRoot is the fingerprint of the root the root Secret holds now.
func (r *recorder) currentRoot() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bundle.Fingerprint(r.root)
}

// roots counts the roots the root Secret has held.
func (r *recorder) roots() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// clientsOn counts the clients on root fp: certificate issued by it, and it
// in their ca.crt.
func (r *recorder) clientsOn(fp string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, root := range r.order {
		if bundle.Fingerprint(root) == fp {
			return r.onLocked(root, time.Now())
		}
	}
	return 0
}

// gatewayState is what the gateway Secret's annotations say, and the
// fingerprints of its ca.crt in order.
func (r *recorder) gatewayState() (bundle.State, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gwState, fingerprints(r.gwRoots)
}

// firstSeen is when moment m was first seen for root fp; zero if never.
func (r *recorder) firstSeen(m moment, fp string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.firsts[string(m)+" "+fp]
}

// bundleWhenTrusted is the gateway's ca.crt (fingerprints) when it first
// trusted root fp.
func (r *recorder) bundleWhenTrusted(fp string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fingerprints(r.bundles[fp])
}

// largestBundle is the largest ca.crt the gateway was given (fingerprints).
func (r *recorder) largestBundle() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fingerprints(r.largest)
}

// result is what the monitor found (see package monitor).
func (r *recorder) result() monitor.Result { return r.mon.Result() }

// label names a root for people: "R2", or a fingerprint prefix for a root
// the root Secret never held, "-" for none.
func (r *recorder) label(fp string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.labelLocked(fp)
}

func (r *recorder) labelLocked(fp string) string {
	if fp == "" {
		return "-"
	}
	if l, ok := r.names[fp]; ok {
		return l
	}
	// The status report gives fingerprint prefixes.
	for full, l := range r.names {
		if strings.HasPrefix(full, fp) {
			return l
		}
	}
	return bundle.Short(fp)
}

// labels names roots in order: "R3 R2 R1".
func (r *recorder) labels(fps []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(fps))
	for i, fp := range fps {
		out[i] = r.labelLocked(fp)
	}
	return strings.Join(out, " ")
}

// describe names root fp with what identifies it: label, fingerprint
// prefix, subject and expiry. Never its bytes.
func (r *recorder) describe(fp string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.order {
		if bundle.Fingerprint(c) == fp {
			return fmt.Sprintf("%s: SHA-256 %s…, %s, not after %s", r.names[fp], bundle.Short(fp), c.Subject, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return r.labelLocked(fp)
}

// legend lists the roots seen: "R1 77c1e0a2b3c4".
func (r *recorder) legend() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.order))
	for i, c := range r.order {
		fp := bundle.Fingerprint(c)
		out[i] = r.names[fp] + " " + bundle.Short(fp)
	}
	return out
}

// firstCert parses the first certificate of a Secret's key; nil if none.
func firstCert(s *corev1.Secret, key string) *x509.Certificate {
	cs, err := bundle.ParseCertificates(key, s.Data[key])
	if err != nil || len(cs) == 0 {
		return nil
	}
	return cs[0]
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}
