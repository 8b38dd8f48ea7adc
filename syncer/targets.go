package syncer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// Targets: the objects a rotation is written to.
//
// One dualca keeps one rotation, in its record, and writes it to the
// objects its gateways read, each in the shape its gateway wants:
//
//   - the combined form (Istio's credentialName, the default): one
//     kubernetes.io/tls Secret holding tls.crt, tls.key and ca.crt;
//   - the split form (Istio's other one): tls.crt and tls.key in the
//     gateway Secret, ca.crt in a Secret named after it with "-cacert";
//   - bundle targets: a Secret or ConfigMap holding the trust bundle alone
//     under a key of the operator's choice (ca.crt by default), for a
//     gateway that serves another server certificate (an ACME one, say)
//     and checks its clients against dualca's roots: the Gateway API's
//     frontend validation, Envoy Gateway, NGINX Gateway Fabric, Traefik's
//     TLSOption, F5 NGINX Ingress (a Secret of type nginx.org/ca).
//
// Every target holds what the record holds at that moment, so each is a
// projection of the record and the invariants hold for each. dualca owns
// the keys its gateway reads there: for Istio, the generic keys that
// Istio reads before tls.* and ca.crt (cert, key, cacert) would shadow
// dualca's and are removed as tampering; a ca.crl is flagged, not removed
// (revocation is the operator's); a "<name>-cacert" Secret beside a
// combined gateway Secret, which Istio prefers for the bundle, is flagged.

// The forms of the gateway Secret.
const (
	FormCombined = "combined"
	FormSplit    = "split"
)

// The kinds of object a bundle target may be.
const (
	KindSecret    = "secret"
	KindConfigMap = "configmap"
)

// cacertSuffix names the Secret that holds the bundle in Istio's split form.
const cacertSuffix = "-cacert"

// istioShadowKeys are the keys Istio reads before tls.crt, tls.key and
// ca.crt: found in an Istio target, they would be served instead of
// dualca's, so they are removed.
var istioShadowKeys = []string{"cert", "key", "cacert"}

// istioCRLKey is the revocation list Istio reads next to the bundle.
const istioCRLKey = "ca.crl"

// BundleTarget names an object that holds the trust bundle alone.
type BundleTarget struct {
	// Kind is KindSecret or KindConfigMap.
	Kind string
	Key  types.NamespacedName
}

// String is the form of the --bundle-target flag: KIND:NAMESPACE/NAME.
func (b BundleTarget) String() string { return b.Kind + ":" + b.Key.String() }

// target is one object dualca writes, and what of the rotation it holds.
type target struct {
	kind string
	key  types.NamespacedName
	// credential: it holds tls.crt and tls.key.
	credential bool
	// bundleKey is where it holds the trust bundle; "" when it holds none.
	bundleKey string
	// secretType is the type of a Secret target.
	secretType corev1.SecretType
	// primary: it carries dualca's state annotations and the events.
	primary bool
	// istio: Istio reads it, so its shadowing keys are dualca's too.
	istio bool
	// removed are keys dualca owns by removing them (see istioShadowKeys):
	// only Istio targets have them, which are Secrets.
	removed []string
}

// id names the target in messages, metrics and the record.
func (t target) id() string { return t.kind + "/" + t.key.String() }

// newObject is an empty object of the target's kind, to read into.
func (t target) newObject() client.Object {
	if t.kind == KindConfigMap {
		return &corev1.ConfigMap{}
	}
	return &corev1.Secret{}
}

// targets are the objects o makes dualca write, the primary first: the
// gateway Secret in its form, then the bundle targets.
func (o Options) targets() []target {
	var ts []target
	if o.GatewaySecret.Name != "" {
		gw := target{kind: KindSecret, key: o.GatewaySecret, credential: true, secretType: corev1.SecretTypeTLS,
			istio: true, removed: istioShadowKeys}
		switch o.GatewayForm {
		case FormSplit:
			gw.removed = append(slices.Clone(istioShadowKeys), caKey)
			ts = append(ts, gw, target{kind: KindSecret, key: cacertKey(o.GatewaySecret), bundleKey: caKey,
				secretType: corev1.SecretTypeOpaque, istio: true, removed: istioShadowKeys})
		default:
			gw.bundleKey = caKey
			ts = append(ts, gw)
		}
	}
	key, typ := o.BundleKey, o.BundleSecretType
	if key == "" {
		key = caKey
	}
	if typ == "" {
		typ = corev1.SecretTypeOpaque
	}
	for _, b := range o.BundleTargets {
		ts = append(ts, target{kind: b.Kind, key: b.Key, bundleKey: key, secretType: typ})
	}
	if len(ts) > 0 {
		ts[0].primary = true
	}
	return ts
}

