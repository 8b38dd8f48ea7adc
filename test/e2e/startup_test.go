package e2e

import (
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestTheGatewayTrustsANewRootBeforeTheClientsAreRead: dualca restarts
// after the root rotated, and its cache of the clients cannot load (its Role
// lacks the CertificateRequests for now: the stand-in for an API server
// that takes half a minute to list fifty thousand of them). The gateway is
// brought in sync at once all the same, trusting the new root beside the
// old one, and dualca is ready; meanwhile nothing that needs the clients
// happens: the old root stays, the server stays on it, no client is
// renewed, and the status says the clients are being read. Once the Role
// is whole, the clients are read and the rotation completes without a
// failed handshake.
func TestTheGatewayTrustsANewRootBeforeTheClientsAreRead(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	roles, sa := s.installChartRBAC(false)
	o := s.options(false)
	gw := types.NamespacedName{Namespace: s.ns, Name: gatewayName}
	o.StatusConfigMap = flags.DefaultStatusConfigMap(gw, flags.DefaultStateSecret(gw))
	s.startDualcaAs(s.impersonating(sa, nil), o)
	s.startTraffic()
	old := s.rootCert()
	s.waitPhase(old, bundle.PhaseSteady)
	s.dualca.Stop()

	restore := s.withholdCertificateRequests(roles[0])
	r2 := s.rotate()
	before, err := s.clientRevisions()
	s.g.Expect(err).NotTo(HaveOccurred())
	s.startDualcaAs(s.impersonating(sa, nil), o)

	// The gateway trusts both roots: the clients, still on the old one,
	// keep getting through.
	s.g.Eventually(s.trustedRoots).Should(ConsistOf(bundle.Fingerprint(r2), bundle.Fingerprint(old)))
	// The pass that wrote it marks dualca in sync once its write returned:
	// just after the test sees the write, not before.
	s.g.Eventually(s.dualca.Synced).Should(BeTrue(), "in sync, the clients unread")
	s.g.Expect(s.dualca.Gauge("dualca_clients_read")).To(BeZero())
	s.g.Eventually(func(g Gomega) {
		r, err := operator.ReadStatus(s.ctx, s.kube.CoreV1(), o.StatusConfigMap, time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Attention).To(ContainElement(HavePrefix("dualca is reading the selected clients")))
	}).Should(Succeed())
	// Longer than a rotation with its clients read would wait before
	// renewing them (one propagation delay): nothing that needs them moves.
	s.g.Consistently(func(g Gomega) {
		g.Expect(s.clientRevisions()).To(Equal(before), "no client is renewed")
		g.Expect(s.dualca.Renewals()).To(HaveKeyWithValue("triggered", 0))
		g.Expect(s.annotations()).To(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(old)), "the server stays on the old root")
		g.Expect(s.trustedRoots()).To(ContainElement(bundle.Fingerprint(old)), "the old root stays")
	}).WithTimeout(2 * propagationDelay).WithPolling(200 * time.Millisecond).Should(Succeed())

	restore()
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_clients_read") }).WithTimeout(90 * time.Second).Should(Equal(1.0))
	s.converged(r2, false, 90*time.Second)
	_, failures := s.report("clients read after the gateway was in sync")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Eventually(func(g Gomega) {
		r, err := operator.ReadStatus(s.ctx, s.kube.CoreV1(), o.StatusConfigMap, time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Attention).NotTo(ContainElement(HavePrefix("dualca is reading the selected clients")))
	}).Should(Succeed())
}

// TestAnAdoptionWaitsForTheClientsToBeRead: the flip from legacy to
// zero-downtime adopts the gateway, keeping the roots the clients still
// use, which only their ca.crt tells. Started with its client cache unable
// to load (the Role without CertificateRequests, as above), dualca adopts
// nothing and is not in sync; once the clients are read, the adopted
// bundle keeps the old root of the clients not yet re-issued.
func TestAnAdoptionWaitsForTheClientsToBeRead(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	roles, sa := s.installChartRBAC(false)
	s.startDualcaAs(s.impersonating(sa, nil), s.options(true))
	s.g.Eventually(s.annotations).Should(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy))
	// In sync once the pass's record write has returned too: the record
	// holds the root the clients are on, and the adoption keeps it from it.
	s.g.Eventually(s.dualca.Synced).Should(BeTrue())
	s.dualca.Stop()

	restore := s.withholdCertificateRequests(roles[0])
	old := s.rootCert()
	r2 := s.rotate()
	s.startDualcaAs(s.impersonating(sa, nil), s.options(false))
	s.g.Consistently(func(g Gomega) {
		g.Expect(s.annotations()).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy), "not adopted")
		g.Expect(s.dualca.Synced()).To(BeFalse(), "not in sync: the adoption waits")
	}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	restore()
	s.g.Eventually(s.annotations).WithTimeout(90 * time.Second).Should(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
	s.g.Expect(s.trustedRoots()).To(ConsistOf(bundle.Fingerprint(r2), bundle.Fingerprint(old)), "the adopted bundle keeps the clients' old root")
}

