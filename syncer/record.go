package syncer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
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
// The record is written before the gateway. A crash between the two, or
// gateway writes refused for a while (a policy, an outage) while the
// decisions go on, leave the record ahead of the gateway: the record keeps
// the digest of the last gateway dualca found as it meant it
// (previousDigest), so that gateway is brought up to date without a false
// alarm.

const (
	// recordRoots is the record's key for the roots read from the root
	// Secret (bundle.Gateway.Known), as PEM.
	recordRoots = "roots.pem"
	// annotationDigest is the digest of the gateway Secret the record
	// describes; annotationPreviousDigest that of the one it replaced.
	annotationDigest         = bundle.AnnotationPrefix + "gateway-digest"
	annotationPreviousDigest = bundle.AnnotationPrefix + "previous-gateway-digest"
	// annotationKeyDigest replaces tls.key in a record whose tls.key is a
	// root's own (the legacy strategy's plain copy): the record never holds
	// a root's key. The key is taken back from the gateway Secret only if
	// it is still the one dualca wrote there.
	annotationKeyDigest = bundle.AnnotationPrefix + "tls-key-digest"
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
	// rootsPEM and roots are roots.pem as last parsed: the same
	// certificates, at the same addresses, at every reconcile until it
	// changes, so the decisions' caches see them once.
	rootsPEM []byte
	roots    []*x509.Certificate
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

// read returns the record, from the API server when fresh or never read.
func (r *record) read(ctx context.Context, fresh bool) (*corev1.Secret, error) {
	if r.loaded && !fresh {
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

// write makes the record describe gateway, the Secret about to be written
// for d in place of the one found; meant is the digest of the one found
// when dualca meant it (examine), else "". Nothing when the record
// describes gateway already.
func (r *record) write(ctx context.Context, gateway *corev1.Secret, meant string, d bundle.Decision, root *bundle.Root) error {
	desired := r.desired(gateway, meant, d, root)
	if r.last != nil && maps.Equal(r.last.Annotations, desired.Annotations) && dataEqual(r.last.Data, desired.Data) {
		return nil
	}
	var err error
	if r.last == nil {
		err = r.writer.Create(ctx, desired)
		if apierrors.IsAlreadyExists(err) {
			r.loaded = false // someone created it meanwhile: read it again
			return apierrors.NewConflict(corev1.Resource("secrets"), desired.Name, err)
		}
	} else {
		err = r.writer.Update(ctx, desired)
	}
	if err != nil {
		if apierrors.IsConflict(err) {
			r.loaded = false
			return err
		}
		return fmt.Errorf("writing dualca's record %s: %w", r.key, err)
	}
	r.last = desired
	return nil
}

// desired is the record describing gateway. Its previous digest is meant,
// the digest of the gateway found when dualca meant it (the record's, or
// the one before), else the record's own: the gateway a failed write
// leaves in place is never taken for tampering, however many decisions
// pass before a write succeeds.
func (r *record) desired(gateway *corev1.Secret, meant string, d bundle.Decision, root *bundle.Root) *corev1.Secret {
	desired := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.key.Namespace, Name: r.key.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "dualca"}},
		Type: corev1.SecretTypeOpaque,
	}
	previous := ""
	if r.last != nil {
		desired = r.last.DeepCopy()
		previous = r.last.Annotations[annotationDigest]
		if meant != "" {
			previous = meant
		}
	}
	desired.Annotations = d.State.Annotations()
	digest := gatewayDigest(gateway)
	desired.Annotations[annotationDigest] = digest
	switch {
	case previous != "" && previous != digest:
		desired.Annotations[annotationPreviousDigest] = previous
	case r.last != nil && r.last.Annotations[annotationPreviousDigest] != "":
		desired.Annotations[annotationPreviousDigest] = r.last.Annotations[annotationPreviousDigest]
	}
	desired.Data = map[string][]byte{
		corev1.TLSCertKey: d.CertPEM,
		caKey:             d.CAPEM,
		recordRoots:       encodeCerts(d.Known),
	}
	if bytes.Equal(d.KeyPEM, root.KeyPEM) {
		desired.Annotations[annotationKeyDigest] = keyDigest(d.KeyPEM)
	} else {
		desired.Data[corev1.TLSPrivateKeyKey] = d.KeyPEM
	}
	return desired
}

// gatewayOfRecord is what the decisions start from: the gateway as the
// record describes it, and the roots read from the root Secret. Where the
// record holds a digest for tls.key (a root's key), the key is the gateway
// Secret's if it has that digest, else there is none.
func gatewayOfRecord(rec, gateway *corev1.Secret, known []*x509.Certificate, parsed *bundle.Parsed) bundle.Gateway {
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
		if gateway != nil && keyDigest(gateway.Data[corev1.TLSPrivateKeyKey]) == digest {
			gw.KeyPEM = gateway.Data[corev1.TLSPrivateKeyKey]
		}
	}
	return gw
}

// examine compares the gateway Secret found with the record. tampered is
// "" when it is the one the record describes, or the one it replaced (a
// write of the gateway that did not follow the record's); else the parts
// that differ, named, never shown. meant is the digest of a gateway found
// that is not tampered with, for the record's next write; "" when none was
// found. The gateway is digested once, here.
func examine(gateway, rec *corev1.Secret) (tampered, meant string) {
	if gateway == nil {
		return "", ""
	}
	digest := gatewayDigest(gateway)
	if rec == nil || digest == rec.Annotations[annotationDigest] || digest == rec.Annotations[annotationPreviousDigest] {
		return "", digest
	}
	var changed []string
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, caKey} {
		want, ok := rec.Data[k]
		switch {
		case k == corev1.TLSPrivateKeyKey && !ok: // a root's key: never in the record, its digest is
			if keyDigest(gateway.Data[k]) != rec.Annotations[annotationKeyDigest] {
				changed = append(changed, k)
			}
		case !bytes.Equal(gateway.Data[k], want):
			changed = append(changed, k)
		}
	}
	ours := dualcaAnnotations(gateway.Annotations)
	for k, v := range dualcaAnnotations(rec.Annotations) {
		if k != annotationDigest && k != annotationPreviousDigest && k != annotationKeyDigest && ours[k] != v {
			changed = append(changed, k)
		}
	}
	for k := range ours {
		if _, ok := rec.Annotations[k]; !ok {
			changed = append(changed, k)
		}
	}
	if gateway.Type != corev1.SecretTypeTLS {
		changed = append(changed, "type")
	}
	slices.Sort(changed)
	if len(changed) == 0 {
		changed = []string{"content"}
	}
	return strings.Join(slices.Compact(changed), ", "), ""
}

// gatewayDigest is the digest of what dualca owns in the gateway Secret:
// its type, tls.crt, tls.key, ca.crt and the dualca.io/ annotations.
func gatewayDigest(s *corev1.Secret) string {
	h := sha256.New()
	field := func(k string, v []byte) {
		_, _ = fmt.Fprintf(h, "%s %d\n", k, len(v))
		h.Write(v)
	}
	field("type", []byte(s.Type))
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, caKey} {
		field("data:"+k, s.Data[k])
	}
	ours := dualcaAnnotations(s.Annotations)
	for _, k := range slices.Sorted(maps.Keys(ours)) {
		field("annotation:"+k, []byte(ours[k]))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func keyDigest(key []byte) string {
	sum := sha256.Sum256(key)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func dualcaAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if strings.HasPrefix(k, bundle.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

func dataEqual(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
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
