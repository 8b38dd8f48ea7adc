package syncer

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/dualca/dualca/bundle"
)

// progressEvery bounds how often a change of the client progress alone is
// written to the gateway Secret.
const progressEvery = 5 * time.Second

// gatewayStore reads the root, dualca's record and the targets, and writes
// the targets and, beside them, the record. What it keeps between reconciles is its
// own: when it last read from the API server (the poll), the record as it
// last read or wrote it (record.go), each target's version, and when it
// last wrote (to pace writes of the client progress alone). Reconciles run
// one at a time, so it needs no lock.
type gatewayStore struct {
	rootKey types.NamespacedName
	// targets are the objects written (targets.go), the primary first.
	targets []*targetState
	// issuing is the issuing Secret (issuing.go); nil when there is none.
	// issuingRead is what the issuing rule made of its version rv.
	issuing     *targetState
	issuingRead struct {
		rv    string
		found bundle.IssuingFound
	}
	// shadow is a Secret that would shadow the gateway's bundle (see
	// Options.shadowKey); its zero key when there is none to watch.
	shadow      types.NamespacedName
	shadowCache client.Reader
	api         client.Reader // uncached: every poll reads here
	// rootCache is the root's single-object cache, read between polls
	// (see source); nil when watches are disabled.
	rootCache    client.Reader
	writer       client.Writer
	clock        clock.PassiveClock
	pollInterval time.Duration

	// lastPoll is when root and targets were last read from the API server.
	lastPoll time.Time
	// record is dualca's record, what every decision starts from.
	record *record
	// lastWrite is when the primary target was last written.
	lastWrite time.Time
	// untold is what the targets written were, to be told once their
	// record is written too.
	untold untold
	// parsed remembers what the decisions parsed of the gateway's fields:
	// at rest they hold the same bytes at every reconcile.
	parsed *bundle.Parsed
	// root is the root last validated; nil before one was.
	root *bundle.Root
}

// targetState is a target and what the store keeps of it.
type targetState struct {
	target
	// cache is its single-object cache; nil when watches are disabled.
	cache client.Reader
	// rv is its resourceVersion as last read from the API server or
	// written; "" when it was absent.
	rv string
	// ownVersion is the resourceVersion of dualca's last write, read by
	// the watch's predicate on the informer's goroutine.
	ownVersion atomic.Pointer[string]
	// writing is closed once the write of it under way has ended (its
	// version in ownVersion when it succeeded); nil when none is under
	// way. Read by the watch's handler (targetWorkItem).
	writing atomic.Pointer[chan struct{}]
	// seen is the digest (target.digest) of what dualca owns in it, as
	// dualca last read or wrote it; "" when it knows none (absent, or
	// since a start). Unlike rv, others' writes of what dualca does not
	// own (a label, an annotation of theirs) leave it alone: they do not
	// make a target that a refused write left in place someone else's.
	seen string
	// had is the root (its fingerprint) the target held with a decision
	// of dualca's, as this process last wrote it or read it as its own;
	// "" when it knows none (see lagging).
	had string
}

// ownWrite reports whether obj is the version dualca wrote last: the
// reconcile that wrote it has decided on exactly that content and
// scheduled its next check, so the watch event it causes brings nothing
// to decide. Skipping it saves a reconcile per write, which a root
// arriving meanwhile would wait for.
func (t *targetState) ownWrite(obj client.Object) bool {
	rv := t.ownVersion.Load()
	return rv != nil && obj.GetResourceVersion() != "" && obj.GetResourceVersion() == *rv
}

// wrote remembers the version of t that dualca just wrote.
func (t *targetState) wrote(obj client.Object) {
	t.rv = obj.GetResourceVersion()
	rv := t.rv
	t.ownVersion.Store(&rv)
}

// beginWrite marks a write of t under way until the function it returns
// is called, after wrote when the write succeeded.
func (t *targetState) beginWrite() (end func()) {
	ch := make(chan struct{})
	t.writing.Store(&ch)
	return func() {
		t.writing.Store(nil)
		close(ch)
	}
}

// notOwnWrite lets every event of the target through but the creation or
// update to the version dualca wrote last (see ownWrite). A deletion
// always passes, whatever version it last had.
func notOwnWrite[T client.Object](t *targetState) predicate.TypedPredicate[T] {
	return predicate.TypedFuncs[T]{
		CreateFunc: func(e event.TypedCreateEvent[T]) bool { return !t.ownWrite(e.Object) },
		UpdateFunc: func(e event.TypedUpdateEvent[T]) bool { return !t.ownWrite(e.ObjectNew) },
	}
}