// shadowKey is the Secret that would shadow a combined gateway Secret's
// bundle in Istio; the zero key when the form has none to fear.
func (o Options) shadowKey() types.NamespacedName {
	if o.GatewaySecret.Name == "" || o.GatewayForm == FormSplit {
		return types.NamespacedName{}
	}
	return cacertKey(o.GatewaySecret)
}

func cacertKey(gw types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name + cacertSuffix}
}

// Anchor is the object that names the rotation: the gateway Secret, or
// with none, the first bundle target. The record, the status ConfigMap
// and the Lease are named after it.
func (o Options) Anchor() types.NamespacedName {
	if o.GatewaySecret.Name != "" || len(o.BundleTargets) == 0 {
		return o.GatewaySecret
	}
	return o.BundleTargets[0].Key
}

// content is what the record holds for the targets: the server
// credential, the bundle and, for the primary, the state annotations.
type content struct {
	certPEM, keyPEM, caPEM []byte
	annotations            map[string]string
}

// contentOf is what d makes the targets hold.
func contentOf(d bundle.Decision) content {
	return content{certPEM: d.CertPEM, keyPEM: d.KeyPEM, caPEM: d.CAPEM, annotations: d.State.Annotations()}
}

// owned is what t holds of c, by key.
func (t target) owned(c content) map[string][]byte {
	out := map[string][]byte{}
	if t.credential {
		out[corev1.TLSCertKey], out[corev1.TLSPrivateKeyKey] = c.certPEM, c.keyPEM
	}
	if t.bundleKey != "" {
		out[t.bundleKey] = c.caPEM
	}
	return out
}

// desired is obj (nil when absent) made to hold c: the keys t owns set,
// the shadowing keys removed, dualca's annotations replaced on the
// primary; everything else of obj is kept.
func (t target) desired(obj client.Object, c content) client.Object {
	var out client.Object
	switch {
	case obj != nil:
		out = obj.DeepCopyObject().(client.Object)
	case t.kind == KindConfigMap:
		out = &corev1.ConfigMap{}
	default:
		out = &corev1.Secret{Type: t.secretType}
	}
	out.SetNamespace(t.key.Namespace)
	out.SetName(t.key.Name)
	if t.primary {
		out.SetAnnotations(mergeAnnotations(out.GetAnnotations(), c.annotations))
	}
	owned := t.owned(c)
	switch o := out.(type) {
	case *corev1.ConfigMap:
		// A ConfigMap holds a key in data or in binaryData, never both, and
		// a gateway reads either: the owned keys go to data, and out of
		// binaryData, where someone else may have put them.
		if o.Data == nil {
			o.Data = map[string]string{}
		}
		for k, v := range owned {
			o.Data[k] = string(v)
			delete(o.BinaryData, k)
		}
	case *corev1.Secret:
		if o.Data == nil {
			o.Data = map[string][]byte{}
		}
		maps.Copy(o.Data, owned)
		for _, k := range t.removed {
			delete(o.Data, k)
		}
	}
	return out
}

// dataOf is an object's data, whatever its kind.
func dataOf(obj client.Object) map[string][]byte {
	switch o := obj.(type) {
	case *corev1.Secret:
		return o.Data
	case *corev1.ConfigMap:
		out := make(map[string][]byte, len(o.Data)+len(o.BinaryData))
		for k, v := range o.Data {
			out[k] = []byte(v)
		}
		maps.Copy(out, o.BinaryData)
		return out
	}
	return nil
}

// typeOf is a Secret's type, "" for another kind.
func typeOf(obj client.Object) corev1.SecretType {
	if s, ok := obj.(*corev1.Secret); ok {
		return s.Type
	}
	return ""
}

