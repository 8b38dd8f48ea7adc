package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/apirequest"
	"github.com/dualca/dualca/test/lib/mtls"
)

// The chart's RBAC for the other target shapes (syncer/targets.go), as
// TestChartRBACIsEnoughAndNoMore does for the combined form: dualca runs a
// rotation as the chart's ServiceAccount, with only the Roles and admission
// policy the chart renders for the shape. Enough: it converges and the API
// server refuses none of its requests. No more: every permission granted
// is used (expectEveryPermissionUsed), and what it has no business doing
// is refused.

// bundleConfigMap is the bundle target of the bundle-only scenario.
const bundleConfigMap = "agents-client-ca"

// TestChartRBACIsEnoughForTheSplitForm: Istio's split form, tls.crt and
// tls.key in the gateway Secret and ca.crt in "<name>-cacert", which dualca
// now creates and updates. A gateway reads the two as one credential, as
// Istio's SDS does, and no handshake fails during the rotation.
func TestChartRBACIsEnoughForTheSplitForm(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients/2)
	roles, sa := s.installChartRBACValues(s.chartValues(fmt.Sprintf("gatewaySecret: {namespace: %s, name: %s, form: split}", s.ns, gatewayName)))
	s.g.Expect(roles).To(HaveLen(1))
	requests := &apirequest.Log{}
	o := s.options(false)
	o.GatewayForm = syncer.FormSplit
	s.startDualcaAs(s.impersonating(sa, requests), o)
	s.startTrafficOn(splitForm{mtls.OneObjectWatches(s.kube, s.ns)})

	r2 := s.rotate()
	cacert := types.NamespacedName{Namespace: s.ns, Name: gatewayName + "-cacert"}
	s.targetsConverged(r2, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, &corev1.Secret{},
		map[types.NamespacedName]client.Object{cacert: &corev1.Secret{}}, 60*time.Second)
	s.fleetGetsThrough(60 * time.Second)
	_, failures := s.report("split form, as the chart's ServiceAccount")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Eventually(func() ([]string, error) { return s.dualcaEventsOn("Secret", gatewayName) }).WithTimeout(10*time.Second).Should(ContainElements(
		"Normal "+bundle.ReasonRootRotated, "Normal "+bundle.ReasonBundleUpdated, "Normal "+bundle.ReasonServerSwitched,
		"Normal "+bundle.ReasonRootRetired), "dualca's events, on the gateway Secret")
	gw := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
	s.g.Expect(gw.Data).NotTo(HaveKey("ca.crt"), "split: the bundle is in the -cacert Secret alone")
	s.expectEveryPermissionUsed(roles, requests)

	c := s.clientAs(sa)
	s.expectRefused(c)
	s.awaitAdmissionPolicy(c)
	err := c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "any-name"}}, client.DryRunAll)
	s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "a Secret of another name is refused by the policy")
	s.g.Expect(c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: cacert.Name}}, client.DryRunAll)).To(
		Or(Succeed(), WithTransform(apierrors.IsAlreadyExists, BeTrue())), "the -cacert Secret may be created (the policy lets it through to storage)")
}