// reading says where an attempt reads from.
type reading int

const (
	// fromCaches: a reconcile between polls, started by an event of the
	// single-object caches or by a delay ending, reads the caches, which
	// saves requests on the propagation path and for every client event
	// of a fan-out. A stale cache cannot do harm: the root cache is the
	// very source of the root's events (a newer root arrives as its own
	// event), and a target cached at another version than the one dualca
	// last read or wrote is read again from the API server; a write
	// decided from a target that changed meanwhile fails on its
	// resourceVersion and is retried.
	fromCaches reading = iota
	// polling: the poll reads the root and the targets from the API
	// server, which repairs a lost or stalled watch of the two objects a
	// rotation stands on. Those are its only requests: the record is
	// dualca's own (read once, then known from its own writes), the
	// Secret that would shadow the bundle, the issuing Secret and the
	// status ConfigMap are read from their caches, whose reflectors list
	// again whenever their watch ends.
	polling
	// retrying: every attempt after a conflict reads everything from the
	// API server, the record included.
	retrying
)

// fresh reports whether the root and the targets are read from the API
// server.
func (r reading) fresh() bool { return r != fromCaches }

// source returns where this attempt reads from, and the root through.
//
// A poll counts once the attempt that made it read and wrote all it had to
// (polled): one whose reads failed leaves the next reconcile to poll
// again, so a watch lost meanwhile is still repaired within one interval.
func (s *gatewayStore) source(attempt int) (root client.Reader, how reading) {
	switch {
	case attempt > 0:
		return s.api, retrying
	case s.rootCache == nil || s.clock.Since(s.lastPoll) >= s.pollInterval*9/10:
		return s.api, polling
	}
	return s.rootCache, fromCaches
}

// polled records a poll that started at began and succeeded.
func (s *gatewayStore) polled(began time.Time) { s.lastPoll = began }

// readRoot returns the validated root, read through from. Any reason the
// root cannot be used is an *bundle.InvalidError; the Secret is returned
// when it exists, so an event can point at it.
func (s *gatewayStore) readRoot(ctx context.Context, from client.Reader) (*bundle.Root, *corev1.Secret, error) {
	obj, err := getRoot(ctx, from, s.rootKey)
	if err != nil {
		return nil, obj, err
	}
	root, err := s.validateRoot(obj.Data[corev1.TLSCertKey], obj.Data[corev1.TLSPrivateKeyKey], obj.Data[caKey])
	return root, obj, err
}

// getRoot reads the root Secret at key, for the controller and for
// `dualca status` alike: an absent Secret, or one of another type than
// kubernetes.io/tls, is an *bundle.InvalidError (with the Secret, when it
// exists); its fields are for bundle.ValidateRoot to judge.
func getRoot(ctx context.Context, from client.Reader, key types.NamespacedName) (*corev1.Secret, error) {
	obj := &corev1.Secret{}
	if err := from.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &bundle.InvalidError{Reason: "root secret " + key.String() + " not found"}
		}
		return nil, fmt.Errorf("reading root secret %s: %w", key, err)
	}
	if obj.Type != corev1.SecretTypeTLS {
		return obj, &bundle.InvalidError{Reason: fmt.Sprintf("root secret has type %q, want %q", obj.Type, corev1.SecretTypeTLS)}
	}
	return obj, nil
}

// validateRoot is bundle.ValidateRoot of the root Secret's fields as of
// now. The root last validated is taken again when the fields hold the
// same bytes, checked again only for what depends on the time (its
// validity as a CA, bundle.CheckCA, as ValidateRoot checks it): the
// parse of a key and of certificates, and the key's match, give the same
// from the same bytes. So a root read at every reconcile costs its
// parsing once, and the decisions see one *bundle.Root per root.
func (s *gatewayStore) validateRoot(certPEM, keyPEM, caPEM []byte) (*bundle.Root, error) {
	now := s.clock.Now()
	if last := s.root; last != nil && bytes.Equal(certPEM, last.CertPEM) && bytes.Equal(keyPEM, last.KeyPEM) && bytes.Equal(caPEM, last.CAPEM) {
		if err := bundle.CheckCA(corev1.TLSCertKey, last.Cert, now); err != nil {
			return nil, err
		}
		return last, nil
	}
	root, err := bundle.ValidateRoot(certPEM, keyPEM, caPEM, now)
	if err == nil {
		s.root = root
	}
	return root, err
}

