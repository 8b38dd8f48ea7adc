package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestTheSplitFormPutsTheBundleInTheCacertSecret: in Istio's split form
// the gateway Secret holds the server credential alone and
// "<name>-cacert" the bundle, through a rotation; a ca.crt left in the
// gateway Secret, or a cacert key (which Istio reads before ca.crt) in the
// -cacert Secret, is someone else's write: removed, and told.
func TestTheSplitFormPutsTheBundleInTheCacertSecret(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o, cacert := s.splitOptions()
	split := func() (gatewayView, error) { return s.splitView(cacert) }

	r1 := s.newRoot("root-1")
	s.putRoot(r1)
	s.start(o.Syncer())
	s.g.Eventually(split).Should(Equal(gatewayView{Roots: []string{"root-1"}, Server: "root-1", Phase: "Steady"}))
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(split).Should(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}))
	gw := s.gatewaySecret()
	s.g.Expect(gw.Type).To(Equal(corev1.SecretTypeTLS))
	s.g.Expect(gw.Data).To(HaveLen(2), "tls.crt and tls.key, no bundle: Istio takes it from -cacert")
	s.g.Expect(s.secret(cacert).Data).To(HaveLen(1), "ca.crt alone")

	attacker := certs.MustCA(t, "root-1", time.Hour)
	s.edit(cacert, func(sec *corev1.Secret) { sec.Data["cacert"] = attacker.CertPEM })
	s.g.Eventually(func() map[string][]byte { return s.secret(cacert).Data }).ShouldNot(HaveKey("cacert"), "the shadowing key is removed")
	s.g.Eventually(s.events).Should(ContainElement(And(HavePrefix(bundle.ReasonGatewayTampered+": "),
		ContainSubstring(s.ns+"/"+cacert.Name+" cacert"))), "the -cacert Secret's shadowing key is named")
	s.edit(s.gateway, func(sec *corev1.Secret) { sec.Data["ca.crt"] = attacker.CertPEM })
	s.g.Eventually(func() map[string][]byte { return s.secret(s.gateway).Data }).ShouldNot(HaveKey("ca.crt"), "a bundle beside the split credential is removed")
	s.g.Expect(split()).To(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}))
	s.g.Eventually(s.statusText(syncer.DefaultStatusConfigMap(s.gateway, syncer.DefaultStateSecret(s.gateway)))).Should(And(
		MatchRegexp(`target +secret/`+s.gateway.String()+` \(server credential: tls.crt, tls.key\)`),
		MatchRegexp(`target +secret/`+cacert.String()+` \(bundle: ca.crt\)`),
		MatchRegexp(`phase +Renewing`)), "dualca status names each target and what it holds")
}