// TestAFirstInstallDoesNotWaitForTheClients: a gateway Secret that does not
// exist yet is adopted too, but with no record of an earlier root the
// adoption trusts the current root alone, whatever the clients' ca.crt
// holds (the rule provenance: a client cannot vouch for a root), so the
// clients cannot change it and dualca does not wait for them. The root has
// rotated before the install, the clients hold the old one, and their
// cache cannot load: the gateway is written at once, trusting the new root
// alone, and dualca is in sync; once the clients are read, the old root is
// still not trusted.
func TestAFirstInstallDoesNotWaitForTheClients(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	roles, sa := s.installChartRBAC(false)
	old := s.rootCert()
	r2 := s.rotate()
	restore := s.withholdCertificateRequests(roles[0])
	s.startDualcaAs(s.impersonating(sa, nil), s.options(false))
	s.g.Eventually(s.trustedRoots).Should(ConsistOf(bundle.Fingerprint(r2)))
	s.g.Eventually(s.dualca.Synced).Should(BeTrue(), "in sync, the clients unread")
	s.g.Expect(s.dualca.Gauge("dualca_clients_read")).To(BeZero(), "the clients are still unread")

	restore()
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_clients_read") }).WithTimeout(90 * time.Second).Should(Equal(1.0))
	s.g.Consistently(s.trustedRoots).WithTimeout(time.Second).ShouldNot(ContainElement(bundle.Fingerprint(old)), "the clients' old root, never read from the root Secret by this install")
}

// TestTheIssuingSecretIsGuardedWhileAnAdoptionWaits: while the flip from
// legacy waits for the clients (as above), the issuing Secret, which a
// hostile writer has set to a CA of their own, is written over with the
// current root all the same, and told with a Warning: the wait decides
// nothing of the gateway, but no client is issued meanwhile from a CA
// dualca never read from the root Secret.
func TestTheIssuingSecretIsGuardedWhileAnAdoptionWaits(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	issuing := types.NamespacedName{Namespace: s.ns, Name: rootName + "-issuing-wait"}
	roles, sa := s.installChartRBACValues(s.chartValues("issuingSecret: {name: " + issuing.Name + "}"))
	legacy, zero := s.options(true), s.options(false)
	legacy.IssuingSecret, zero.IssuingSecret = issuing, issuing
	s.startDualcaAs(s.impersonating(sa, nil), legacy)
	s.issuingHolds(issuing, s.rootCert())
	s.dualca.Stop()

	restore := s.withholdCertificateRequests(roles[0])
	r2 := s.rotate()
	foreign, err := certs.NewCA(rootName, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	s.g.Expect(err).NotTo(HaveOccurred())
	sec := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, issuing, sec)).To(Succeed())
	sec.Data = map[string][]byte{corev1.TLSCertKey: foreign.CertPEM, corev1.TLSPrivateKeyKey: foreign.KeyPEM, "ca.crt": foreign.CertPEM}
	s.g.Expect(s.c.Client.Update(s.ctx, sec)).To(Succeed())

	s.startDualcaAs(s.impersonating(sa, nil), zero)
	s.issuingHolds(issuing, r2)
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).Should(
		ContainElement("Warning "+syncer.ReasonIssuingSecretTampered), "the overwrite is told")
	s.g.Expect(s.annotations()).To(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyLegacy), "not adopted: the clients are unread")
	s.g.Expect(s.dualca.Synced()).To(BeFalse(), "not in sync: the adoption waits")
	restore()
}

// withholdCertificateRequests takes the CertificateRequests out of role,
// the chart's Role of dualca, and returns what puts them back: dualca's
// client cache cannot load meanwhile.
func (s *scenario) withholdCertificateRequests(role *rbacv1.Role) (restore func()) {
	s.t.Helper()
	s.g.Expect(s.c.Client.Get(s.ctx, client.ObjectKeyFromObject(role), role)).To(Succeed())
	whole := slices.Clone(role.Rules)
	role.Rules = slices.DeleteFunc(slices.Clone(whole), func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "certificaterequests")
	})
	s.g.Expect(role.Rules).To(HaveLen(len(whole)-1), "the chart grants the CertificateRequests in one rule")
	s.g.Expect(s.c.Client.Update(s.ctx, role)).To(Succeed())
	return func() {
		s.t.Helper()
		s.g.Expect(s.c.Client.Get(s.ctx, client.ObjectKeyFromObject(role), role)).To(Succeed())
		role.Rules = whole
		s.g.Expect(s.c.Client.Update(s.ctx, role)).To(Succeed())
	}
}