// TestChartRBACIsEnoughForABundleOnlyConfigMap: no gateway Secret; the
// bundle alone in a ConfigMap (the Gateway API's frontend TLS validation,
// Envoy Gateway), which names the rotation: the record, the status
// ConfigMap and the events are the ConfigMap's. The gateway serves a
// certificate of its own, so no handshake is made here: the ConfigMap,
// the record's phase and the clients show the rotation through.
func TestChartRBACIsEnoughForABundleOnlyConfigMap(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients/4)
	roles, sa := s.installChartRBACValues(s.chartValues(
		"gatewaySecret: {namespace: '', name: ''}",
		fmt.Sprintf("bundleTargets: [{kind: configmap, namespace: %s, name: %s}]", s.ns, bundleConfigMap)))
	s.g.Expect(roles).To(HaveLen(1))
	for _, r := range roles[0].Rules {
		s.g.Expect(r.ResourceNames).NotTo(ContainElement(HavePrefix(gatewayName)), "no right on a gateway Secret there is none of: %+v", r)
	}
	requests := &apirequest.Log{}
	o := s.options(false)
	o.GatewaySecret = types.NamespacedName{}
	anchor := types.NamespacedName{Namespace: s.ns, Name: bundleConfigMap}
	o.BundleTargets = []syncer.BundleTarget{{Kind: syncer.KindConfigMap, Key: anchor}}
	s.g.Expect(o.Validate()).To(Succeed())
	s.startDualcaAs(s.impersonating(sa, requests), o)
	// The first root reaches the ConfigMap before the rotation: a root
	// dualca never read is no rotation (and its clients are not trusted).
	s.targetsConverged(s.rootCert(), anchor, &corev1.ConfigMap{}, nil, 60*time.Second)

	r2 := s.rotate()
	s.targetsConverged(r2, anchor, &corev1.ConfigMap{}, nil, 60*time.Second)
	s.g.Eventually(func() ([]string, error) { return s.dualcaEventsOn("ConfigMap", bundleConfigMap) }).WithTimeout(10*time.Second).Should(ContainElements(
		"Normal "+bundle.ReasonRootRotated, "Normal "+bundle.ReasonBundleUpdated, "Normal "+bundle.ReasonClientRenewalTriggered,
		"Normal "+bundle.ReasonRootRetired), "dualca's events, on the ConfigMap")
	state := flags.DefaultStateSecret(anchor)
	s.g.Expect(s.c.Client.Get(s.ctx, state, &corev1.Secret{})).To(Succeed(), "the record is named after the ConfigMap")
	s.g.Expect(s.c.Client.Get(s.ctx, flags.DefaultStatusConfigMap(anchor, state), &corev1.ConfigMap{})).To(Succeed(), "and the status")
	err := s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, &corev1.Secret{})
	s.g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no gateway Secret is written, got %v", err)
	s.expectEveryPermissionUsed(roles, requests)

	c := s.clientAs(sa)
	s.expectRefused(c)
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "other"}, Data: map[string]string{"k": "v"}}
	s.g.Expect(s.c.Client.Create(s.ctx, other.DeepCopy())).To(Succeed())
	forbidden := map[string]error{
		"reading another ConfigMap":      c.Get(s.ctx, client.ObjectKeyFromObject(other), &corev1.ConfigMap{}),
		"listing the ConfigMaps":         c.List(s.ctx, &corev1.ConfigMapList{}, client.InNamespace(s.ns)),
		"updating another ConfigMap":     c.Update(s.ctx, other.DeepCopy()),
		"reading the gateway Secret":     c.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, &corev1.Secret{}),
		"deleting the bundle ConfigMap":  c.Delete(s.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: bundleConfigMap}}),
		"patching the bundle ConfigMap":  c.Patch(s.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: bundleConfigMap}}, client.RawPatch(types.MergePatchType, []byte(`{"data":{"x":"y"}}`))),
		"creating a ConfigMap elsewhere": c.Create(s.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: bundleConfigMap}}, client.DryRunAll),
	}
	for what, err := range forbidden {
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s is forbidden, got %v", what, err)
	}
	s.awaitAdmissionPolicy(c)
	err = c.Create(s.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "any-name"}}, client.DryRunAll)
	s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "a ConfigMap of another name is refused by the policy")
	err = c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: gatewayName}}, client.DryRunAll)
	s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "no gateway Secret may be created where there is none")
	s.g.Expect(c.Create(s.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: bundleConfigMap}}, client.DryRunAll)).To(
		Or(Succeed(), WithTransform(apierrors.IsAlreadyExists, BeTrue())), "the bundle ConfigMap may be created (the policy lets it through)")
}

// chartValues are the scenario's chart values (root, gateway Secret,
// clients by label in its namespace), more after.
func (s *scenario) chartValues(more ...string) string {
	v := fmt.Sprintf("rootSecret: {namespace: %[1]s, name: %[2]s}\ngatewaySecret: {namespace: %[1]s, name: %[3]s}\nclients: {selector: %[4]s=agent}\nserver: {ipAddresses: [127.0.0.1]}\n",
		s.ns, rootName, gatewayName, clientLabel)
	for _, m := range more {
		v += m + "\n"
	}
	return v
}

// expectRefused: as the ServiceAccount of c, Secrets dualca has no
// business with are neither read nor written.
func (s *scenario) expectRefused(c client.Client) {
	s.t.Helper()
	unrelated := s.createSecret(s.ns, "unrelated", nil, nil)
	forbidden := map[string]error{
		"reading an unrelated Secret":  c.Get(s.ctx, client.ObjectKeyFromObject(unrelated), &corev1.Secret{}),
		"updating an unrelated Secret": c.Update(s.ctx, edited(s, unrelated)),
		"updating the root Secret":     c.Update(s.ctx, edited(s, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: rootName}})),
		"listing the Secrets":          c.List(s.ctx, &corev1.SecretList{}, client.InNamespace(s.ns)),
	}
	for what, err := range forbidden {
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s is forbidden, got %v", what, err)
	}
}