// served are the bundles the targets found hold, one for each target that
// holds one (nil for one absent): what the gateway trusts now.
func (s *gatewayStore) served(found []client.Object) [][]byte {
	var out [][]byte
	for i, t := range s.targets {
		if t.bundleKey == "" {
			continue
		}
		var data []byte
		if found[i] != nil {
			data = dataOf(found[i])[t.bundleKey]
		}
		out = append(out, data)
	}
	return out
}

// gatewayRead is the targets as a reconcile found them.
type gatewayRead struct {
	// found are the targets, in the store's order; nil for one absent.
	found []client.Object
	// state is what the decisions start from: the gateway as dualca's
	// record describes it, so that a target deleted or edited behind
	// dualca's back changes nothing of the rotation (its server credential
	// cannot be made again once the old root's key has left the root
	// Secret). With no record, the targets found, adopted as a fresh start.
	state bundle.Gateway
	// tampered names what differs between the targets and the record; ""
	// when nothing does (see examine).
	tampered string
	// meant are the digests of the targets found that dualca meant, by
	// target, for the record's next write (see examine).
	meant map[string]string
	// foreign are what the gateways read that dualca does not own and
	// leaves (a ca.crl, a shadowing Secret).
	foreign []foreignInput
}

// restoring names the targets deleted and about to be written again from
// what dualca last knew of them.
func (g gatewayRead) restoring(ts []*targetState) []string {
	var out []string
	if !g.state.Exists {
		return nil
	}
	for i, t := range ts {
		switch {
		case g.found[i] != nil:
		case t.primary && t.credential:
			out = append(out, gatewayRestoredID)
		default:
			out = append(out, t.id())
		}
	}
	return out
}

// gatewayRestoredID names the gateway Secret among the targets restored.
const gatewayRestoredID = "gateway"

// readGateway reads the record (from the API server when retrying or never
// read) and the targets (from the API server at a poll or retry); a cached
// copy of a target at another version than the one dualca knows is read
// again from the API server.
func (s *gatewayStore) readGateway(ctx context.Context, how reading) (gatewayRead, error) {
	rec, err := s.record.read(ctx, how == retrying)
	if err != nil {
		return gatewayRead{}, err
	}
	read := gatewayRead{found: make([]client.Object, len(s.targets))}
	left := map[string]string{} // what dualca last left the targets holding
	for i, t := range s.targets {
		left[t.id()] = t.seen
		if read.found[i], err = s.readTarget(ctx, t, how.fresh()); err != nil {
			return gatewayRead{}, err
		}
		for _, in := range t.foreign(read.found[i]) {
			read.foreign = append(read.foreign, foreignInput{what: t.id() + ": " + in, object: read.found[i]})
		}
	}
	if shadow, err := s.shadowed(ctx, how == retrying); err != nil {
		return gatewayRead{}, err
	} else if shadow != nil {
		read.foreign = append(read.foreign, foreignInput{what: s.targets[0].id() + ": shadowed by " + KindSecret + "/" + s.shadow.String(), object: shadow})
	}
	var seen map[string]string
	read.tampered, read.meant, seen = examine(s.targets, read.found, left, rec, s.record.sealKey())
	for _, t := range s.targets {
		t.seen = seen[t.id()]
	}
	credential := s.credential(read.found)
	switch {
	case rec != nil:
		read.state = gatewayOfRecord(rec, credential, s.record.known(rec), s.parsed)
		read.state.Lagging = lagging(s.targets, read.found, rec, read.meant)
		read.state.ServedSince = servedSince(s.targets, read.found, rec, read.meant)
	case slices.ContainsFunc(read.found, func(o client.Object) bool { return o != nil }):
		read.state = s.adopted(read.found)
	}
	return read, nil
}

// readTarget reads t, from its cache unless fresh; nil when absent.
func (s *gatewayStore) readTarget(ctx context.Context, t *targetState, fresh bool) (client.Object, error) {
	obj := t.newObject()
	if !fresh && t.cache != nil {
		err := t.cache.Get(ctx, t.key, obj)
		if client.IgnoreNotFound(err) == nil && obj.GetResourceVersion() == t.rv {
			if err != nil {
				return nil, nil
			}
			return obj, nil
		}
		obj = t.newObject()
	}
	switch err := s.api.Get(ctx, t.key, obj); {
	case apierrors.IsNotFound(err):
		t.rv = ""
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s: %w", t.id(), err)
	}
	t.rv = obj.GetResourceVersion()
	return obj, nil
}

