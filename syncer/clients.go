package syncer

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// Client tracking.
//
// dualca reads no Secret in a client namespace. What a client loads is its
// Secret, but cert-manager writes that Secret's tls.crt and ca.crt from the
// status of the CertificateRequest it issued (status.certificate,
// status.ca), and only then sets the Certificate's status.revision to that
// request's revision. So the request of the Certificate's current revision
// tells the same public certificates, and the Role that lets dualca read it
// gives no access to any Secret: a client namespace (by default the
// gateway's own) can hold Secrets dualca has no business reading, and RBAC
// cannot restrict a list of Secrets to those cert-manager wrote.
//
// With a Certificate label selector (--client-selector), the Certificates
// are cached through it, and their CertificateRequests through the same
// selector (cert-manager copies a Certificate's labels onto each request
// it creates), in the client namespaces only. Selected by their Secret's
// labels or their issuer alone (selection.go), the Certificates carry no
// label to filter by on the API server, and their requests none of the
// Secret template's: both caches then hold every Certificate and request
// of the client namespaces, and the tracker joins the requests to the
// Certificates it selects by the UID of their controller. A transform
// keeps nothing of a request but what identifies it and its status.ca
// (one copy per distinct value): the CSR, a kilobyte or more, is dropped,
// what the request claims (controller, revision, Certificate's name) and
// its status.certificate are read as it enters the cache, the certificate
// into a leaf of about 130 bytes once verified (requestLeaves,
// bundle.ClientLeaf), and dropped from it; selecting by issuer, a request naming
// another issuer keeps no certificate at all, nor does one that claims no
// Certificate's revision. Memory therefore grows with the selected clients
// when a label selects them, and with the client namespaces' Certificates
// and requests otherwise: a few hundred bytes per request, and of each
// Certificate what selects it and its status.
//
// A request is the client's only when it claims the Certificate by name
// and revision and the Certificate controls it (owner reference by UID):
// anyone who may create requests in the namespace can copy the
// annotations, so two claimants make the client unknown, with a
// ClientInvalid event. cert-manager deletes the request of the current
// revision once the next one exists (revisionHistoryLimit, default 1), so
// the tracker remembers the credential it last saw of each Certificate by
// revision; a client whose current request it neither sees nor remembers
// (after a restart during its renewal) is unknown (bundle.Client.Unknown):
// it may use any root, and keeps them all.

// clientCacheOptions say what the cache of the Certificates and of their
// CertificateRequests holds: those in the client namespaces, by the
// Certificates' label selector when there is one, and of the requests only
// their public certificates.
//
// With leaves, a request's status.certificate is read into leaves as it
// enters the cache and the cached request keeps none of it (see
// requestLeaves); nil, it keeps the PEM.
func clientCacheOptions(o Options, leaves *requestLeaves) cache.Options {
	namespaces := map[string]cache.Config{}
	for _, ns := range o.ClientNamespaces {
		namespaces[ns] = cache.Config{}
	}
	sel := o.Clients()
	shared := newSharing()
	transform := requestCertificatesOnly(shared, leaves)
	if sel.Issuer != nil {
		transform = requestOfIssuerOnly(*sel.Issuer, shared, transform)
	}
	return cache.Options{
		DefaultNamespaces: namespaces,
		DefaultTransform:  cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&cmapi.Certificate{}:        {Label: sel.Labels, Transform: certificateWhatSelectsOnly(sel, shared)},
			&cmapi.CertificateRequest{}: {Label: sel.Labels, Transform: transform},
		},
	}
}

// certificateWhatSelectsOnly keeps of a Certificate what dualca reads of
// it: what identifies it, what the selection looks at (only the labels the
// selectors name), its Secret's name, and its whole status. The spec's
// names, usages and key settings, the annotations and owners are of no use
// to dualca, and at tens of thousands of clients they were a fifth of its
// memory. The status stays whole: a renewal's first attempt updates the
// status from the cached Certificate (zeroDowntime.Renew), and an update
// of the status subresource writes the status as given, but takes nothing
// else of it (spec and metadata come from the stored object).
//
// What thousands of Certificates hold alike (the labels kept, the
// namespace, the issuer, the conditions' words) they hold as one value
// (shared).
func certificateWhatSelectsOnly(sel ClientSelection, shared *sharing) func(any) (any, error) {
	return func(obj any) (any, error) {
		crt, ok := obj.(*cmapi.Certificate)
		if !ok {
			return obj, nil
		}
		crt.ObjectMeta = metav1.ObjectMeta{Name: crt.Name, Namespace: shared.string(crt.Namespace), UID: crt.UID,
			ResourceVersion: crt.ResourceVersion, Generation: crt.Generation,
			Labels: shared.labels(labelsNamed(sel.Labels, crt.Labels))}
		spec := cmapi.CertificateSpec{SecretName: crt.Spec.SecretName, IssuerRef: shared.issuer(crt.Spec.IssuerRef)}
		if t := crt.Spec.SecretTemplate; t != nil && sel.SecretLabels != nil {
			spec.SecretTemplate = &cmapi.CertificateSecretTemplate{Labels: shared.labels(labelsNamed(sel.SecretLabels, t.Labels))}
		}
		crt.Spec = spec
		for i := range crt.Status.Conditions {
			c := &crt.Status.Conditions[i]
			c.Type = cmapi.CertificateConditionType(shared.string(string(c.Type)))
			c.Status = cmmeta.ConditionStatus(shared.string(string(c.Status)))
			c.Reason, c.Message = shared.string(c.Reason), shared.string(c.Message)
		}
		return crt, nil
	}
}