// TestBundleTargetsHoldTheBundleAlone: a gateway that serves a
// certificate of its own (an ACME one) reads dualca's bundle from a
// ConfigMap, another from a Secret of its own type under its own key. No
// server credential is written anywhere, and a writer of a bundle target
// who adds a CA of their own gets it undone.
func TestBundleTargetsHoldTheBundleAlone(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	cm := types.NamespacedName{Namespace: s.ns, Name: "client-ca"}
	sec := types.NamespacedName{Namespace: s.ns, Name: "nginx-client-ca"}
	o.GatewaySecret = types.NamespacedName{}
	o.BundleTargets = []syncer.BundleTarget{{Kind: syncer.KindConfigMap, Key: cm}, {Kind: syncer.KindSecret, Key: sec}}
	o.BundleKey, o.BundleSecretType = "trust.pem", "nginx.org/ca"
	o.StateSecret = syncer.DefaultStateSecret(cm)
	o.StatusConfigMap = syncer.DefaultStatusConfigMap(cm, o.StateSecret)
	s.g.Expect(o.Validate()).To(Succeed())

	bundles := func(g Gomega) ([]string, []string) {
		m := &corev1.ConfigMap{}
		g.Expect(k8s.Get(context.Background(), cm, m)).To(Succeed())
		g.Expect(m.Data).To(HaveLen(1))
		x := &corev1.Secret{}
		g.Expect(k8s.Get(context.Background(), sec, x)).To(Succeed())
		g.Expect(x.Type).To(Equal(corev1.SecretType("nginx.org/ca")))
		g.Expect(x.Data).To(HaveLen(1), "the bundle alone: no server credential")
		return rootsOf([]byte(m.Data["trust.pem"])), rootsOf(x.Data["trust.pem"])
	}
	s.putRoot(s.newRoot("root-1"))
	s.start(o.Syncer())
	s.g.Eventually(func(g Gomega) {
		a, b := bundles(g)
		g.Expect(a).To(Equal([]string{"root-1"}))
		g.Expect(b).To(Equal([]string{"root-1"}))
	}).Should(Succeed())
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(func(g Gomega) {
		a, b := bundles(g)
		g.Expect(a).To(Equal([]string{"root-2", "root-1"}))
		g.Expect(b).To(Equal([]string{"root-2", "root-1"}))
	}).Should(Succeed())

	attacker := certs.MustCA(t, "root-2", time.Hour)
	m := &corev1.ConfigMap{}
	s.g.Expect(k8s.Get(context.Background(), cm, m)).To(Succeed())
	m.Data["trust.pem"] += string(attacker.CertPEM)
	s.g.Expect(k8s.Update(context.Background(), m)).To(Succeed())
	s.g.Eventually(func(g Gomega) {
		a, _ := bundles(g)
		g.Expect(a).To(Equal([]string{"root-2", "root-1"}))
	}).Should(Succeed(), "the attacker's CA is undone")
	// The same key under binaryData, which a gateway reads as well: a
	// ConfigMap may not hold a key in both, so dualca's key in data would
	// be refused while the attacker's stayed.
	s.g.Expect(k8s.Get(context.Background(), cm, m)).To(Succeed())
	delete(m.Data, "trust.pem")
	m.BinaryData = map[string][]byte{"trust.pem": attacker.CertPEM}
	s.g.Expect(k8s.Update(context.Background(), m)).To(Succeed())
	s.g.Eventually(func(g Gomega) {
		got := &corev1.ConfigMap{}
		g.Expect(k8s.Get(context.Background(), cm, got)).To(Succeed())
		g.Expect(got.BinaryData).NotTo(HaveKey("trust.pem"))
		g.Expect(rootsOf([]byte(got.Data["trust.pem"]))).To(Equal([]string{"root-2", "root-1"}))
	}).Should(Succeed(), "the attacker's binaryData key is undone too")
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonGatewayTampered + ": gateway Secret was changed outside dualca (configmap/" + cm.String() + " trust.pem)")))
	s.g.Expect(k8s.Get(context.Background(), s.gateway, &corev1.Secret{})).NotTo(Succeed(), "no gateway Secret is made")
	s.g.Eventually(s.statusText(o.StatusConfigMap)).Should(And(
		MatchRegexp(`gateway +`+cm.String()),
		ContainSubstring("configmap/"+cm.String()+" (bundle: trust.pem)"),
		ContainSubstring("secret/"+sec.String()+" (bundle: trust.pem)")), "dualca status of a bundle-only rotation")
}

// TestForeignIstioInputsAreRemovedOrFlagged: beside a combined gateway
// Secret, a cacert key (Istio reads it before ca.crt) is removed; a ca.crl
// (revocation is the operator's) is kept and flagged; a "<name>-cacert"
// Secret, which Istio would take the bundle from instead, is flagged.
func TestForeignIstioInputsAreRemovedOrFlagged(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	s.startOnFirstRoot(s.options().Syncer())
	attacker := certs.MustCA(t, "root-1", time.Hour)
	s.edit(s.gateway, func(sec *corev1.Secret) {
		sec.Data["cacert"] = attacker.CertPEM
		sec.Data["ca.crl"] = []byte("a revocation list")
	})
	s.g.Eventually(func(g Gomega) {
		g.Expect(s.secret(s.gateway).Data).NotTo(HaveKey("cacert"))
	}).Should(Succeed())
	s.g.Consistently(func() map[string][]byte { return s.secret(s.gateway).Data }, time.Second).Should(HaveKey("ca.crl"), "not dualca's to remove")
	s.g.Eventually(s.events).Should(ContainElement(And(HavePrefix(bundle.ReasonForeignTargetInput+": "),
		ContainSubstring("secret/"+s.gateway.String()+": ca.crl"))))

	shadow := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: s.gateway.Name + "-cacert"},
		Data: map[string][]byte{"ca.crt": attacker.CertPEM}}
	s.g.Expect(k8s.Create(context.Background(), shadow)).To(Succeed())
	s.g.Eventually(s.events).Should(ContainElement(And(HavePrefix(bundle.ReasonForeignTargetInput+": "),
		ContainSubstring("shadowed by secret/"+s.ns+"/"+shadow.Name))))
	s.g.Expect(s.secret(types.NamespacedName{Namespace: s.ns, Name: shadow.Name}).Data).To(HaveKeyWithValue("ca.crt", attacker.CertPEM),
		"dualca writes no Secret it does not own")
}