// foreignInput is an input a gateway reads beside a target that dualca
// does not own, and the object it was found in (where it is told).
type foreignInput struct {
	what   string
	object client.Object
}

// shadowed returns the Secret that would shadow the gateway's bundle, nil
// when it does not exist: from its cache unless fresh.
func (s *gatewayStore) shadowed(ctx context.Context, fresh bool) (*corev1.Secret, error) {
	if s.shadow.Name == "" {
		return nil, nil
	}
	from := s.api
	if !fresh && s.shadowCache != nil {
		from = s.shadowCache
	}
	obj := &corev1.Secret{}
	err := from.Get(ctx, s.shadow, obj)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", s.shadow, err)
	}
	return obj, nil
}

// credential is the target found that holds the server credential; nil
// when none does or it is absent.
func (s *gatewayStore) credential(found []client.Object) client.Object {
	for i, t := range s.targets {
		if t.credential {
			return found[i]
		}
	}
	return nil
}

// current is the primary target as the API server has it now, or nil:
// where events are written.
func (s *gatewayStore) current(ctx context.Context) client.Object {
	t := s.targets[0]
	obj := t.newObject()
	if err := s.api.Get(ctx, t.key, obj); err != nil {
		return nil
	}
	return obj
}

// adopted is the targets found without dualca's record (a first start
// beside existing objects, or an upgrade from a version that kept none):
// their content is adopted, their annotations are not trusted, and no root
// but the current one is known to come from the root Secret, so the
// decision keeps only what that root vouches for (fail closed).
func (s *gatewayStore) adopted(found []client.Object) bundle.Gateway {
	gw := bundle.Gateway{Exists: true, Parsed: s.parsed}
	for i, t := range s.targets {
		if found[i] == nil {
			continue
		}
		data := dataOf(found[i])
		if t.credential && gw.CertPEM == nil {
			gw.CertPEM, gw.KeyPEM = data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey]
		}
		if t.bundleKey != "" && gw.CAPEM == nil {
			gw.CAPEM = data[t.bundleKey]
		}
	}
	return gw
}

// gatewayOf is the combined gateway Secret s as the decisions would read
// it, its annotations included (for `dualca status`).
func gatewayOf(s *corev1.Secret, parsed *bundle.Parsed) bundle.Gateway {
	return bundle.Gateway{
		Exists:  true,
		CertPEM: s.Data[corev1.TLSCertKey],
		KeyPEM:  s.Data[corev1.TLSPrivateKeyKey],
		CAPEM:   s.Data[caKey],
		State:   bundle.ParseState(s.Annotations),
		Parsed:  parsed,
	}
}

// lagging reports whether a target that holds the bundle lacks the root
// the record says is current, and never held it as far as this process
// knows: one dualca wrote before its record's last decision, left behind
// by a write that failed or has not come yet, even if someone else edited
// it since (tampered: restored from the record, and told). Its gateway
// has never loaded the root, so the decision counts the root's
// propagation delay from the write about to bring it there, not from the
// record's date: counted from the record, a writer who edits the gateway
// after a refused write would have clients moved to the root by the
// reconcile that first writes it there. A target dualca had brought to
// the root (targetState.had), then edited or replayed by someone else,
// does not lag: its gateway had the root for the delay, and a writer must
// not hold a rotation back for as long as it replays. A dualca that has
// not seen the target hold the root since it started cannot tell, and
// takes such an edit to lag. A target deleted is created again exactly
// as the record has it. It notes in each target the root it finds it
// holding as dualca's own.
func lagging(ts []*targetState, found []client.Object, rec *corev1.Secret, meant map[string]string) bool {
	current := recordDigests(rec, ts, false)
	root := rec.Annotations[bundle.AnnotationRoot]
	lags := false
	for i, t := range ts {
		id := t.id()
		switch {
		case t.bundleKey == "" || found[i] == nil:
			continue
		case meant[id] != "" && meant[id] == current[id]:
			t.had = root // it holds the record's decision
			continue
		case meant[id] == "" && t.had != "" && t.had == root:
			continue // edited after dualca brought the root there
		}
		certs, err := bundle.ParseCertificates(t.bundleKey, dataOf(found[i])[t.bundleKey])
		switch holds := err == nil && slices.ContainsFunc(certs, func(c *x509.Certificate) bool { return bundle.Fingerprint(c) == root }); {
		case !holds:
			lags = true
		case meant[id] != "":
			t.had = root
		}
	}
	return lags
}