// startTrafficOn is startTraffic with the gateway reading its credential
// through secrets.
func (s *scenario) startTrafficOn(secrets mtls.Secrets) {
	s.t.Helper()
	s.gateway = mtls.NewGateway(secrets, gatewayName)
	s.g.Expect(s.gateway.Start(s.ctx)).To(Succeed())
	s.fleet = mtls.NewFleet(mtls.OneObjectWatches(s.kube, s.ns), s.clients, s.gateway.Addr(), mtls.ClientOptions{Interval: 100 * time.Millisecond})
	s.fleet.Start(s.ctx)
	s.g.Eventually(s.fleet.Stats).WithTimeout(30 * time.Second).Should(HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 3)))
}

// targetsConverged waits until the rotation to root is over on the
// targets: the primary (of primary's type) and the others hold the new root
// alone under ca.crt (the split form's gateway Secret, which holds none,
// is left out by naming it the primary), the primary's annotations say
// steady on that root, and every client is on it.
func (s *scenario) targetsConverged(root *x509.Certificate, primary types.NamespacedName, primaryObj client.Object,
	others map[types.NamespacedName]client.Object, timeout time.Duration) {
	s.t.Helper()
	fp := bundle.Fingerprint(root)
	bundles := maps.Clone(others)
	if _, ok := primaryObj.(*corev1.ConfigMap); ok {
		bundles = map[types.NamespacedName]client.Object{primary: primaryObj}
		maps.Copy(bundles, others)
	}
	s.g.Eventually(func(g Gomega) {
		g.Expect(s.c.Client.Get(s.ctx, primary, primaryObj)).To(Succeed())
		g.Expect(primaryObj.GetAnnotations()).To(And(HaveKeyWithValue(bundle.AnnotationRoot, fp),
			HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseSteady))), "the primary records the rotation over")
		for key, obj := range bundles {
			g.Expect(s.c.Client.Get(s.ctx, key, obj)).To(Succeed())
			var pem []byte
			switch o := obj.(type) {
			case *corev1.ConfigMap:
				pem = []byte(o.Data["ca.crt"])
			case *corev1.Secret:
				pem = o.Data["ca.crt"]
			}
			roots, err := bundle.ParseCertificates("ca.crt", pem)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fingerprints(roots)).To(Equal([]string{fp}), "%s trusts the new root alone", key)
		}
		g.Expect(s.clientsOn(root)).To(Equal(len(s.clients)), "every client is on the new root")
	}).WithTimeout(timeout).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// fleetGetsThrough waits until every client gets through again.
func (s *scenario) fleetGetsThrough(timeout time.Duration) {
	s.t.Helper()
	base := s.fleet.Stats().Total.Successes
	s.g.Eventually(s.fleet.Stats).WithTimeout(timeout).Should(And(
		HaveField("Total.ConsecutiveSuccesses", BeNumerically(">=", 2)),
		HaveField("Total.Successes", BeNumerically(">", base+2*len(s.clients)))), "every client gets through")
}

// dualcaEventsOn lists "Type Reason" of dualca's events about the object
// of kind and name in the scenario's namespace.
func (s *scenario) dualcaEventsOn(kind, name string) ([]string, error) {
	var list eventsv1.EventList
	if err := s.c.Client.List(s.ctx, &list, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == "dualca" && e.Regarding.Kind == kind && e.Regarding.Name == name {
			out = append(out, e.Type+" "+e.Reason)
		}
	}
	return out, nil
}

// splitForm is what a gateway makes of Istio's split form, as Istio's SDS
// does: the credential of the gateway Secret with the bundle of
// "<name>-cacert", one Secret whose version changes when either changes.
// It is given to the gateway once both exist; neither is deleted here.
type splitForm struct{ secrets mtls.Secrets }

func (f splitForm) Watch(ctx context.Context, name string, update func(*corev1.Secret)) func() {
	var mu sync.Mutex
	var gw, ca *corev1.Secret
	on := func(into **corev1.Secret) func(*corev1.Secret) {
		return func(sec *corev1.Secret) {
			mu.Lock()
			defer mu.Unlock()
			*into = sec
			if gw == nil || ca == nil {
				return
			}
			merged := gw.DeepCopy()
			merged.Data = maps.Clone(gw.Data)
			merged.Data["ca.crt"] = ca.Data["ca.crt"]
			merged.ResourceVersion = gw.ResourceVersion + "+" + ca.ResourceVersion
			update(merged)
		}
	}
	waitGateway := f.secrets.Watch(ctx, name, on(&gw))
	waitCA := f.secrets.Watch(ctx, name+"-cacert", on(&ca))
	return func() { waitGateway(); waitCA() }
}