// TestALateBundleWriteRestartsThePropagationDelay: with the bundle in its
// own object (the split form's -cacert), the write of the bundle is
// refused for a while as a new root arrives. The gateway Secret is not
// written meanwhile (the bundle first), dualca's record is (written after
// the targets, it runs ahead of them), and the propagation delay the
// gateway is given counts from the write that reaches it, not from the
// record's: the rotation's recorded start is past the moment the writes
// were let through.
func TestALateBundleWriteRestartsThePropagationDelay(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o, cacert := s.splitOptions()
	s.putRoot(s.newRoot("root-1"))
	d := s.start(o.Syncer())
	s.g.Eventually(func() (gatewayView, error) { return s.splitView(cacert) }).Should(HaveField("Roots", []string{"root-1"}))
	record := syncer.DefaultStateSecret(s.gateway)

	unfreeze := s.freeze(cacert)
	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	s.g.Eventually(func() float64 { return d.Total("dualca_sync_errors_total") }).Should(BeNumerically(">=", 2), "bundle writes refused")
	s.g.Expect(rootsOf(s.secret(cacert).Data["ca.crt"])).To(Equal([]string{"root-1"}))
	s.g.Expect(s.secret(s.gateway).Annotations).NotTo(HaveKeyWithValue(bundle.AnnotationRoot, fingerprint(r2.Cert)), "the gateway Secret waits for its bundle")
	s.g.Expect(s.secret(record).Annotations).To(HaveKeyWithValue(bundle.AnnotationRoot, fingerprint(r2.Cert)), "the record is ahead of them")
	// Before the policy is lifted: no write can reach the gateway before
	// this moment.
	let := time.Now()
	unfreeze()
	s.g.Eventually(func() []string { return rootsOf(s.secret(cacert).Data["ca.crt"]) }).Should(Equal([]string{"root-2", "root-1"}))
	// The gateway Secret is written after its -cacert (the bundle first).
	s.g.Eventually(func() map[string]string { return s.secret(s.gateway).Annotations }).
		Should(HaveKeyWithValue(bundle.AnnotationRoot, fingerprint(r2.Cert)))
	added, err := time.Parse(time.RFC3339, s.secret(s.gateway).Annotations[bundle.AnnotationRootAddedAt])
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(added).To(BeTemporally(">=", let.Truncate(time.Second)), "the delay counts from the write that reached the gateway")
	s.g.Eventually(func() map[string]string { return s.secret(record).Annotations }).
		Should(HaveKeyWithValue(bundle.AnnotationRootAddedAt, added.Format(time.RFC3339)), "the record follows")
}

// TestAGatewayAheadOfItsRecordIsNoTampering: dualca's record cannot be
// written for a while (a policy; a crash between the two writes leaves the
// same) as a new root arrives. The gateway trusts the new root all the
// same, written first, and neither that dualca nor one started afresh
// while the record is behind takes the gateway, sealed as dualca's own
// write, for tampering; once the record can be written it catches up.
func TestAGatewayAheadOfItsRecordIsNoTampering(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	// Refused writes are retried with a backoff that doubles up to the
	// poll interval: a short one lets the record catch up soon after.
	o.PollInterval = time.Second
	d, _ := s.startOnFirstRoot(o.Syncer())
	record := syncer.DefaultStateSecret(s.gateway)

	unfreeze := s.freeze(record)
	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}), "the gateway trusts the new root first")
	s.g.Eventually(func() float64 { return d.Total("dualca_sync_errors_total") }).Should(BeNumerically(">=", 1), "its record refused")
	s.g.Expect(s.secret(record).Annotations).To(HaveKeyWithValue(bundle.AnnotationBundleRoots, Not(ContainSubstring(","))), "the record still has one root")
	s.g.Expect(s.secret(s.gateway).Annotations).To(HaveKey(syncer.AnnotationSeal))
	d.Stop()

	again := s.start(o.Syncer())
	s.g.Eventually(func() float64 { return again.Total("dualca_sync_errors_total") }).Should(BeNumerically(">=", 1), "the restarted dualca read the gateway ahead of the record")
	unfreeze()
	s.g.Eventually(func() map[string]string { return s.secret(record).Annotations }).
		Should(HaveKeyWithValue(bundle.AnnotationBundleRoots, ContainSubstring(",")), "the record catches up")
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))
	s.g.Expect(d.Counter("dualca_gateway_tampered_total")).To(BeZero())
	s.g.Expect(again.Counter("dualca_gateway_tampered_total")).To(BeZero(), "no false alarm after the restart")
	s.g.Expect(s.events()).NotTo(ContainElement(HavePrefix(bundle.ReasonGatewayTampered)))
}