// servedSince is when the primary target says the gateway got the
// record's current root: its state annotations, read only when it is
// dualca's own write (meant: sealed, or the record's own), which the
// record may not have followed. Zero when it is absent, not dualca's, or
// names another root. A writer of the gateway Secret cannot make it say
// anything (the seal covers the annotations); and the decision takes it
// only when it is later than the record's, so it can only postpone.
func servedSince(ts []*targetState, found []client.Object, rec *corev1.Secret, meant map[string]string) time.Time {
	if len(ts) == 0 || found[0] == nil || meant[ts[0].id()] == "" {
		return time.Time{}
	}
	st := bundle.ParseState(found[0].GetAnnotations())
	if st.Root == "" || st.Root != rec.Annotations[bundle.AnnotationRoot] {
		return time.Time{}
	}
	return st.RootAddedAt
}

// written is what a write did.
type written struct {
	// object is the primary target as it is now; nil after a failed write
	// or when it is absent.
	object client.Object
	// wrote: a target was created or updated.
	wrote bool
	// restored names the targets created again after they were deleted.
	restored []string
	// tampered names what was changed outside dualca and written again
	// from the record; "" when nothing was.
	tampered string
	// foreign are what the gateways read that dualca does not own.
	foreign []foreignInput
	// deferred is how long a change of the client progress alone waits
	// before it is written; 0 when nothing waits.
	deferred time.Duration
	// reached: every target holds the decision, though the write may have
	// failed (the record's part): what follows the targets, the issuing
	// Secret, follows them.
	reached bool
}

// write creates or updates each target to hold d, those that hold the
// bundle alone first (trust first), then records d in dualca's record,
// and does nothing when all already do. Each target written is sealed for
// the record the decision started from (see sealOf), so that a record
// write that does not follow (a crash, a refusal) leaves no false alarm.
// Updates carry the resourceVersion that was read, so a concurrent writer
// makes this fail with a conflict and the caller re-reads and decides
// again instead of overwriting.
func (s *gatewayStore) write(ctx context.Context, read gatewayRead, d bundle.Decision, root *bundle.Root) (written, error) {
	c := contentOf(d)
	desired := make([]client.Object, len(s.targets))
	digests := map[string]string{}
	key, version := s.record.sealKey(), s.record.version()
	for i, t := range s.targets {
		desired[i] = t.desired(read.found[i], c)
		digests[t.id()] = t.digest(desired[i])
		seal(desired[i], read.found[i], t.seen == digests[t.id()], func() string { return sealOf(key, version, t.id(), digests[t.id()]) })
	}
	w := written{object: read.found[0], foreign: read.foreign}
	if s.progressOnly(read.found, desired) {
		if wait := progressEvery - s.clock.Since(s.lastWrite); wait > 0 {
			w.deferred = wait
			return w, nil
		}
	}
	err := s.writeTargets(ctx, read.found, desired, digests, d.State.Root, &w)
	if w.wrote {
		s.untold.add(read.restoring(s.targets), read.tampered)
	}
	w.reached = err == nil
	// The record is written once the targets' writes have returned, not
	// beside them: sent together, the two writes contend for the API
	// server and etcd, and the gateway's watch event came later (p50 4.7
	// ms after its write began, against 3.1 ms alone and 3.4 ms with the
	// record after it, 150 writes each against an envtest API server;
	// docs/design.md has the propagation benchmark's figures). The record
	// is written whatever the targets' outcome; either may fail without
	// the other, and both outcomes are handled (see the type record).
	if err = writeError(err, s.record.write(ctx, s.targets, digests, read.meant, d, root)); err != nil {
		if w.reached {
			// The targets hold the decision, the record does not: the
			// caller still moves the issuing Secret after them.
			return written{object: w.object, reached: true}, err
		}
		return written{}, err
	}
	w.restored, w.tampered = s.untold.take()
	return w, nil
}

// writeTargets writes each target to desired in writeOrder, and stops at
// the first that fails: no target serves from a root another was not told
// to trust. Each target written holds root, the decision's current root.
func (s *gatewayStore) writeTargets(ctx context.Context, found, desired []client.Object, digests map[string]string, root string, w *written) error {
	for _, i := range s.writeOrder() {
		t := s.targets[i]
		wrote, err := s.writeTarget(ctx, t, found[i], desired[i])
		if err != nil {
			return err
		}
		t.had = root
		if wrote {
			t.seen = digests[t.id()]
			w.wrote = true
			if i == 0 {
				w.object = desired[0]
			}
		}
	}
	return nil
}

