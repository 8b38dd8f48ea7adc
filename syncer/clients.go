package syncer

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// Client tracking.
//
// The selected Certificates are cached through their label selector, and
// their Secrets through the label cert-manager puts on every Secret it
// writes, in the client namespaces only; a transform keeps nothing of a
// Secret but tls.crt and ca.crt. Memory therefore grows with the
// certificates cert-manager manages there, never with all Secrets, and no
// client private key is ever held by dualca.

// clientSecretSelector matches the Secrets cert-manager writes for
// Certificates ("for the attention of" its controller), except the
// short-lived ones holding a next private key.
var clientSecretSelector = labels.Set{cmapi.PartOfCertManagerControllerLabelKey: "true"}.AsSelector().
	Add(mustRequirement(cmapi.IsNextPrivateKeySecretLabelKey, selection.DoesNotExist))

func mustRequirement(key string, op selection.Operator) labels.Requirement {
	r, err := labels.NewRequirement(key, op, nil)
	if err != nil {
		panic(err) // constant input
	}
	return *r
}

// clientCacheOptions say what the cache of the selected Certificates and of
// the client Secrets holds: those in the client namespaces, by label, and
// of the Secrets only their certificates.
func clientCacheOptions(o Options) cache.Options {
	namespaces := map[string]cache.Config{}
	for _, ns := range o.ClientNamespaces {
		namespaces[ns] = cache.Config{}
	}
	return cache.Options{
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&cmapi.Certificate{}: {Label: o.ClientSelector},
			&corev1.Secret{}:     {Label: clientSecretSelector, Transform: publicPartsOnly},
		},
	}
}

// publicPartsOnly drops everything of a client Secret but its certificates.
func publicPartsOnly(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	for k := range s.Data {
		if k != corev1.TLSCertKey && k != caKey {
			delete(s.Data, k)
		}
	}
	s.StringData = nil
	return s, nil
}

// clientView is one selected client as the reconciler saw it.
type clientView struct {
	cert     *cmapi.Certificate
	secret   *corev1.Secret // nil when missing
	inFlight bool           // cert-manager is issuing it now
	// problem says why the client's Secret cannot be used; "" when it can.
	problem string
}

// clientTracker reads the selected clients from the cache and remembers the
// certificates it parsed, by Secret content, so a reconcile over thousands
// of clients parses only what changed.
type clientTracker struct {
	reader     client.Reader
	selector   labels.Selector
	namespaces []string
	// events, when set, is told of every change of the client cache (the
	// controller's client event handlers call changed), and a read that
	// no change preceded returns the last read's result instead of listing
	// every client again: the reconciles that the root, the gateway or the
	// poll start cost nothing per client then. The cache's store takes a
	// change before its handlers hear of it, and each handler calls
	// changed before it queues the reconcile that follows, so that
	// reconcile lists afresh. Unset (dualca status reads once), every read
	// lists.
	events *atomic.Uint64
	last   *clientRead

	mu     sync.Mutex
	parsed map[types.UID]parsedSecret
}

// clientRead is a read's result, with the count of events it followed.
type clientRead struct {
	events  uint64
	clients bundle.Clients
	views   map[string]clientView
}

// watched returns a tracker told of the cache's changes (see events).
func (t *clientTracker) watched() *clientTracker {
	t.events = new(atomic.Uint64)
	return t
}

// changed says the client cache changed: the next read lists again.
func (t *clientTracker) changed() {
	if t.events != nil {
		t.events.Add(1)
	}
}

type parsedSecret struct {
	// rv and sum are the Secret's resourceVersion and content hash when
	// it was parsed: an unchanged resourceVersion spares hashing it.
	rv      string
	sum     [sha256.Size]byte
	leaf    *x509.Certificate
	ca      []*x509.Certificate
	problem string
}

// read returns what the decision needs to know of the selected clients, and
// the objects behind them by name (NAMESPACE/NAME of the Certificate). What
// it returns is shared with later reads: nothing may modify it.
func (t *clientTracker) read(ctx context.Context) (bundle.Clients, map[string]clientView, error) {
	if t.events == nil {
		return t.list(ctx)
	}
	events := t.events.Load()
	if t.last != nil && t.last.events == events {
		return t.last.clients, t.last.views, nil
	}
	clients, views, err := t.list(ctx)
	if err != nil {
		return clients, views, err
	}
	t.last = &clientRead{events: events, clients: clients, views: views}
	return clients, views, nil
}

