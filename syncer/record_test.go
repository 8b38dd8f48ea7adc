package syncer

import (
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
)

// combined is the one target of a combined gateway Secret.
func combined() []*targetState {
	return statesOf(Options{GatewaySecret: types.NamespacedName{Namespace: "agents", Name: "gw"}})
}

// statesOf are the targets o makes dualca write, as the store keeps them.
func statesOf(o Options) []*targetState {
	var out []*targetState
	for _, t := range o.targets() {
		out = append(out, &targetState{target: t})
	}
	return out
}

// gatewayFor is the gateway Secret the store writes for d, with another
// controller's annotation on it.
func gatewayFor(d bundle.Decision) *corev1.Secret {
	s := combined()[0].desired(nil, contentOf(d)).(*corev1.Secret)
	s.Annotations["example.com/owner"] = "platform-team"
	return s
}

// recordOf is rec's next content when gateway is written for d, the
// gateway found having the digest meant when dualca meant it.
func recordOf(rec *record, gateway *corev1.Secret, meant map[string]string, d bundle.Decision, root *bundle.Root) *corev1.Secret {
	ts := combined()
	return rec.desired(ts, map[string]string{ts[0].id(): ts[0].digest(gateway)}, meant, d, root)
}

// TestTheRecordTellsTamperingFromItsOwnWrites: a gateway Secret is
// tampered with when what dualca owns in it (type, tls.crt, tls.key,
// ca.crt, dualca.io/ annotations) differs from the record, and is not
// when it is the gateway the record describes, or the one that record
// replaced (dualca stopped between writing its record and the gateway).
// What differs is named, never shown.
func TestTheRecordTellsTamperingFromItsOwnWrites(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := newRotation(t)
	rec := &record{key: types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}}
	before := gatewayFor(r.steady)
	rec.last = recordOf(rec, before, nil, r.steady, r.r1)
	after := gatewayFor(r.renew)
	next := recordOf(rec, after, meant(before, rec.last), r.renew, r.r2)

	g.Expect(tampered(before, rec.last)).To(BeEmpty(), "the gateway the record describes")
	g.Expect(tampered(after, next)).To(BeEmpty(), "the gateway the new record describes")
	g.Expect(tampered(before, next)).To(BeEmpty(), "the gateway the new record replaced: a record written first (an earlier version's order), the gateway not yet")
	g.Expect(tampered(nil, next)).To(BeEmpty(), "a deleted gateway is restored, not tampered with")
	// The one replaced is dualca's while it still holds what dualca last
	// left it holding, whatever others wrote beside it; written back by
	// someone else after dualca moved it on, it is a replay.
	ts := combined()
	stormed := before.DeepCopy()
	stormed.ResourceVersion = "9"
	stormed.Annotations["example.com/storm"] = "985"
	verdict := func(gw *corev1.Secret, left *corev1.Secret) string {
		t, _, _ := examine(ts, found(gw), map[string]string{ts[0].id(): ts[0].digest(left)}, next, nil)
		return t
	}
	g.Expect(verdict(before, before)).To(BeEmpty(), "the gateway a refused write left in place")
	g.Expect(verdict(stormed, before)).To(BeEmpty(),
		"the gateway a refused write left in place, annotated by others since (a conflict storm): still dualca's, late, not tampered with")
	g.Expect(verdict(before, after)).To(And(HavePrefix("ca.crt, "), ContainSubstring(bundle.AnnotationRoot)),
		"the gateway the record replaced, written back after dualca's write")

	// Gateway writes refused while the decisions go on: the record moves
	// on twice, the gateway stays where it was, and is still dualca's.
	held := &record{key: rec.key, last: next}
	paused := r.renew
	paused.State.Paused = bundle.PausedTrue
	ahead := recordOf(held, gatewayFor(paused), meant(before, held.last), paused, r.r2)
	g.Expect(tampered(before, ahead)).To(BeEmpty(), "the gateway left by refused writes, two records later")
	g.Expect(tampered(after, ahead)).NotTo(BeEmpty(), "a gateway dualca never left in place is not")

	other := after.DeepCopy()
	other.Annotations["example.com/owner"] = "someone-else"
	other.Labels = map[string]string{"app": "gateway"}
	g.Expect(tampered(other, next)).To(BeEmpty(), "other controllers' metadata is theirs")

	for name, tc := range map[string]struct {
		edit func(*corev1.Secret)
		want string
	}{
		"ca.crt":             {func(s *corev1.Secret) { s.Data[caKey] = append(s.Data[caKey], '\n') }, "ca.crt"},
		"tls.key":            {func(s *corev1.Secret) { s.Data[corev1.TLSPrivateKeyKey] = []byte("x") }, "tls.key"},
		"a state annotation": {func(s *corev1.Secret) { s.Annotations[bundle.AnnotationServer] = "00" }, bundle.AnnotationServer},
		"a new control":      {func(s *corev1.Secret) { s.Annotations[bundle.AnnotationPaused] = "true" }, bundle.AnnotationPaused},
		"a removed one":      {func(s *corev1.Secret) { delete(s.Annotations, bundle.AnnotationStrategy) }, bundle.AnnotationStrategy},
	} {
		edited := after.DeepCopy()
		tc.edit(edited)
		g.Expect(tampered(edited, next)).To(Equal(tc.want), name)
	}
}