// writeError is what a write whose targets' part ended in targets and
// whose record's ended in record returns: a conflict first, so that the
// next attempt reads everything again, else the targets' error.
func writeError(targets, record error) error {
	switch {
	case apierrors.IsConflict(targets):
		return targets
	case apierrors.IsConflict(record):
		return record
	case targets != nil:
		return targets
	}
	return record
}

// seal puts the seal on desired, target found as written: found's own
// when dualca's part of it stays as it is (a new seal would only rewrite
// it), else a new one, made by sealed (an HMAC: not made at rest).
func seal(desired, found client.Object, unchanged bool, sealed func() string) {
	a := maps.Clone(desired.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	delete(a, annotationSeal)
	switch {
	case !unchanged:
		a[annotationSeal] = sealed()
	case found.GetAnnotations()[annotationSeal] != "":
		a[annotationSeal] = found.GetAnnotations()[annotationSeal]
	}
	desired.SetAnnotations(a)
}

// untold is what targets written were restored or tampered with, until a
// reconcile that wrote them also wrote its record and tells them: a record
// write that fails after the targets' would otherwise lose the tale, the
// targets then being dualca's own writes (sealed) at the next attempt.
type untold struct {
	restored []string
	tampered []string
}

func (u *untold) add(restored []string, tampered string) {
	for _, r := range restored {
		if !slices.Contains(u.restored, r) {
			u.restored = append(u.restored, r)
		}
	}
	if tampered != "" && !slices.Contains(u.tampered, tampered) {
		u.tampered = append(u.tampered, tampered)
	}
}

// take returns what is untold, and forgets it.
func (u *untold) take() (restored []string, tampered string) {
	restored, tampered = u.restored, strings.Join(u.tampered, "; ")
	*u = untold{}
	return restored, tampered
}

// writeOrder is the order targets are written in: those holding the
// bundle alone first, so that no target serves from a root another has
// not been told to trust yet.
func (s *gatewayStore) writeOrder() []int {
	var first, then []int
	for i, t := range s.targets {
		if !t.credential {
			first = append(first, i)
		} else {
			then = append(then, i)
		}
	}
	return append(first, then...)
}

// writeTarget creates or updates t to desired; false when found holds it already.
func (s *gatewayStore) writeTarget(ctx context.Context, t *targetState, found, desired client.Object) (bool, error) {
	if found != nil && unchangedObject(found, desired) {
		return false, nil
	}
	end := t.beginWrite()
	defer end()
	if found == nil {
		if err := s.writer.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Someone created it between our read and our write: decide again.
				return false, apierrors.NewConflict(corev1.Resource(t.kind+"s"), t.key.Name, err)
			}
			return false, fmt.Errorf("creating %s: %w", t.id(), err)
		}
	} else {
		if err := s.writer.Update(ctx, desired); err != nil {
			if apierrors.IsConflict(err) {
				return false, err
			}
			return false, fmt.Errorf("updating %s: %w", t.id(), err)
		}
	}
	t.wrote(desired)
	if t.primary {
		s.lastWrite = s.clock.Now()
	}
	return true, nil
}

// mergeAnnotations replaces dualca's annotations and keeps everyone else's.
func mergeAnnotations(existing, ours map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range existing {
		if !strings.HasPrefix(k, bundle.AnnotationPrefix) {
			out[k] = v
		}
	}
	maps.Copy(out, ours)
	return out
}

// progressOnly reports whether the targets found differ from desired in
// the primary's client progress annotation alone.
func (s *gatewayStore) progressOnly(found, desired []client.Object) bool {
	if found[0] == nil || found[0].GetAnnotations()[bundle.AnnotationClients] == desired[0].GetAnnotations()[bundle.AnnotationClients] {
		return false
	}
	for i := range found {
		if found[i] == nil {
			return false
		}
		a, b := found[i], desired[i]
		if i == 0 {
			a, b = withoutProgress(a), withoutProgress(b)
		}
		if !unchangedObject(a, b) {
			return false
		}
	}
	return true
}

// withoutProgress is obj without its client progress, nor its seal (which
// a change of the progress changes).
func withoutProgress(obj client.Object) client.Object {
	c := obj.DeepCopyObject().(client.Object)
	a := maps.Clone(c.GetAnnotations())
	delete(a, bundle.AnnotationClients)
	delete(a, annotationSeal)
	c.SetAnnotations(a)
	return c
}

// caKey is the trust-bundle key that cert-manager and Istio both use.
const caKey = "ca.crt"
