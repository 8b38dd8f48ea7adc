package syncer

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// The record: dualca's own Secret (--state-secret), which only its account
// writes. It holds the gateway Secret as dualca last decided it (tls.crt,
// tls.key and ca.crt, its state as annotations) and the roots dualca read
// from the root Secret (roots.pem). Every decision starts from it, never
// from the gateway Secret: whoever may patch the gateway (an operator's
// Role, a gateway controller) can change what the gateway serves for as
// long as it takes dualca to notice, but not what dualca trusts, signs or
// remembers. A gateway that differs from the record is written again from
// it, with a GatewayTampered Warning.
//
// The record is written once the targets' writes have returned: a new
// root reaches the gateway one request after dualca read it, not two, and
// the gateway's request does not share the API server and etcd with the
// record's (sent together, as until 93ab177, the gateway's watch event
// came later: see gatewayStore.write). A crash between the writes, or a
// record write refused for a while, leave a target
// ahead of the record, holding a decision made from it. dualca tells such a target
// from a writer's by its seal: each target it writes carries an HMAC, under
// a key only the record holds (seal.key), of what it owns there and of the
// record version the decision started from. A target sealed for the
// record as it is now is dualca's own write, late for its record, and no
// alarm; a sealed target written back once the record has moved on is a
// replay, and tampered. Nothing of a target is believed because of its
// seal: the decisions start from the record all the same, so a target
// ahead of it is written again from it (a new root's propagation delay
// then counts from that write, never from the lost one).
//
// Targets that a failed write left behind the record (a target refused,
// the record written after it all the same) are told apart too:
// the record keeps the digest of the last gateway dualca found as it meant
// it (previousDigest), so that gateway is brought up to date without a
// false alarm.

const (
	// recordRoots is the record's key for the roots read from the root
	// Secret (bundle.Gateway.Known), as PEM.
	recordRoots = "roots.pem"
	// recordSealKey is the record's key for the key that seals the targets
	// (see sealOf): random, made once, and kept by every record written.
	recordSealKey = "seal.key"
	// annotationSeal is a target's seal (see sealOf); it is no part of
	// what dualca owns there (target.digest), since it depends on the
	// record's version.
	annotationSeal = AnnotationSeal
	// annotationDigest is the digest of the gateway Secret the record
	// describes; annotationPreviousDigest that of the one it replaced.
	annotationDigest         = bundle.AnnotationPrefix + "gateway-digest"
	annotationPreviousDigest = bundle.AnnotationPrefix + "previous-gateway-digest"
	// annotationKeyDigest replaces tls.key in a record whose tls.key is a
	// root's own (the legacy strategy's plain copy): the record never holds
	// a root's key. The key is taken back from the gateway Secret only if
	// it is still the one dualca wrote there.
	annotationKeyDigest = bundle.AnnotationPrefix + "tls-key-digest"
	// annotationTargetDigests and annotationPreviousTargetDigests are the
	// same for the targets but the primary, as "id=digest" pairs.
	annotationTargetDigests         = bundle.AnnotationPrefix + "target-digests"
	annotationPreviousTargetDigests = bundle.AnnotationPrefix + "previous-target-digests"
)

// record reads and writes dualca's record. It keeps the record as last
// read or written: only dualca writes it, so a reconcile between polls
// needs no request for it.
type record struct {
	key    types.NamespacedName
	api    client.Reader
	writer client.Writer
	// last is the record as last read or written; nil when there is none
	// (or it was never read: loaded).
	last   *corev1.Secret
	loaded bool
	// rootsPEM and roots are roots.pem as last parsed or written: the
	// same certificates, at the same addresses, at every reconcile until
	// it changes, so the decisions' caches see them once, and a record
	// that remembers the same roots encodes none of them again.
	rootsPEM []byte
	roots    []*x509.Certificate
	// made is the seal key made for a record that has none yet (a first
	// record, or one written by an earlier version), until a record
	// written with it is read back.
	made []byte
}

// sealKey is the key that seals the targets: the record's, or one made
// for the next record written when it has none.
func (r *record) sealKey() []byte {
	if r.last != nil && len(r.last.Data[recordSealKey]) == sealKeyLen {
		return r.last.Data[recordSealKey]
	}
	if r.made == nil {
		r.made = make([]byte, sealKeyLen)
		_, _ = rand.Read(r.made) // crypto/rand.Read never fails (it panics first)
	}
	return r.made
}

