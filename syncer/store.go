package syncer

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// gatewayStore reads the root, dualca's record and the gateway Secret, and
// writes the record, then the gateway. What it keeps between reconciles is
// its own: when it last read from the API server (the poll), the record as
// it last read or wrote it (record.go), and when it last wrote (to pace
// writes of the client progress alone). Reconciles run one at a time, so
// it needs no lock.
type gatewayStore struct {
	rootKey, gatewayKey types.NamespacedName
	api                 client.Reader // uncached: every poll reads here
	// rootCache and gatewayCache are the single-object caches, read between
	// polls (see source); nil when watches are disabled.
	rootCache, gatewayCache client.Reader
	writer                  client.Writer
	clock                   clock.PassiveClock
	pollInterval            time.Duration

	// lastPoll is when root and gateway were last read from the API server.
	lastPoll time.Time
	// gatewayRV is the gateway's resourceVersion as last read from the API
	// server or written; "" when it was absent.
	gatewayRV string
	// record is dualca's record, what every decision starts from.
	record *record
	// lastWrite is when the gateway Secret was last written.
	lastWrite time.Time
	// parsed remembers what the decisions parsed of the gateway's fields:
	// at rest they hold the same bytes at every reconcile.
	parsed *bundle.Parsed
	// ownVersion is the resourceVersion of dualca's last write, read by
	// the gateway watch's predicate on the informer's goroutine.
	ownVersion atomic.Pointer[string]
}

// ownWrite reports whether obj is the version dualca wrote last: the
// reconcile that wrote it has decided on exactly that content and
// scheduled its next check, so the watch event it causes brings nothing
// to decide. Skipping it saves a reconcile per write, which a root
// arriving meanwhile would wait for.
func (s *gatewayStore) ownWrite(obj *corev1.Secret) bool {
	rv := s.ownVersion.Load()
	return rv != nil && obj.ResourceVersion != "" && obj.ResourceVersion == *rv
}

// notOwnWrite lets every gateway event through but the creation or update
// to the version dualca wrote last (see ownWrite). A deletion always
// passes, whatever version it last had.
func (s *gatewayStore) notOwnWrite() predicate.TypedPredicate[*corev1.Secret] {
	return predicate.TypedFuncs[*corev1.Secret]{
		CreateFunc: func(e event.TypedCreateEvent[*corev1.Secret]) bool { return !s.ownWrite(e.Object) },
		UpdateFunc: func(e event.TypedUpdateEvent[*corev1.Secret]) bool { return !s.ownWrite(e.ObjectNew) },
	}
}

// source returns where this reconcile reads the root and the gateway.
//
// The poll, and every retry after a conflict, reads both from the API
// server: that is what repairs a lost or stalled watch. A reconcile between
// polls was started by an event of the single-object caches or by a delay
// ending, and reads the caches, which saves two requests on the propagation
// path and for every client event of a fan-out. A stale cache cannot do
// harm: the root cache is the very source of the root's events (a newer
// root arrives as its own event), and a gateway cached at another version
// than the one dualca last read or wrote is read again from the API server;
// a write decided from a gateway that changed meanwhile fails on its
// resourceVersion and is retried fresh.
func (s *gatewayStore) source(attempt int) (root, gateway client.Reader) {
	if s.rootCache == nil || attempt > 0 || s.clock.Since(s.lastPoll) >= s.pollInterval*9/10 {
		s.lastPoll = s.clock.Now()
		return s.api, s.api
	}
	return s.rootCache, s.gatewayCache
}

// readRoot returns the validated root, read through from. Any reason the
// root cannot be used is an *bundle.InvalidError; the Secret is returned
// when it exists, so an event can point at it.
func (s *gatewayStore) readRoot(ctx context.Context, from client.Reader) (*bundle.Root, *corev1.Secret, error) {
	key := s.rootKey
	obj := &corev1.Secret{}
	if err := from.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &bundle.InvalidError{Reason: "root secret " + key.String() + " not found"}
		}
		return nil, nil, fmt.Errorf("reading root secret %s: %w", key, err)
	}
	if obj.Type != corev1.SecretTypeTLS {
		return nil, obj, &bundle.InvalidError{Reason: fmt.Sprintf("root secret has type %q, want %q", obj.Type, corev1.SecretTypeTLS)}
	}
	root, err := bundle.ValidateRoot(obj.Data[corev1.TLSCertKey], obj.Data[corev1.TLSPrivateKeyKey], obj.Data[caKey], s.clock.Now())
	return root, obj, err
}