// labelsNamed returns the labels of set that selector names: all a
// selection reads of them; nil without a selector.
func labelsNamed(selector labels.Selector, set map[string]string) map[string]string {
	if selector == nil || len(set) == 0 {
		return nil
	}
	requirements, _ := selector.Requirements()
	kept := map[string]string{}
	for _, r := range requirements {
		if v, ok := set[r.Key()]; ok {
			kept[r.Key()] = v
		}
	}
	return kept
}

// requestOfIssuerOnly is requestCertificatesOnly that also drops the
// certificates of a request not naming issuer: cert-manager copies the
// Certificate's issuerRef into each request, so such a request is not of
// a selected client's current revision, unless its Certificate moved to
// the issuer since; that client then counts as unknown (fail-safe) until
// its request of the issuer exists, which cert-manager makes at once (a
// Secret issued by another issuer is re-issued). What identifies the
// request is kept: it still counts as a claimant of its revision. So is
// its issuerRef: client-go may transform an object twice (the initial
// streaming list transforms what it holds, then the informer's queue
// again), and a second pass must decide as the first did.
func requestOfIssuerOnly(issuer IssuerRef, shared *sharing, certificatesOnly func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		cr, ok := obj.(*cmapi.CertificateRequest)
		if !ok {
			return obj, nil
		}
		ref := cr.Spec.IssuerRef
		if !issuer.names(cr.Namespace, ref) {
			cr.Status = cmapi.CertificateRequestStatus{} // before any is read
		}
		out, err := certificatesOnly(cr)
		cr.Spec.IssuerRef = shared.issuer(ref)
		return out, err
	}
}

// requestCertificatesOnly drops everything of a CertificateRequest but
// what tells whose it is and its certificates: the CSR, the labels, the
// copied annotations and the conditions are of no use to dualca. The requests of
// one root carry the same status.ca, which cas keeps one copy of. With
// leaves, what the request claims (its controller, revision and
// Certificate's name) and its status.certificate are read into leaves and
// dropped from it; a request that claims no revision of a Certificate (no
// controller, no revision) is no client's, and nothing of it is read.
func requestCertificatesOnly(shared *sharing, leaves *requestLeaves) func(any) (any, error) {
	return func(obj any) (any, error) {
		cr, ok := obj.(*cmapi.CertificateRequest)
		if !ok {
			return obj, nil
		}
		// Selected by label, the requests are chosen by the API server,
		// and nothing here reads a request's labels (a Helm release's
		// labels, copied from the Certificate, were a map of half a
		// kilobyte per request).
		cr.ManagedFields, cr.Labels = nil, nil
		cr.Namespace = shared.string(cr.Namespace)
		if leaves != nil {
			// A second pass (see requestOfIssuerOnly) finds nothing to
			// read, and leaves what the first read.
			if k, ok := claimOfRequest(cr); ok {
				leaves.read(cr, k)
			}
			cr.Annotations, cr.OwnerReferences, cr.Status.Certificate = nil, nil, nil
		} else {
			annotations := map[string]string{}
			for _, k := range []string{cmapi.CertificateNameKey, cmapi.CertificateRequestRevisionAnnotationKey} {
				if v, ok := cr.Annotations[k]; ok {
					annotations[k] = v
				}
			}
			cr.Annotations = annotations
		}
		cr.Spec = cmapi.CertificateRequestSpec{}
		cr.Status = cmapi.CertificateRequestStatus{Certificate: cr.Status.Certificate, CA: shared.cas.share(cr.Status.CA)}
		for i := range cr.OwnerReferences {
			ref := &cr.OwnerReferences[i]
			ref.APIVersion, ref.Kind = shared.string(ref.APIVersion), shared.string(ref.Kind)
		}
		return cr, nil
	}
}

// sharedBytes hands out one copy of each value it is given, so that the
// thousands of objects in a cache that hold the same bytes hold one array.
// What it hands out is shared: nothing may modify it (the cache's readers
// copy what they return, or promise not to modify it). It holds at most
// maxShared values; past that it starts again empty, so that a writer of
// many distinct values cannot make it grow (those values are simply not
// shared).
type sharedBytes struct {
	mu     sync.Mutex
	values map[string][]byte
}

// maxShared bounds the values a sharedBytes holds: the distinct ca.crt of
// the clients, one or two per root rotation. Longer than maxSharedBytes
// (a ca.crt of some eighty roots), a value is not shared: what it holds it
// may hold after the objects let go of it, and a writer of long values
// must not make that large.
const (
	maxShared      = 64
	maxSharedBytes = 64 << 10
)