// version is the resourceVersion of the record as last read or written,
// the decisions' starting point; "" when there is none.
func (r *record) version() string {
	if r.last == nil {
		return ""
	}
	return r.last.ResourceVersion
}

// AnnotationSeal is the annotation of the seal dualca puts on each target
// it writes (see sealOf): no part of the rotation's state.
const AnnotationSeal = bundle.AnnotationPrefix + "seal"

const sealKeyLen = 32

// sealOf is the seal of target id holding digest, written by a decision
// that started from the record's version: an HMAC-SHA256 under the
// record's key. Only dualca's account reads the record, so no writer of a
// target can make one; and a target's seal is good only while the record
// stays at that version.
func sealOf(key []byte, version, id, digest string) string {
	mac := hmac.New(sha256.New, key)
	_, _ = fmt.Fprintf(mac, "%d:%s %d:%s %d:%s", len(version), version, len(id), id, len(digest), digest)
	return "hmac-sha256:" + hex.EncodeToString(mac.Sum(nil))
}

// sealedFor reports whether obj, a target t whose digest is digest,
// carries the seal of a decision started from rec as it is now.
func sealedFor(t *targetState, obj client.Object, digest string, rec *corev1.Secret, key []byte) bool {
	got := obj.GetAnnotations()[annotationSeal]
	return got != "" && rec != nil && hmac.Equal([]byte(got), []byte(sealOf(key, rec.ResourceVersion, t.id(), digest)))
}

// known returns the roots rec remembers as read from the root Secret,
// parsed once per content.
func (r *record) known(rec *corev1.Secret) []*x509.Certificate {
	data := rec.Data[recordRoots]
	if !bytes.Equal(data, r.rootsPEM) || r.roots == nil {
		r.rootsPEM, r.roots = bytes.Clone(data), parseCerts(data)
	}
	return r.roots
}

// read returns the record, from the API server when again or never read:
// only dualca writes it (one leader at a time), so its own writes tell it
// what the record holds, and a write that finds the record changed or
// gone fails and makes the next attempt read it again.
func (r *record) read(ctx context.Context, again bool) (*corev1.Secret, error) {
	if r.loaded && !again {
		return r.last, nil
	}
	obj := &corev1.Secret{}
	switch err := r.api.Get(ctx, r.key, obj); {
	case apierrors.IsNotFound(err):
		obj = nil
	case err != nil:
		return nil, fmt.Errorf("reading dualca's record %s: %w", r.key, err)
	}
	r.last, r.loaded = obj, true
	return obj, nil
}

// write makes the record describe the targets about to be written for d
// in place of those found, whose digests are digests (by target); meant
// are the digests of the targets found that dualca meant (examine).
// Nothing when the record describes them already.
func (r *record) write(ctx context.Context, ts []*targetState, digests, meant map[string]string, d bundle.Decision, root *bundle.Root) error {
	rec := r.desired(ts, digests, meant, d, root)
	if r.last != nil && maps.Equal(r.last.Annotations, rec.Annotations) && dataEqual(r.last.Data, rec.Data) {
		return nil
	}
	var err error
	if r.last == nil {
		err = r.writer.Create(ctx, rec)
		if apierrors.IsAlreadyExists(err) {
			r.loaded = false // someone created it meanwhile: read it again
			return apierrors.NewConflict(corev1.Resource("secrets"), rec.Name, err)
		}
	} else {
		err = r.writer.Update(ctx, rec)
		if apierrors.IsNotFound(err) {
			r.loaded = false // deleted since dualca read or wrote it: read it again
			return apierrors.NewConflict(corev1.Resource("secrets"), rec.Name, err)
		}
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			r.loaded = false
			return err
		}
		return fmt.Errorf("writing dualca's record %s: %w", r.key, err)
	}
	r.last = rec
	r.wroteRoots(rec.Data[recordRoots], d.Known)
	return nil
}