// TestTheRecordNeverHoldsARootsKey: under the legacy strategy the gateway's
// tls.key is the root's own; the record keeps its digest only, and takes
// the key back from the gateway Secret only while it is the one dualca
// wrote there.
func TestTheRecordNeverHoldsARootsKey(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := newRotation(t)
	d := legacy.Plan(bundle.Gateway{}, r.r1, r.clients, r.now)
	gw := gatewayFor(d)
	rec := recordOf(&record{key: types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}}, gw, nil, d, r.r1)

	g.Expect(rec.Data).NotTo(HaveKey(corev1.TLSPrivateKeyKey))
	for k, v := range rec.Data {
		g.Expect(string(v)).NotTo(ContainSubstring("PRIVATE KEY"), "record key %s", k)
	}
	g.Expect(rec.Type).To(Equal(corev1.SecretTypeOpaque))
	g.Expect(gatewayOfRecord(rec, gw, nil, nil).KeyPEM).To(Equal(r.r1.KeyPEM), "the key dualca wrote, from the gateway Secret")

	changed := gw.DeepCopy()
	changed.Data[corev1.TLSPrivateKeyKey] = r.r2.KeyPEM
	g.Expect(gatewayOfRecord(rec, changed, nil, nil).KeyPEM).To(BeEmpty(), "another key is not taken back")
	g.Expect(gatewayOfRecord(rec, nil, nil, nil).KeyPEM).To(BeEmpty(), "nor from a deleted gateway")
	g.Expect(tampered(changed, rec)).To(Equal("tls.key"))

	// The zero-downtime strategy's tls.key is the server leaf's, never a root's.
	z := recordOf(&record{}, gatewayFor(r.renew), nil, r.renew, r.r2)
	g.Expect(z.Data[corev1.TLSPrivateKeyKey]).To(Equal(r.renew.KeyPEM))
	g.Expect(z.Data[corev1.TLSPrivateKeyKey]).NotTo(Equal(r.r1.KeyPEM))
	g.Expect(z.Data[corev1.TLSPrivateKeyKey]).NotTo(Equal(r.r2.KeyPEM))
	g.Expect((&record{}).known(z)).To(HaveLen(len(r.renew.Known)), "the roots read from the root Secret come back")
}

// tampered is examine's verdict on gateway.
func tampered(gateway, rec *corev1.Secret) string {
	t, _, _ := examine(combined(), found(gateway), nil, rec, nil)
	return t
}

// meant is the digests examine hands the record's next write for gateway.
func meant(gateway, rec *corev1.Secret) map[string]string {
	_, m, _ := examine(combined(), found(gateway), nil, rec, nil)
	return m
}

// TestASealedTargetIsDualcasWriteAheadOfItsRecord: a target carrying the
// seal of a decision started from the record as it is now is dualca's
// write whose record has not followed (a crash, a refused record write),
// not tampered with. A seal is good for that record version, that target
// and that content only, under the record's key: replayed after the record
// moved on, copied onto other content, made under another key or for
// another target, it makes nothing dualca's. The seal is no part of what
// dualca owns in the target.
func TestASealedTargetIsDualcasWriteAheadOfItsRecord(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := newRotation(t)
	ts := combined()
	rec := recordAt(r.steady, r.r1)
	key := rec.sealKey()
	g.Expect(key).To(HaveLen(sealKeyLen))
	g.Expect(rec.last.Data).To(HaveKeyWithValue(recordSealKey, key), "the record holds its key")
	verdict := func(gw, at *corev1.Secret) string {
		t, _, _ := examine(ts, found(gw), nil, at, key)
		return t
	}
	ahead := gatewayFor(r.renew)
	own := sealed(ahead, key, "5", ts[0].id())
	g.Expect(ts[0].digest(own)).To(Equal(ts[0].digest(ahead)), "the seal is no part of the digest")
	g.Expect(verdict(own, rec.last)).To(BeEmpty(), "dualca's write decided from the record as it is")
	_, m, _ := examine(ts, found(own), nil, rec.last, key)
	g.Expect(m).To(HaveKeyWithValue(ts[0].id(), ts[0].digest(ahead)), "and meant, for the record's next write")
	g.Expect(verdict(ahead, rec.last)).NotTo(BeEmpty(), "the same content without a seal is someone else's")

	moved := rec.last.DeepCopy()
	moved.ResourceVersion = "6"
	g.Expect(verdict(own, moved)).NotTo(BeEmpty(), "replayed once the record moved on")
	forged := gatewayFor(r.renew)
	forged.Data[caKey] = append(forged.Data[caKey], r.r2.CertPEM...)
	forged.Annotations[annotationSeal] = own.Annotations[annotationSeal]
	g.Expect(verdict(forged, rec.last)).To(HavePrefix("ca.crt, "), "a seal copied onto other content")
	g.Expect(verdict(sealed(ahead, make([]byte, sealKeyLen), "5", ts[0].id()), rec.last)).NotTo(BeEmpty(), "a seal under another key")
	g.Expect(verdict(sealed(ahead, key, "5", "ConfigMap/agents/gw-ca"), rec.last)).NotTo(BeEmpty(), "a seal for another target")
	g.Expect(verdict(own, nil)).To(BeEmpty(), "without a record, everything found is adopted as before")
}