func (s *sharedBytes) share(b []byte) []byte {
	if len(b) == 0 || len(b) > maxSharedBytes {
		return b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if v, ok := s.values[string(b)]; ok {
		return v
	}
	if s.values == nil || len(s.values) >= maxShared {
		s.values = map[string][]byte{}
	}
	s.values[string(b)] = b
	return b
}

// sharing is what the client cache's transforms share among the objects
// they keep: the requests' status.ca, and the strings and label sets that
// thousands of objects hold alike. What it hands out is shared like
// sharedBytes's, and bounded like it: a writer of many distinct values
// makes it start again empty, and those values are simply not shared.
type sharing struct {
	cas     sharedBytes
	strings sharedValues[string]
	sets    sharedValues[map[string]string]
}

// maxSharedValues bounds the strings and label sets a sharing holds: the
// namespaces, issuers, conditions' words and label values of the clients
// are a few dozen. Longer than maxSharedLen, a value is not shared: what
// it holds, it may hold after the objects let go of it, and a writer of
// long values must not make that large.
const (
	maxSharedValues = 1024
	maxSharedLen    = 256
)

func newSharing() *sharing {
	return &sharing{strings: sharedValues[string]{limit: maxSharedValues}, sets: sharedValues[map[string]string]{limit: maxSharedValues}}
}

func (s *sharing) string(v string) string {
	if v == "" || len(v) > maxSharedLen {
		return v
	}
	return s.strings.share(v, v)
}

// labels shares a label set that nothing modifies (the cache's readers
// copy what they return); nil stays nil.
func (s *sharing) labels(set map[string]string) map[string]string {
	if set == nil {
		return nil
	}
	keys := slices.Sorted(maps.Keys(set))
	var key strings.Builder
	for _, k := range keys {
		key.WriteString(k)
		key.WriteByte(0)
		key.WriteString(set[k])
		key.WriteByte(0)
	}
	if key.Len() > maxSharedLen {
		return set
	}
	return s.sets.share(key.String(), set)
}

func (s *sharing) issuer(ref cmmeta.IssuerReference) cmmeta.IssuerReference {
	return cmmeta.IssuerReference{Name: s.string(ref.Name), Kind: s.string(ref.Kind), Group: s.string(ref.Group)}
}

// sharedValues hands out one value for each key it is given, the first
// given with it, holding at most limit of them.
type sharedValues[V any] struct {
	mu     sync.Mutex
	limit  int
	values map[string]V
}

func (s *sharedValues[V]) share(key string, v V) V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if kept, ok := s.values[key]; ok {
		return kept
	}
	if s.values == nil || len(s.values) >= s.limit {
		s.values = map[string]V{}
	}
	s.values[key] = v
	return v
}

// requestLeaves holds what the client cache's transform read of each
// CertificateRequest, by the request's UID: what it claims (the revision
// of the Certificate that controls it, and that Certificate's name), so
// that the cached request keeps neither annotations nor owners (two
// small maps and slices, half a kilobyte), and its status.certificate,
// so that it keeps no PEM (a kilobyte or more per client, the certificate
// and its base64): the leaf as bundle.ReadClientLeaf reads it, its
// signature still to check, and what is wrong with it. The tracker
// checks the signature against the request's status.ca when the request
// is a client's current one, and keeps the verified leaf here in place of
// the one read, which lets its signed bytes go; an entry is the request's
// only while its resourceVersion is the one read.
//
// A writer of requests in a client namespace gains nothing by it: a
// request that claims no Certificate's revision is not read at all; a
// claimant is read once per content (a new resourceVersion of the same
// bytes is not read again), as the tracker read the claimant of a
// selected client's revision at each change before; what is kept of it is
// less than the PEM the cache kept (one leaf, none of tls.crt's chain, no
// bytes of one that does not read, and an oversized one is refused by
// ParseCertificates unread); and an entry leaves with its request (the
// tracker forgets it at the delete event) or, should a delete be missed
// (a request deleted while the watch was re-listing), at a sweep once
// unseen in the cache for maxLeafAge.
type requestLeaves struct {
	mu    sync.Mutex
	byUID map[types.UID]*requestLeaf
}

// requestLeaf is what a request claims and its status.certificate, as
// read at resourceVersion rv.
type requestLeaf struct {
	rv    string
	claim claimKey
	name  string // of the Certificate it names
	// issued: it carried a certificate, read into sum, leaf and problem.
	issued  bool
	sum     [sha256.Size]byte // of status.certificate
	leaf    *bundle.ClientLeaf
	problem string
	// unseen is when a sweep first found the request gone from the
	// cache's index; zero while it is there.
	unseen time.Time
}

// maxLeafAge is how long an entry whose request the cache no longer holds
// is kept: its request's delete event was missed, or its create event is
// still on its way to the tracker.
const maxLeafAge = 10 * time.Minute