// wroteRoots remembers that roots.pem was just written as data, the
// encoding of certs, so that the next reconcile takes certs for it
// instead of parsing it again. It takes them only where parsing data
// would give them back (ParseCertificates refuses more than MaxPEMBytes;
// parseCerts makes nothing of an empty roots.pem): a record read after a
// restart knows exactly what this one does.
func (r *record) wroteRoots(data []byte, certs []*x509.Certificate) {
	if len(data) == 0 || len(data) > bundle.MaxPEMBytes || slices.Contains(certs, nil) {
		return
	}
	r.rootsPEM, r.roots = data, slices.Clone(certs)
}

// encodeRoots is roots.pem holding certs: the bytes remembered when they
// are the roots remembered, the same certificates in the same order.
func (r *record) encodeRoots(certs []*x509.Certificate) []byte {
	if len(certs) > 0 && len(r.rootsPEM) > 0 && slices.Equal(certs, r.roots) {
		return r.rootsPEM
	}
	return bundle.Encode(certs)
}

// desired is the record describing the targets of digests. Each target's
// previous digest is its digest as found when dualca meant it (the
// record's, or the one before), else the record's own: a target a failed
// write leaves in place is never taken for tampering, however many
// decisions pass before a write succeeds.
func (r *record) desired(ts []*targetState, digests, meant map[string]string, d bundle.Decision, root *bundle.Root) *corev1.Secret {
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "dualca"}},
		Type: corev1.SecretTypeOpaque,
	}
	var last, lastPrevious map[string]string
	if r.last != nil {
		shallow := *r.last
		shallow.Data = nil // replaced below: not worth a copy
		rec = shallow.DeepCopy()
		last, lastPrevious = recordDigests(r.last, ts, false), recordDigests(r.last, ts, true)
	}
	rec.Annotations = d.State.Annotations()
	previous := map[string]string{}
	for _, t := range ts {
		id := t.id()
		digest := digests[id]
		before := last[id]
		if m := meant[id]; r.last != nil && m != "" {
			before = m
		}
		switch {
		case before != "" && before != digest:
			previous[id] = before
		case lastPrevious[id] != "":
			previous[id] = lastPrevious[id]
		}
	}
	setDigests(rec.Annotations, ts, digests, false)
	setDigests(rec.Annotations, ts, previous, true)
	rec.Data = map[string][]byte{
		corev1.TLSCertKey: d.CertPEM,
		caKey:             d.CAPEM,
		recordRoots:       r.encodeRoots(d.Known),
		recordSealKey:     r.sealKey(),
	}
	if bytes.Equal(d.KeyPEM, root.KeyPEM) {
		rec.Annotations[annotationKeyDigest] = keyDigest(d.KeyPEM)
	} else {
		rec.Data[corev1.TLSPrivateKeyKey] = d.KeyPEM
	}
	return rec
}

// recordDigests are the digests of the targets a record describes (or,
// previous, of those they replaced), by target id. The primary's is
// annotationDigest, where earlier versions kept the gateway Secret's; the
// others' are annotationTargetDigests, "id=digest" joined by commas.
func recordDigests(rec *corev1.Secret, ts []*targetState, previous bool) map[string]string {
	primary, others := annotationDigest, annotationTargetDigests
	if previous {
		primary, others = annotationPreviousDigest, annotationPreviousTargetDigests
	}
	out := map[string]string{}
	if rec == nil {
		return out
	}
	if len(ts) > 0 && rec.Annotations[primary] != "" {
		out[ts[0].id()] = rec.Annotations[primary]
	}
	for _, pair := range strings.Split(rec.Annotations[others], ",") {
		if id, digest, ok := strings.Cut(pair, "="); ok {
			out[id] = digest
		}
	}
	return out
}

// setDigests is the inverse of recordDigests.
func setDigests(a map[string]string, ts []*targetState, digests map[string]string, previous bool) {
	primary, others := annotationDigest, annotationTargetDigests
	if previous {
		primary, others = annotationPreviousDigest, annotationPreviousTargetDigests
	}
	var pairs []string
	for i, t := range ts {
		d := digests[t.id()]
		switch {
		case d == "":
		case i == 0:
			a[primary] = d
		default:
			pairs = append(pairs, t.id()+"="+d)
		}
	}
	if len(pairs) > 0 {
		a[others] = strings.Join(pairs, ",")
	}
}

