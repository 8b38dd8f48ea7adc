package e2e

import (
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/apirequest"
)

// TestChartRBACIsEnoughForTheIssuingSecret: with issuingSecret.name the
// chart's Role in the root's namespace names the issuing Secret (get, list,
// watch, update) and grants create there, which its admission policy pins
// to that name. As the chart's ServiceAccount, dualca creates the issuing
// Secret on the current root and moves it to the new one during a
// rotation: no request is refused and every permission granted is used
// (expectEveryPermissionUsed). It may neither delete nor patch the issuing
// Secret, nor create another Secret beside the root.
func TestChartRBACIsEnoughForTheIssuingSecret(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients/4)
	issuing := types.NamespacedName{Namespace: s.ns, Name: rootName + "-issuing-rbac"}
	roles, sa := s.installChartRBACValues(s.chartValues("issuingSecret: {name: " + issuing.Name + "}"))
	s.g.Expect(roles).To(HaveLen(1), "root, gateway and clients share the scenario's namespace: one Role")
	requests := &apirequest.Log{}
	o := s.options(false)
	o.IssuingSecret = issuing
	s.g.Expect(o.Validate()).To(Succeed())
	s.startDualcaAs(s.impersonating(sa, requests), o)
	s.startTraffic()
	s.issuingHolds(issuing, s.rootCert())

	r2 := s.rotate()
	s.converged(r2, false, 90*time.Second)
	s.issuingHolds(issuing, r2)
	_, failures := s.report("zero-downtime with an issuing Secret, as the chart's ServiceAccount")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).WithTimeout(10*time.Second).Should(
		ContainElement("Normal "+syncer.ReasonIssuingSecretMoved), "dualca's event of the move was recorded")
	s.expectEveryPermissionUsed(roles, requests)

	c := s.clientAs(sa)
	key := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: issuing.Namespace, Name: issuing.Name}}
	forbidden := map[string]error{
		"deleting the issuing Secret": c.Delete(s.ctx, key.DeepCopy(), client.DryRunAll),
		"patching the issuing Secret": c.Patch(s.ctx, key.DeepCopy(),
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"patched":"yes"}}}`)), client.DryRunAll),
	}
	for what, err := range forbidden {
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s is forbidden, got %v", what, err)
	}
	s.awaitAdmissionPolicy(c)
	err := c.Create(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: issuing.Name + "-2"}}, client.DryRunAll)
	s.g.Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy")), "another Secret beside the root is refused by the policy")
}

// issuingHolds waits until the issuing Secret key holds root's certificate
// (compared by fingerprint; no byte is logged), as a kubernetes.io/tls
// Secret with its key and bundle.
func (s *scenario) issuingHolds(key types.NamespacedName, root *x509.Certificate) {
	s.t.Helper()
	want := bundle.Fingerprint(root)
	s.g.Eventually(func(g Gomega) {
		sec := &corev1.Secret{}
		g.Expect(s.c.Client.Get(s.ctx, key, sec)).To(Succeed())
		g.Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		g.Expect(sec.Data).To(And(HaveKey(corev1.TLSPrivateKeyKey), HaveKey("ca.crt")))
		certs, err := bundle.ParseCertificates(corev1.TLSCertKey, sec.Data[corev1.TLSCertKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(bundle.Fingerprint(certs[0])).To(Equal(want), "the issuing Secret holds root %s", bundle.Short(want))
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}