// gatewayRead is the gateway Secret as a reconcile found it.
type gatewayRead struct {
	// secret is the Secret; nil when absent.
	secret *corev1.Secret
	// state is what the decisions start from: the gateway as dualca's
	// record describes it, so that a Secret deleted or edited behind
	// dualca's back changes nothing of the rotation (its server credential
	// cannot be made again once the old root's key has left the root
	// Secret). With no record, the gateway found, adopted as a fresh start.
	state bundle.Gateway
	// tampered names what differs between the Secret and the record; ""
	// when nothing does (see examine).
	tampered string
	// meant is the Secret's digest when dualca meant it, for the record's
	// next write (see examine); "" otherwise.
	meant string
}

// restoring reports whether the Secret was deleted and is about to be
// written again from what dualca last knew of it.
func (g gatewayRead) restoring() bool { return g.secret == nil && g.state.Exists }

// readGateway reads the record (from the API server when fresh) and the
// gateway Secret through from; a cached copy of the gateway at another
// version than the one dualca knows is read again from the API server.
func (s *gatewayStore) readGateway(ctx context.Context, from client.Reader) (gatewayRead, error) {
	rec, err := s.record.read(ctx, from == s.api)
	if err != nil {
		return gatewayRead{}, err
	}
	obj := &corev1.Secret{}
	err = from.Get(ctx, s.gatewayKey, obj)
	if from != s.api && (client.IgnoreNotFound(err) != nil || obj.ResourceVersion != s.gatewayRV) {
		obj = &corev1.Secret{}
		err = s.api.Get(ctx, s.gatewayKey, obj)
	}
	switch {
	case apierrors.IsNotFound(err):
		s.gatewayRV, obj = "", nil
	case err != nil:
		return gatewayRead{}, fmt.Errorf("reading gateway secret %s: %w", s.gatewayKey, err)
	default:
		s.gatewayRV = obj.ResourceVersion
	}
	read := gatewayRead{secret: obj}
	read.tampered, read.meant = examine(obj, rec)
	switch {
	case rec != nil:
		read.state = gatewayOfRecord(rec, obj, s.record.known(rec), s.parsed)
	case obj != nil:
		read.state = adoptedGateway(obj, s.parsed)
	}
	return read, nil
}

// current is the gateway Secret as the API server has it now, or nil.
func (s *gatewayStore) current(ctx context.Context) *corev1.Secret {
	obj := &corev1.Secret{}
	if err := s.api.Get(ctx, s.gatewayKey, obj); err != nil {
		return nil
	}
	return obj
}

// adoptedGateway is a gateway Secret found without dualca's record (a
// first start beside an existing Secret, or an upgrade from a version that
// kept none): its content is adopted, its annotations are not trusted, and
// no root but the current one is known to come from the root Secret, so
// the decision keeps only what that root vouches for (fail closed).
func adoptedGateway(s *corev1.Secret, parsed *bundle.Parsed) bundle.Gateway {
	return bundle.Gateway{
		Exists:  true,
		CertPEM: s.Data[corev1.TLSCertKey],
		KeyPEM:  s.Data[corev1.TLSPrivateKeyKey],
		CAPEM:   s.Data[caKey],
		Parsed:  parsed,
	}
}

// gatewayOf is the gateway Secret s as the decisions would read it, its
// annotations included (for `dualca status`).
func gatewayOf(s *corev1.Secret, parsed *bundle.Parsed) bundle.Gateway {
	gw := adoptedGateway(s, parsed)
	gw.State = bundle.ParseState(s.Annotations)
	return gw
}