// gatewayOfRecord is what the decisions start from: the gateway as the
// record describes it, and the roots read from the root Secret. Where the
// record holds a digest for tls.key (a root's key), the key is the gateway
// Secret's if it has that digest, else there is none.
func gatewayOfRecord(rec *corev1.Secret, credential client.Object, known []*x509.Certificate, parsed *bundle.Parsed) bundle.Gateway {
	gw := bundle.Gateway{
		Exists:  true,
		CertPEM: rec.Data[corev1.TLSCertKey],
		KeyPEM:  rec.Data[corev1.TLSPrivateKeyKey],
		CAPEM:   rec.Data[caKey],
		State:   bundle.ParseState(rec.Annotations),
		Known:   known,
		Parsed:  parsed,
	}
	if digest := rec.Annotations[annotationKeyDigest]; digest != "" {
		gw.KeyPEM = nil
		if key := dataOf(credential)[corev1.TLSPrivateKeyKey]; credential != nil && keyDigest(key) == digest {
			gw.KeyPEM = key
		}
	}
	return gw
}

// examine compares the targets found with the record. tampered is "" when
// each is the one the record describes, or the one it replaced (a write
// that did not follow the record's) still holding what dualca last left
// it holding: left holds those digests by target, none where dualca knows
// none (after a restart). The one replaced, written back by someone else
// after dualca had moved it on, is a replay, and tampered; others' writes
// of what dualca does not own (a conflict storm of annotations on a
// target whose update keeps failing) change nothing of that. Else
// tampered names the parts that differ, never showing them. meant are the
// digests of the targets found that are not tampered with, by target, for
// the record's next write; seen those of every target found. A target
// sealed for rec as it is (key seals them, see sealOf) is dualca's write
// whose record did not follow, and meant. Each target is digested once,
// here.
func examine(ts []*targetState, found []client.Object, left map[string]string, rec *corev1.Secret, key []byte) (tampered string, meant, seen map[string]string) {
	meant, seen = map[string]string{}, map[string]string{}
	digests, previous := recordDigests(rec, ts, false), recordDigests(rec, ts, true)
	var changed []string
	for i, t := range ts {
		if found[i] == nil {
			continue
		}
		digest := t.digest(found[i])
		seen[t.id()] = digest
		untouched := left[t.id()] == "" || left[t.id()] == digest
		if rec == nil || digest == digests[t.id()] || digest == previous[t.id()] && untouched || sealedFor(t, found[i], digest, rec, key) {
			meant[t.id()] = digest
			continue
		}
		c := content{certPEM: rec.Data[corev1.TLSCertKey], keyPEM: rec.Data[corev1.TLSPrivateKeyKey],
			caPEM: rec.Data[caKey], annotations: recordState(rec)}
		diff := t.differences(found[i], c, rec.Annotations[annotationKeyDigest])
		if len(diff) == 0 {
			diff = []string{"content"}
		}
		for _, d := range diff {
			changed = append(changed, t.label(d))
		}
	}
	slices.Sort(changed)
	return strings.Join(slices.Compact(changed), ", "), meant, seen
}

// recordState is the dualca annotations of the record that the primary
// target carries too: all but the record's own.
func recordState(rec *corev1.Secret) map[string]string {
	out := dualcaAnnotations(rec.Annotations)
	for _, k := range []string{annotationDigest, annotationPreviousDigest, annotationKeyDigest,
		annotationTargetDigests, annotationPreviousTargetDigests} {
		delete(out, k)
	}
	return out
}

func keyDigest(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// dualcaAnnotations are the dualca.io/ annotations of a, but the seal.
func dualcaAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if strings.HasPrefix(k, bundle.AnnotationPrefix) && k != annotationSeal {
			out[k] = v
		}
	}
	return out
}

func dataEqual(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

// parseCerts reads the record's roots; a record damaged there (only
// dualca's account and cluster administrators can write it) knows none:
// the decision then trusts the current root alone.
func parseCerts(data []byte) []*x509.Certificate {
	if len(data) == 0 {
		return nil
	}
	certs, err := bundle.ParseCertificates(recordRoots, data)
	if err != nil {
		return nil
	}
	return certs
}