// recordAt is a record whose last write, at resourceVersion "5", is of
// the combined gateway Secret holding d, the current root root.
func recordAt(d bundle.Decision, root *bundle.Root) *record {
	rec := &record{key: types.NamespacedName{Namespace: "dualca", Name: "gw-dualca-state"}}
	rec.last = recordOf(rec, gatewayFor(d), nil, d, root)
	rec.last.ResourceVersion = "5"
	return rec
}

// sealed is gw with a seal under key for record version and target id.
func sealed(gw *corev1.Secret, key []byte, version, id string) *corev1.Secret {
	out := gw.DeepCopy()
	out.Annotations[annotationSeal] = sealOf(key, version, id, combined()[0].digest(gw))
	return out
}

// found is the combined gateway Secret as the store finds it.
func found(gateway *corev1.Secret) []client.Object {
	if gateway == nil {
		return []client.Object{nil}
	}
	return []client.Object{gateway}
}

// TestOnlyDualcasOwnWriteSaysWhenTheGatewayGotTheRoot: the date the
// propagation delay may count from instead of the record's
// (Gateway.ServedSince) is read from the gateway Secret only when the
// Secret is dualca's own write: the record's content, or sealed for the
// record as it is. A writer of the gateway Secret who dates the root
// otherwise, earlier to hurry the clients or later to hold them, without
// the seal, or with one copied from dualca's write, is not read at all.
func TestOnlyDualcasOwnWriteSaysWhenTheGatewayGotTheRoot(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	r := newRotation(t)
	ts := combined()
	rec := recordAt(r.renew, r.r2)
	key := rec.sealKey()
	served := func(gw *corev1.Secret) time.Time {
		_, meant, _ := examine(ts, found(gw), nil, rec.last, key)
		return servedSince(ts, found(gw), rec.last, meant)
	}
	dated := func(gw *corev1.Secret, at time.Time) *corev1.Secret {
		out := gw.DeepCopy()
		st := bundle.ParseState(out.Annotations)
		st.RootAddedAt = at
		maps.Copy(out.Annotations, st.Annotations())
		delete(out.Annotations, annotationSeal)
		return out
	}
	seal := func(gw *corev1.Secret) *corev1.Secret { return sealed(gw, key, "5", ts[0].id()) }

	recorded := bundle.ParseState(rec.last.Annotations).RootAddedAt
	g.Expect(recorded).NotTo(BeZero())
	g.Expect(served(gatewayFor(r.renew))).To(Equal(recorded), "the record's own content")
	later := recorded.Add(10 * time.Minute)
	own := seal(dated(gatewayFor(r.renew), later))
	g.Expect(served(own)).To(Equal(later), "dualca's sealed write, ahead of the record")

	for name, gw := range map[string]*corev1.Secret{
		"dated earlier": dated(gatewayFor(r.renew), recorded.Add(-time.Hour)),
		"dated later":   dated(gatewayFor(r.renew), later.Add(time.Hour)),
		"the sealed write, redated": func() *corev1.Secret {
			gw := dated(own, recorded.Add(-time.Hour))
			gw.Annotations[annotationSeal] = own.Annotations[annotationSeal]
			return gw
		}(),
		"the sealed write, unsealed": dated(own, later),
	} {
		g.Expect(served(gw)).To(BeZero(), name)
	}
	g.Expect(served(seal(dated(gatewayFor(r.steady), later)))).To(BeZero(), "sealed, but of another root than the record's")
}