// read reads cr, which claims k, and its status.certificate, unless it
// read the same bytes of the same request before.
func (l *requestLeaves) read(cr *cmapi.CertificateRequest, k claimKey) {
	e := &requestLeaf{rv: cr.ResourceVersion, claim: k, name: cr.Annotations[cmapi.CertificateNameKey]}
	if len(cr.Status.Certificate) > 0 {
		e.issued, e.sum = true, sha256.Sum256(cr.Status.Certificate)
		l.mu.Lock()
		prev := l.byUID[cr.UID]
		l.mu.Unlock()
		if prev != nil && prev.issued && prev.sum == e.sum {
			e.leaf, e.problem = prev.leaf, prev.problem
		} else {
			e.leaf, e.problem = bundle.ReadClientLeaf(cr.Status.Certificate)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byUID == nil {
		l.byUID = map[types.UID]*requestLeaf{}
	}
	l.byUID[cr.UID] = e
}

// of returns what was read of cr at its resourceVersion; nil when
// nothing was.
func (l *requestLeaves) of(cr *cmapi.CertificateRequest) *requestLeaf {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ofLocked(cr)
}

func (l *requestLeaves) ofLocked(cr *cmapi.CertificateRequest) *requestLeaf {
	if e := l.byUID[cr.UID]; e != nil && e.rv == cr.ResourceVersion {
		return e
	}
	return nil
}

// claimOf is what cr claims, as read or as the request says, and the
// name of the Certificate it gives; false when it claims nothing.
func (l *requestLeaves) claimOf(cr *cmapi.CertificateRequest) (claimKey, string, bool) {
	if e := l.of(cr); e != nil {
		return e.claim, e.name, true
	}
	k, ok := claimOfRequest(cr)
	return k, cr.Annotations[cmapi.CertificateNameKey], ok
}

// verified keeps leaf, e's leaf as verified against its request's ca.crt,
// in its place.
func (l *requestLeaves) verified(uid types.UID, e *requestLeaf, leaf *bundle.ClientLeaf) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byUID[uid] == e && e.leaf != leaf {
		v := *e
		v.leaf = leaf
		l.byUID[uid] = &v
	}
}

// forget drops what was read of the request uid.
func (l *requestLeaves) forget(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.byUID, uid)
}

// sweep drops the entries of requests that the cache (cachedCount
// requests, listed by cachedList, as it holds them now) has not held for
// maxLeafAge. It looks only once the entries outnumber the cache's
// requests by minLeafSweep: at rest it costs nothing.
func (l *requestLeaves) sweep(cachedCount int, cachedList func() []*cmapi.CertificateRequest, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.byUID) <= cachedCount+minLeafSweep {
		return
	}
	requests := cachedList()
	cached := make(map[types.UID]bool, len(requests))
	for _, cr := range requests {
		cached[cr.UID] = true
	}
	for uid, e := range l.byUID {
		switch {
		case cached[uid]:
			e.unseen = time.Time{}
		case e.unseen.IsZero():
			e.unseen = now
		case now.Sub(e.unseen) > maxLeafAge:
			delete(l.byUID, uid)
		}
	}
}

// minLeafSweep is how many entries beyond the cache's requests a sweep
// waits for.
const minLeafSweep = 256

// clientView is one selected client as the reconciler saw it.
type clientView struct {
	cert *cmapi.Certificate
	// request is the CertificateRequest of the Certificate's current
	// revision; nil when none was seen (never issued, collected, or more
	// than one claims it).
	request  *cmapi.CertificateRequest
	inFlight bool // cert-manager is issuing it now
	// problem says why the client's certificates cannot be used; "" when
	// they can.
	problem string
}

// clientTracker reads the selected clients from the cache and remembers the
// credential each Certificate holds: parsed once per request content, so a
// reconcile over thousands of clients parses only what changed, and kept
// by revision for when its request is gone.
type clientTracker struct {
	reader     client.Reader
	selection  ClientSelection
	namespaces []string
	// events, when set, counts the changes of the client cache that index
	// was told of (the controller's client event handlers call changed
	// with each object), and a read that no change preceded returns the
	// last read's result: the reconciles that the root, the gateway or the
	// poll start cost nothing per client then. Each handler tells index
	// and events before it queues the reconcile that follows, so that
	// reconcile reads the change. Unset (dualca status reads once), every
	// read lists the clients from reader.
	events *atomic.Uint64
	// loaded, when set, says whether the client cache has loaded (see
	// clientLoad): until it has, a read returns the clients unread
	// (bundle.Clients.Unread), not the part of them the index holds.
	loaded *atomic.Bool
	// index holds the client cache's objects as its event handlers deliver
	// them, when events is set: a read walks them instead of listing the
	// cache, which copies every object into the list and matches its
	// labels again at each read (a third of a reconcile's time during a
	// fan-out over 10,000 clients).
	index *clientIndex
	last  *clientRead
	// leaves, when set, holds what the client cache's transform read of
	// the requests' status.certificate, which the cached requests no
	// longer carry (see requestLeaves). A request that carries it (read
	// from the API server, in `dualca status`) is read here.
	leaves *requestLeaves
	// now is the clock of the sweeps of leaves.
	now func() time.Time

	mu sync.Mutex
	// held is the credential each Certificate (by UID) held when its
	// current request was last seen.
	held map[types.UID]heldCredential
	// heldChanged says held changed since the last read looked at which
	// ca.crt it still carries.
	heldChanged bool
	// memo is what the last read made of each client (see clientsOf);
	// generation counts the reads. A tracker that lists reads new objects
	// every time, so for it the memo only tells what was seen.
	memo       map[types.UID]*clientMemo
	generation uint64
	// cas holds each distinct ca.crt the held credentials carry, parsed
	// once: thousands of clients trust the same one or two roots, and a
	// parsed ca.crt per client was a third of dualca's memory at 5,000
	// clients. An entry no held credential carries is dropped at the end
	// of the list that left it unused.
	cas map[[sha256.Size]byte]clientCA
}