// list reads the selected clients from the reader.
func (t *clientTracker) list(ctx context.Context) (bundle.Clients, map[string]clientView, error) {
	out := bundle.Clients{Tracked: true}
	views := map[string]clientView{}
	seen := map[types.UID]bool{}
	for _, ns := range t.namespaces {
		// Both lists come straight from the cache, without the deep copy of
		// every object: this runs at every client event of a fan-out over
		// thousands of clients, and nothing here modifies what it reads.
		var list cmapi.CertificateList
		if err := t.reader.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: t.selector},
			client.UnsafeDisableDeepCopy); err != nil {
			return out, nil, fmt.Errorf("listing client certificates in %s: %w", ns, err)
		}
		var secrets corev1.SecretList
		if err := t.reader.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: clientSecretSelector},
			client.UnsafeDisableDeepCopy); err != nil {
			return out, nil, fmt.Errorf("listing client secrets in %s: %w", ns, err)
		}
		byName := make(map[string]*corev1.Secret, len(secrets.Items))
		for i := range secrets.Items {
			byName[secrets.Items[i].Name] = &secrets.Items[i]
		}
		for i := range list.Items {
			crt := &list.Items[i]
			name := crt.Namespace + "/" + crt.Name
			v := clientView{cert: crt, inFlight: issuing(crt)}
			c := bundle.Client{Name: name, Failed: failed(crt)}
			if s, ok := byName[crt.Spec.SecretName]; ok {
				v.secret = s
				seen[s.UID] = true
				if v.problem = foreign(crt, s); v.problem == "" {
					p := t.parse(s)
					c.Leaf, c.CA, v.problem = p.leaf, p.ca, p.problem
				}
			}
			views[name] = v
			out.Items = append(out.Items, c)
		}
	}
	t.mu.Lock()
	for uid := range t.parsed {
		if !seen[uid] {
			delete(t.parsed, uid)
		}
	}
	t.mu.Unlock()
	return out, views, nil
}

// foreign says why s, found under crt's secretName, is not crt's to use:
// a Secret of another type, or one cert-manager wrote for another
// Certificate. Its content then says nothing about crt's client.
func foreign(crt *cmapi.Certificate, s *corev1.Secret) string {
	if s.Type != corev1.SecretTypeTLS {
		return fmt.Sprintf("secret %s has type %q, want %q", s.Name, s.Type, corev1.SecretTypeTLS)
	}
	if owner, ok := s.Annotations[cmapi.CertificateNameKey]; ok && owner != crt.Name {
		return fmt.Sprintf("secret %s was issued for Certificate %q", s.Name, owner)
	}
	return ""
}

// parse reads a client Secret's leaf and ca.crt. Damaged data reads as no
// leaf or no CA: such a client is simply not on any root.
func (t *clientTracker) parse(s *corev1.Secret) parsedSecret {
	t.mu.Lock()
	p, ok := t.parsed[s.UID]
	t.mu.Unlock()
	if ok && s.ResourceVersion != "" && p.rv == s.ResourceVersion {
		return p
	}
	h := sha256.New()
	h.Write(s.Data[corev1.TLSCertKey])
	h.Write([]byte{0})
	h.Write(s.Data[caKey])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.parsed[s.UID]; ok && p.sum == sum {
		p.rv = s.ResourceVersion
		t.parsed[s.UID] = p
		return p
	}
	p = parsedSecret{rv: s.ResourceVersion, sum: sum}
	p.leaf, p.ca, p.problem = bundle.ParseClient(s.Data[corev1.TLSCertKey], s.Data[caKey])
	if t.parsed == nil {
		t.parsed = map[types.UID]parsedSecret{}
	}
	t.parsed[s.UID] = p
	return p
}

// failed reports whether cert-manager's last attempt to issue crt failed
// and no new attempt is under way.
func failed(crt *cmapi.Certificate) bool {
	return crt.Status.LastFailureTime != nil && !issuing(crt)
}

// Certificate conditions. cert-manager's pkg/api/util has these helpers but
// importing it pulls in its whole logging stack (component-base, cobra,
// OpenTelemetry), so the two that dualca needs are written here.

// condition returns crt's condition of type typ, or nil.
func condition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i := range crt.Status.Conditions {
		if crt.Status.Conditions[i].Type == typ {
			return &crt.Status.Conditions[i]
		}
	}
	return nil
}

// issuing reports whether cert-manager is issuing crt now.
func issuing(crt *cmapi.Certificate) bool {
	c := condition(crt, cmapi.CertificateConditionIssuing)
	return c != nil && c.Status == cmmeta.ConditionTrue
}

// setIssuing sets the Issuing condition to True with reason, as cmctl renew
// does; the transition time is now, by dualca's clock.
func setIssuing(crt *cmapi.Certificate, reason, message string, now time.Time) {
	c := cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: reason, Message: message, ObservedGeneration: crt.Generation, LastTransitionTime: &metav1.Time{Time: now}}
	if old := condition(crt, cmapi.CertificateConditionIssuing); old != nil {
		*old = c
		return
	}
	crt.Status.Conditions = append(crt.Status.Conditions, c)
}