// written is what a write did.
type written struct {
	// secret is the gateway Secret as it is now; nil after a failed write.
	secret *corev1.Secret
	// wrote: the Secret was created or updated.
	wrote bool
	// restored: it was created again after it had been deleted.
	restored bool
	// tampered names what was changed outside dualca and written again
	// from the record; "" when nothing was.
	tampered string
	// deferred is how long a change of the client progress alone waits
	// before it is written; 0 when nothing waits.
	deferred time.Duration
}

// write records d in dualca's record, then creates or updates the gateway
// Secret to hold it, and does nothing when both already do. Updates carry
// the resourceVersion that was read, so a concurrent writer makes this fail
// with a conflict and the caller re-reads and decides again instead of
// overwriting.
func (s *gatewayStore) write(ctx context.Context, read gatewayRead, d bundle.Decision, root *bundle.Root) (written, error) {
	desired := s.desired(read.secret, d)
	if read.secret != nil && progressOnly(read.secret, desired) {
		if wait := progressEvery - s.clock.Since(s.lastWrite); wait > 0 {
			return written{secret: read.secret, deferred: wait}, nil
		}
	}
	if err := s.record.write(ctx, desired, read.meant, d, root); err != nil {
		return written{}, err
	}
	if read.secret == nil {
		if err := s.writer.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Someone created it between our read and our write: decide again.
				return written{}, apierrors.NewConflict(corev1.Resource("secrets"), desired.Name, err)
			}
			return written{}, fmt.Errorf("creating gateway secret %s: %w", s.gatewayKey, err)
		}
		s.wrote(desired)
		return written{secret: desired, wrote: true, restored: read.restoring()}, nil
	}
	if unchanged(read.secret, desired) {
		return written{secret: read.secret}, nil
	}
	if err := s.writer.Update(ctx, desired); err != nil {
		if apierrors.IsConflict(err) {
			return written{}, err
		}
		return written{}, fmt.Errorf("updating gateway secret %s: %w", s.gatewayKey, err)
	}
	s.wrote(desired)
	return written{secret: desired, wrote: true, tampered: read.tampered}, nil
}

// desired is the gateway Secret holding d, built on current when it exists.
func (s *gatewayStore) desired(current *corev1.Secret, d bundle.Decision) *corev1.Secret {
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.gatewayKey.Namespace, Name: s.gatewayKey.Name},
		Type:       corev1.SecretTypeTLS,
	}
	if current != nil {
		desired = current.DeepCopy()
	}
	desired.Annotations = mergeAnnotations(desired.Annotations, d.State.Annotations())
	if desired.Data == nil {
		desired.Data = map[string][]byte{}
	}
	desired.Data[corev1.TLSCertKey] = d.CertPEM
	desired.Data[corev1.TLSPrivateKeyKey] = d.KeyPEM
	desired.Data[caKey] = d.CAPEM
	return desired
}

// wrote remembers the Secret just written.
func (s *gatewayStore) wrote(obj *corev1.Secret) {
	s.lastWrite, s.gatewayRV = s.clock.Now(), obj.ResourceVersion
	rv := obj.ResourceVersion
	s.ownVersion.Store(&rv)
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

// progressOnly reports whether b differs from a in the client progress
// annotation alone.
func progressOnly(a, b *corev1.Secret) bool {
	withoutProgress := func(s *corev1.Secret) *corev1.Secret {
		c := s.DeepCopy()
		delete(c.Annotations, bundle.AnnotationClients)
		return c
	}
	return a.Annotations[bundle.AnnotationClients] != b.Annotations[bundle.AnnotationClients] &&
		unchanged(withoutProgress(a), withoutProgress(b))
}

func unchanged(a, b *corev1.Secret) bool {
	if !maps.Equal(a.Annotations, b.Annotations) || len(a.Data) != len(b.Data) {
		return false
	}
	for k, v := range a.Data {
		if w, ok := b.Data[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// caKey is the trust-bundle key that cert-manager and Istio both use.
const caKey = "ca.crt"