// claimed is a Certificate and the claim on its current revision (none
// when it has no revision).
type claimed struct {
	cert  *cmapi.Certificate
	claim claim
}

// clientMemo is what a read made of a client: from its Certificate cert
// and the claim on its revision, the client and its view, as of the read
// of generation.
type clientMemo struct {
	cert       *cmapi.Certificate
	claim      claim
	client     bundle.Client
	view       clientView
	generation uint64
}

// parsedLeaf is a request's leaf as ParseClientLeaf read it.
type parsedLeaf struct {
	leaf    *bundle.ClientLeaf
	problem string
}

// clientCA is a parsed ca.crt and what is wrong with it ("" when nothing).
type clientCA struct {
	certs   []*x509.Certificate
	problem string
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
	t.index = newClientIndex()
	return t
}

// changed says the client cache changed: obj was created or updated, or
// deleted (gone). The next read sees it.
func (t *clientTracker) changed(obj client.Object, gone bool) {
	if t.events == nil {
		return
	}
	switch o := obj.(type) {
	case *cmapi.Certificate:
		t.index.certificate(o, gone)
	case *cmapi.CertificateRequest:
		if gone {
			if t.leaves != nil {
				t.leaves.forget(o.UID)
			}
			t.index.request(o, true, claimant{})
			break
		}
		// Read here, once per version of the request, not at every read:
		// the cache's transform has read this version into leaves already.
		k, name, ok := t.leaves.claimOf(o)
		t.index.request(o, false, claimant{request: o, name: name, key: k, claims: ok})
	}
	t.events.Add(1)
}

// clientIndex holds the objects of the client cache by name, as the
// cache's event handlers delivered them: the cache's own objects, shared,
// never modified here or by any reader. It also holds what each request
// claims, kept as the requests come and go, so that a read looks a claim
// up instead of indexing every request again (a tenth of dualca's CPU
// during a renewal fan-out over 50,000 clients).
type clientIndex struct {
	mu       sync.Mutex
	certs    map[types.NamespacedName]*cmapi.Certificate
	requests map[types.NamespacedName]claimant
	// claims are the requests that claim each revision. More than one is
	// believed for none (see current); the slices are the index's own.
	claims map[claimKey][]claimant
}

// claimant is a request as the index holds it, with what it claims.
type claimant struct {
	request *cmapi.CertificateRequest
	// name is the Certificate's name the request gives, key the revision
	// it claims; claims is false when it claims nothing.
	name   string
	key    claimKey
	claims bool
}

func newClientIndex() *clientIndex {
	return &clientIndex{certs: map[types.NamespacedName]*cmapi.Certificate{},
		requests: map[types.NamespacedName]claimant{}, claims: map[claimKey][]claimant{}}
}

func (x *clientIndex) certificate(crt *cmapi.Certificate, gone bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := client.ObjectKeyFromObject(crt)
	if gone {
		delete(x.certs, key)
		return
	}
	x.certs[key] = crt
}

// request puts c in place of what the index held of cr's name, or removes
// what it held (gone).
func (x *clientIndex) request(cr *cmapi.CertificateRequest, gone bool, c claimant) {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := client.ObjectKeyFromObject(cr)
	if prev, ok := x.requests[key]; ok && prev.claims {
		rest := slices.DeleteFunc(x.claims[prev.key], func(o claimant) bool { return o.request == prev.request })
		if len(rest) == 0 {
			delete(x.claims, prev.key)
		} else {
			x.claims[prev.key] = rest
		}
	}
	if gone {
		delete(x.requests, key)
		return
	}
	x.requests[key] = c
	if c.claims {
		x.claims[c.key] = append(x.claims[c.key], c)
	}
}

// claim is the claim on revision k. The caller holds x.mu.
func (x *clientIndex) claim(k claimKey) claim {
	cs := x.claims[k]
	if len(cs) == 0 {
		return claim{}
	}
	last := cs[len(cs)-1]
	return claim{request: last.request, name: last.name, n: len(cs)}
}

// certificates are the Certificates the index holds. The caller holds
// x.mu.
func (x *clientIndex) certificates() []*cmapi.Certificate {
	certs := make([]*cmapi.Certificate, 0, len(x.certs))
	for _, c := range x.certs {
		certs = append(certs, c)
	}
	return certs
}

// requestList are the requests the index holds. The caller holds x.mu.
func (x *clientIndex) requestList() []*cmapi.CertificateRequest {
	requests := make([]*cmapi.CertificateRequest, 0, len(x.requests))
	for _, c := range x.requests {
		requests = append(requests, c.request)
	}
	return requests
}