// TestAReplayedBundleIsTamperingNotALateWrite: a writer of the split
// form's -cacert Secret writes back the version before the rotation (a
// write dualca once made, whose digest the record keeps as the one it
// replaced). It is no write of dualca's left behind: it is undone and told,
// and it does not restart the new root's propagation delay, which would
// let its writer hold a rotation back for as long as it replays.
func TestAReplayedBundleIsTamperingNotALateWrite(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o, cacert := s.splitOptions()
	s.putRoot(s.newRoot("root-1"))
	s.start(o.Syncer())
	split := func() (gatewayView, error) { return s.splitView(cacert) }
	s.g.Eventually(split).Should(HaveField("Roots", []string{"root-1"}))
	old := s.secret(cacert).Data

	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(split).Should(Equal(gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}))
	added := s.secret(s.gateway).Annotations[bundle.AnnotationRootAddedAt]
	s.edit(cacert, func(sec *corev1.Secret) { sec.Data = old })
	s.g.Eventually(s.events).Should(ContainElement(And(HavePrefix(bundle.ReasonGatewayTampered+": "),
		ContainSubstring(cacert.String()+" ca.crt"))), "the replay is told")
	s.g.Eventually(split).Should(HaveField("Roots", []string{"root-2", "root-1"}), "and undone")
	s.g.Consistently(func() map[string]string { return s.secret(s.gateway).Annotations }, 2*time.Second).
		Should(HaveKeyWithValue(bundle.AnnotationRootAddedAt, added), "the propagation delay is not restarted by a replay")
}

// statusText is what `dualca status` prints from the status ConfigMap key.
func (s *setup) statusText(key types.NamespacedName) func() (string, error) {
	kube := kubernetes.NewForConfigOrDie(restConfig)
	return func() (string, error) {
		r, err := operator.ReadStatus(context.Background(), kube.CoreV1(), key, time.Hour, time.Now())
		if err != nil {
			return "", err
		}
		var out strings.Builder
		err = r.WriteText(&out)
		return out.String(), err
	}
}

// splitOptions are the options of the split form, and its -cacert Secret.
func (s *setup) splitOptions() (flags.Options, types.NamespacedName) {
	s.t.Helper()
	o := s.options()
	o.GatewayForm = syncer.FormSplit
	s.g.Expect(o.Validate()).To(Succeed())
	return o, types.NamespacedName{Namespace: s.ns, Name: s.gateway.Name + "-cacert"}
}

// splitView is the view of a split-form gateway: its credential, and the
// bundle of its -cacert Secret.
func (s *setup) splitView(cacert types.NamespacedName) (gatewayView, error) {
	gw, err := s.getGateway()
	if err != nil {
		return gatewayView{}, err
	}
	ca := &corev1.Secret{}
	if err := k8s.Get(context.Background(), cacert, ca); err != nil {
		return gatewayView{}, err
	}
	combined := gw.DeepCopy()
	combined.Data["ca.crt"] = ca.Data["ca.crt"]
	return viewOf(combined), nil
}

// secret reads a Secret that must exist.
func (s *setup) secret(key types.NamespacedName) *corev1.Secret {
	s.t.Helper()
	sec := &corev1.Secret{}
	s.g.Expect(k8s.Get(context.Background(), key, sec)).To(Succeed())
	return sec
}

// edit changes a Secret as another writer would.
func (s *setup) edit(key types.NamespacedName, change func(*corev1.Secret)) {
	s.t.Helper()
	sec := s.secret(key)
	change(sec)
	s.g.Expect(k8s.Update(context.Background(), sec)).To(Succeed())
}

// freeze makes the API server refuse every update of the Secret key (a
// ValidatingAdmissionPolicy, as a cluster's policy would), and returns
// what lifts it. Both wait until the API server acts on them: a dry-run
// update is refused, then accepted.
func (s *setup) freeze(key types.NamespacedName) (unfreeze func()) {
	s.t.Helper()
	ctx := context.Background()
	name := "freeze-" + key.Namespace + "-" + key.Name
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}}},
			}}},
			Validations: []admissionv1.Validation{{Expression: "object.metadata.name != '" + key.Name + "'", Message: "frozen by the test"}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": key.Namespace}}}},
	}
	s.g.Expect(k8s.Create(ctx, policy)).To(Succeed())
	s.g.Expect(k8s.Create(ctx, binding)).To(Succeed())
	probe := func() error {
		sec := s.secret(key)
		sec.Data["probe"] = []byte("x")
		return k8s.Update(ctx, sec, client.DryRunAll)
	}
	s.g.Eventually(probe).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("frozen by the test")))
	return func() {
		s.g.Expect(k8s.Delete(ctx, binding)).To(Succeed())
		s.g.Expect(k8s.Delete(ctx, policy)).To(Succeed())
		s.g.Eventually(probe).WithTimeout(30 * time.Second).Should(Succeed())
	}
}

func ptrTo[T any](v T) *T { return &v }