// digest is the digest of what dualca owns in obj as target t: its type,
// the keys t owns and removes, and on the primary the dualca.io/
// annotations. For the combined gateway Secret it is the digest earlier
// versions recorded, so an upgrade takes nothing for tampering.
func (t target) digest(obj client.Object) string {
	if obj == nil {
		return ""
	}
	h := sha256.New()
	field := func(k string, v []byte) {
		_, _ = fmt.Fprintf(h, "%s %d\n", k, len(v))
		h.Write(v)
	}
	field("type", []byte(typeOf(obj)))
	data := dataOf(obj)
	for _, k := range t.ownedKeys() {
		field("data:"+k, data[k])
	}
	for _, k := range t.removed {
		if v, ok := data[k]; ok {
			field("foreign:"+k, v)
		}
	}
	if t.primary {
		ours := dualcaAnnotations(obj.GetAnnotations())
		for _, k := range slices.Sorted(maps.Keys(ours)) {
			field("annotation:"+k, []byte(ours[k]))
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// ownedKeys are the keys t holds, in the order they are digested.
func (t target) ownedKeys() []string {
	var keys []string
	if t.credential {
		keys = append(keys, corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	if t.bundleKey != "" {
		keys = append(keys, t.bundleKey)
	}
	return keys
}

// differences names what of obj differs from c as t holds it: keys,
// annotations, the type, a foreign key; "" when nothing does. keyDigest,
// when set, stands for tls.key (a root's key, never in the record).
func (t target) differences(obj client.Object, c content, keyDigestWant string) []string {
	var changed []string
	data, want := dataOf(obj), t.owned(c)
	for _, k := range t.ownedKeys() {
		if k == corev1.TLSPrivateKeyKey && keyDigestWant != "" {
			if keyDigest(data[k]) != keyDigestWant {
				changed = append(changed, k)
			}
			continue
		}
		if !bytes.Equal(data[k], want[k]) {
			changed = append(changed, k)
		}
	}
	for _, k := range t.removed {
		if _, ok := data[k]; ok {
			changed = append(changed, k)
		}
	}
	if t.primary {
		ours := dualcaAnnotations(obj.GetAnnotations())
		for k, v := range c.annotations {
			if ours[k] != v {
				changed = append(changed, k)
			}
		}
		for k := range ours {
			if _, ok := c.annotations[k]; !ok {
				changed = append(changed, k)
			}
		}
	}
	if s, ok := obj.(*corev1.Secret); ok && s.Type != t.secretType {
		changed = append(changed, "type")
	}
	return changed
}

// foreign names the inputs found in obj that t's gateway reads and dualca
// does not own, and so leaves: an Istio target's ca.crl.
func (t target) foreign(obj client.Object) []string {
	if obj == nil || !t.istio {
		return nil
	}
	if _, ok := dataOf(obj)[istioCRLKey]; ok {
		return []string{istioCRLKey}
	}
	return nil
}

// unchangedObject reports whether a and b hold the same data and
// annotations (and, for Secrets, type).
func unchangedObject(a, b client.Object) bool {
	return typeOf(a) == typeOf(b) && maps.Equal(a.GetAnnotations(), b.GetAnnotations()) &&
		maps.EqualFunc(dataOf(a), dataOf(b), bytes.Equal)
}

// label prefixes a difference with the target it was found in, but for
// the gateway Secret, whose differences read as they always did.
func (t target) label(what string) string {
	if t.primary && t.credential {
		return what
	}
	return strings.TrimPrefix(t.id(), KindSecret+"/") + " " + what
}

// targetIDs names ts, for a log line.
func targetIDs(ts []target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.id()
	}
	return out
}

// targetStatuses are ts as the status reports them.
func targetStatuses(ts []target) []TargetStatus {
	out := make([]TargetStatus, len(ts))
	for i, t := range ts {
		var holds []string
		if t.credential {
			holds = append(holds, "server credential: tls.crt, tls.key")
		}
		if t.bundleKey != "" {
			holds = append(holds, "bundle: "+t.bundleKey)
		}
		out[i] = TargetStatus{Object: t.id(), Holds: strings.Join(holds, "; ")}
	}
	return out
}