// heldCredential is what a Certificate's request of revision said.
type heldCredential struct {
	revision int
	// request, rv and sum are the request's UID, resourceVersion and
	// content hash when it was parsed: an unchanged resourceVersion spares
	// hashing it, an unchanged content parsing it.
	request types.UID
	rv      string
	sum     [sha256.Size]byte
	caSum   [sha256.Size]byte // of the request's status.ca alone: the key of cas
	leaf    *bundle.ClientLeaf
	ca      []*x509.Certificate
	problem string
}

// read returns what the decision needs to know of the selected clients, and
// the objects behind them by name (NAMESPACE/NAME of the Certificate). What
// it returns is shared with later reads: nothing may modify it.
func (t *clientTracker) read(ctx context.Context) (bundle.Clients, map[string]clientView, error) {
	if t.loaded != nil && !t.loaded.Load() {
		return bundle.Clients{Tracked: true, Unread: true}, nil, nil
	}
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

// claimKey is what a CertificateRequest claims to be: the request of
// revision of the Certificate that controls it (by UID).
type claimKey struct {
	// namespace is the request's: a controller reference names no
	// namespace, and a request elsewhere claims nothing of a Certificate.
	namespace string
	owner     types.UID
	revision  int
}

// claimOf is the key of the claims on crt's current revision.
func claimOf(crt *cmapi.Certificate) claimKey {
	return claimKey{namespace: crt.Namespace, owner: crt.UID, revision: *crt.Status.Revision}
}

// claimOfRequest is what cr claims; false when it claims nothing (no
// controller, no revision): cert-manager made no such request.
func claimOfRequest(cr *cmapi.CertificateRequest) (claimKey, bool) {
	owner := metav1.GetControllerOfNoCopy(cr)
	revision, err := strconv.Atoi(cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
	if owner == nil || err != nil {
		return claimKey{}, false
	}
	return claimKey{namespace: cr.Namespace, owner: owner.UID, revision: revision}, true
}

// claim is the request that made a claim, the Certificate's name it
// gave, and how many made it.
type claim struct {
	request *cmapi.CertificateRequest
	name    string
	n       int
}

// list reads the selected clients: from the index when the tracker is
// watched, else from the reader.
func (t *clientTracker) list(ctx context.Context) (bundle.Clients, map[string]clientView, error) {
	if t.index == nil {
		certs, requests, err := t.listFromReader(ctx)
		if err != nil {
			return bundle.Clients{Tracked: true}, nil, err
		}
		claims := make(map[claimKey]claim, len(requests))
		for _, cr := range requests {
			if k, name, ok := t.leaves.claimOf(cr); ok {
				c := claims[k]
				claims[k] = claim{request: cr, name: name, n: c.n + 1}
			}
		}
		clients, views := t.clientsOf(certs, func(k claimKey) claim { return claims[k] })
		return clients, views, nil
	}
	// The event handlers wait for the read: it reads the index's claims
	// in place.
	t.index.mu.Lock()
	defer t.index.mu.Unlock()
	clients, views := t.clientsOf(t.index.certificates(), t.index.claim)
	if t.leaves != nil {
		now := time.Now
		if t.now != nil {
			now = t.now
		}
		t.leaves.sweep(len(t.index.requests), t.index.requestList, now())
	}
	return clients, views, nil
}

// listFromReader lists the Certificates and CertificateRequests of the
// client namespaces from the reader.
func (t *clientTracker) listFromReader(ctx context.Context) ([]*cmapi.Certificate, []*cmapi.CertificateRequest, error) {
	var certs []*cmapi.Certificate
	var requests []*cmapi.CertificateRequest
	for _, ns := range t.namespaces {
		// Straight from the cache, without the deep copy of every object:
		// nothing here modifies what it reads.
		opts := []client.ListOption{client.InNamespace(ns), client.UnsafeDisableDeepCopy}
		if t.selection.Labels != nil {
			opts = append(opts, client.MatchingLabelsSelector{Selector: t.selection.Labels})
		}
		var cl cmapi.CertificateList
		if err := t.reader.List(ctx, &cl, opts...); err != nil {
			return nil, nil, fmt.Errorf("listing client certificates in %s: %w", ns, err)
		}
		var rl cmapi.CertificateRequestList
		if err := t.reader.List(ctx, &rl, opts...); err != nil {
			return nil, nil, fmt.Errorf("listing client certificate requests in %s: %w", ns, err)
		}
		for i := range cl.Items {
			certs = append(certs, &cl.Items[i])
		}
		for i := range rl.Items {
			requests = append(requests, &rl.Items[i])
		}
	}
	return certs, requests, nil
}

// clientsOf is what the decision needs to know of the selected clients
// among certs, from the requests that claimOn says claim their revisions,
// and the objects behind them by name (NAMESPACE/NAME of the
// Certificate). It forgets what it held of a Certificate it no longer
// selects.
func (t *clientTracker) clientsOf(certs []*cmapi.Certificate, claimOn func(claimKey) claim) (bundle.Clients, map[string]clientView) {
	out := bundle.Clients{Tracked: true, Items: make([]bundle.Client, 0, len(certs))}
	views := make(map[string]clientView, len(certs))
	// One lock for the whole read: reads of one tracker do not overlap
	// (one reconcile at a time), so it is never contended, and taking it
	// per client cost a pair of atomics for each of thousands.
	t.mu.Lock()
	defer t.mu.Unlock()
	t.generation++
	// A client whose Certificate and claim are those of the last read is
	// what the last read made of it: the cache's objects are never
	// modified, so the same object is the same content. Only the others
	// are read again (in a renewal fan-out, a few of tens of thousands).
	var fresh []claimed
	for _, crt := range certs {
		var on claim
		if crt.Status.Revision != nil {
			on = claimOn(claimOf(crt))
		}
		if m := t.memo[crt.UID]; m != nil && m.cert == crt && m.claim == on {
			m.generation = t.generation
			views[m.client.Name] = m.view
			out.Items = append(out.Items, m.client)
			continue
		}
		if t.selection.selects(crt) {
			fresh = append(fresh, claimed{crt, on}) // the others: not followed, not remembered
		}
	}
	ahead := t.parseAhead(fresh)
	for _, f := range fresh {
		crt, on := f.cert, f.claim
		name := crt.Namespace + "/" + crt.Name
		v := clientView{cert: crt, inFlight: issuing(crt)}
		c := bundle.Client{Name: name, Failed: failed(crt)}
		if crt.Status.Revision != nil {
			var held *heldCredential
			held, v.request, v.problem = t.current(crt, on, ahead)
			if held == nil {
				c.Unknown = true
			} else {
				c.Leaf, c.CA = held.leaf, held.ca
				if v.problem == "" {
					v.problem = held.problem
				}
			}
		}
		views[name] = v
		out.Items = append(out.Items, c)
		if t.memo == nil {
			t.memo = map[types.UID]*clientMemo{}
		}
		t.memo[crt.UID] = &clientMemo{cert: crt, claim: on, client: c, view: v, generation: t.generation}
	}
	t.forgetUnseen(views)
	return out, views
}

// forgetUnseen forgets what the tracker held of the clients this read did
// not see (views), and the ca.crt no held credential carries any longer.
// The caller holds t.mu.
func (t *clientTracker) forgetUnseen(views map[string]clientView) {
	if len(t.memo) > len(views) {
		// Every client seen has an entry of this read's generation, and
		// nothing is held of a client without an entry.
		for uid, m := range t.memo {
			if m.generation != t.generation {
				delete(t.memo, uid)
				if _, ok := t.held[uid]; ok {
					delete(t.held, uid)
					t.heldChanged = true
				}
			}
		}
	}
	if !t.heldChanged {
		return
	}
	t.heldChanged = false
	used := map[[sha256.Size]byte]bool{}
	for _, h := range t.held {
		used[h.caSum] = true
	}
	for sum := range t.cas {
		if !used[sum] {
			delete(t.cas, sum)
		}
	}
}

// parseAhead parses, on every core, the leaves of the requests that the
// selected Certificates' current revisions claim alone and that the
// Certificate claimed does not hold yet: at start, or in a fan-out, thousands at once,
// each a signature check against its ca.crt (most of the time of a start
// with tens of thousands of clients). No other request is parsed: one that
// claims no selected client's revision is never held, and parsing it would
// cost each read again. The ca.crt are parsed first, once each. What it
// returns only spares parse the work; parse decides what is held as it
// always does. The caller holds t.mu.
func (t *clientTracker) parseAhead(selected []claimed) map[*cmapi.CertificateRequest]parsedLeaf {
	var todo []*cmapi.CertificateRequest
	for _, s := range selected {
		crt, c := s.cert, s.claim
		if crt.Status.Revision == nil {
			continue
		}
		if c.n == 1 && c.name == crt.Name && t.held[crt.UID].request != c.request.UID && t.issued(c.request) {
			todo = append(todo, c.request)
		}
	}
	if len(todo) < parseAheadAtLeast {
		return nil
	}
	cas := make([]clientCA, len(todo))
	for i, cr := range todo {
		cas[i] = t.caOf(sha256.Sum256(cr.Status.CA), cr.Status.CA)
	}
	leaves := make([]parsedLeaf, len(todo))
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, cr := range todo {
		g.Go(func() error {
			leaves[i] = t.leafOf(cr, cas[i].certs)
			return nil
		})
	}
	_ = g.Wait() // nothing fails: a damaged leaf is a problem, not an error
	out := make(map[*cmapi.CertificateRequest]parsedLeaf, len(todo))
	for i, cr := range todo {
		out[cr] = leaves[i]
	}
	return out
}

// parseAheadAtLeast is how many new leaves are worth starting goroutines
// for; fewer are parsed in line.
const parseAheadAtLeast = 64

// current returns the credential crt holds at its current revision, from
// the one request of that revision crt controls (returned too), or as
// remembered when that request is gone; nil when neither tells. c is the
// claim on crt's current revision; a request counts only if it also names
// crt. problem says why the requests do not tell, when that is worth an
// event. The caller holds t.mu.
func (t *clientTracker) current(crt *cmapi.Certificate, c claim, ahead map[*cmapi.CertificateRequest]parsedLeaf) (*heldCredential, *cmapi.CertificateRequest, string) {
	ours, n := c.request, c.n
	if n == 1 && c.name != crt.Name {
		ours, n = nil, 0
	}
	revision := *crt.Status.Revision
	h, had := t.held[crt.UID]
	switch {
	case n > 1:
		// Only cert-manager should create a second: whoever did can make
		// either the client's, so neither is believed.
		return nil, nil, fmt.Sprintf("%d certificate requests claim its revision %d", n, revision)
	case n == 1 && t.issued(ours):
		if !had || h.request != ours.UID || h.revision != revision || ours.ResourceVersion == "" || h.rv != ours.ResourceVersion {
			// Written only when the request changed: at rest, a read
			// over thousands of clients writes nothing.
			h = t.parse(ours, revision, h, had, ahead)
			if t.held == nil {
				t.held = map[types.UID]heldCredential{}
			}
			t.held[crt.UID] = h
			t.heldChanged = true
		}
		return &h, ours, ""
	}
	// The request is gone (cert-manager keeps one revision, and deletes
	// the current one once the next is under way), or the cache has not
	// shown its certificate yet.
	if had && h.revision == revision {
		return &h, nil, ""
	}
	return nil, nil, ""
}

// parse reads a request's certificate and CA as cert-manager writes them
// into the client's Secret: a leaf (and maybe its chain), and the root it
// trusts the server with. Damaged data reads as no leaf or no CA: such a
// client is simply not on any root. What prev held of the same request
// with the same content is kept, at the same addresses, so the decisions'
// caches see it once; a ca.crt read before is not parsed again. The
// caller holds t.mu.
func (t *clientTracker) parse(cr *cmapi.CertificateRequest, revision int, prev heldCredential, had bool, ahead map[*cmapi.CertificateRequest]parsedLeaf) heldCredential {
	caSum := sha256.Sum256(cr.Status.CA)
	certSum := t.certificateSum(cr)
	hash := sha256.New()
	hash.Write(certSum[:])
	hash.Write(caSum[:])
	var sum [sha256.Size]byte
	hash.Sum(sum[:0])
	if had && prev.request == cr.UID && prev.sum == sum {
		prev.revision, prev.rv = revision, cr.ResourceVersion
		return prev
	}
	ca := t.caOf(caSum, cr.Status.CA)
	h := heldCredential{revision: revision, request: cr.UID, rv: cr.ResourceVersion, sum: sum, caSum: caSum, ca: ca.certs}
	l, ok := ahead[cr]
	if !ok {
		l = t.leafOf(cr, ca.certs)
	}
	h.leaf, h.problem = l.leaf, l.problem
	if h.leaf != nil && ca.problem != "" {
		h.problem = ca.problem // tls.crt's own problem first, then ca.crt's
	}
	return h
}

// issued reports whether cr carries a certificate: its status.certificate,
// or what the cache's transform read of it.
func (t *clientTracker) issued(cr *cmapi.CertificateRequest) bool {
	if len(cr.Status.Certificate) > 0 {
		return true
	}
	e := t.leaves.of(cr)
	return e != nil && e.issued
}

// certificateSum is the digest of cr's status.certificate.
func (t *clientTracker) certificateSum(cr *cmapi.CertificateRequest) [sha256.Size]byte {
	if e := t.leaves.of(cr); e != nil && e.issued && len(cr.Status.Certificate) == 0 {
		return e.sum
	}
	return sha256.Sum256(cr.Status.Certificate)
}

// leafOf is cr's leaf read against ca, its parsed status.ca: from its
// status.certificate, or from what the cache's transform read of it, in
// whose place the verified leaf is kept. It is safe for concurrent use.
func (t *clientTracker) leafOf(cr *cmapi.CertificateRequest, ca []*x509.Certificate) parsedLeaf {
	e := t.leaves.of(cr)
	if e == nil || !e.issued || len(cr.Status.Certificate) > 0 {
		var l parsedLeaf
		l.leaf, l.problem = bundle.ParseClientLeaf(cr.Status.Certificate, ca)
		return l
	}
	if e.leaf == nil {
		return parsedLeaf{problem: e.problem}
	}
	var l parsedLeaf
	l.leaf, l.problem = e.leaf.VerifiedBy(ca)
	t.leaves.verified(cr.UID, e, l.leaf)
	return l
}

// caOf is the parsed ca.crt of digest sum, parsed from pem the first time.
// The caller holds t.mu.
func (t *clientTracker) caOf(sum [sha256.Size]byte, pem []byte) clientCA {
	if ca, ok := t.cas[sum]; ok {
		return ca
	}
	var ca clientCA
	ca.certs, ca.problem = bundle.ParseClientCA(pem)
	if t.cas == nil {
		t.cas = map[[sha256.Size]byte]clientCA{}
	}
	t.cas[sum] = ca
	return ca
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
