package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// TestZeroDowntimeRotationsFailNoHandshake: three forced rotations at random
// moments, the second while the first is still moving clients; not one
// handshake fails, and each rotation ends with every client on the newest
// root, the server on it and the old roots retired.
func TestZeroDowntimeRotationsFailNoHandshake(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(false))
	s.startTraffic()

	pause(200*time.Millisecond, 2*time.Second)
	r2 := s.rotate()
	// The next rotation comes while the R2 rotation is still in progress:
	// every client has moved to R2 but the server has not switched yet.
	// (Not while a client's issuance is in flight: cert-manager would sign
	// it with R3 before dualca has written R3 to the gateway, a window of
	// dualca's propagation time that the monitor counts as a race.)
	s.waitPhase(r2, bundle.PhaseRenewing)
	s.g.Eventually(s.annotations).WithTimeout(30 * time.Second).Should(And(
		HaveKeyWithValue(bundle.AnnotationClients, fmt.Sprintf("renewed=%d pending=0 failed=0", clients)),
		Not(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r2)))))
	pause(0, 300*time.Millisecond)
	r3 := s.rotate()
	s.converged(r3, false, 60*time.Second)
	s.logPhases("rotation 2 (overlapped by 3)", r2)
	s.logPhases("rotation 3 (overlapping)", r3)

	pause(200*time.Millisecond, 2*time.Second)
	r4 := s.rotate()
	s.converged(r4, false, 60*time.Second)
	s.logPhases("rotation 4", r4)

	attempts, failures := s.report("zero-downtime, 3 rotations")
	s.g.Expect(attempts).To(BeNumerically(">", 20*clients), "the clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no client: %v", s.gateway.Stats().Errors)
	versions, races, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "every gateway version trusted every root in use")
	s.expectCacheHoldsOnlyWhatItNeeds()
	s.expectStrictlyClean(0)
	t.Logf("gateway versions checked: %d; client versions issued from a root not yet in the gateway (cert-manager racing dualca): %d", versions, races)
}

// TestLegacyRotationsCutClientsOffAndConverge: the same script with the
// legacy strategy. The failures it causes are the behaviour reproduced:
// counted and reported, and everything converges all the same.
func TestLegacyRotationsCutClientsOffAndConverge(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(true))
	s.startTraffic()

	pause(200*time.Millisecond, 2*time.Second)
	r2 := s.rotate()
	pause(0, 500*time.Millisecond)
	r3 := s.rotate()
	s.converged(r3, true, 60*time.Second)
	s.logPhases("legacy rotation 2 (overlapped by 3)", r2)
	s.logPhases("legacy rotation 3", r3)
	pause(200*time.Millisecond, 2*time.Second)
	r4 := s.rotate()
	s.converged(r4, true, 60*time.Second)
	s.logPhases("legacy rotation 4", r4)

	attempts, failures := s.report("legacy, 3 rotations")
	s.g.Expect(attempts).To(BeNumerically(">", 20*clients))
	s.g.Expect(failures).To(BeNumerically(">", 0), "the legacy strategy cuts clients off at each rotation")
	s.g.Expect(s.dualca.Renewals()).To(HaveKeyWithValue("triggered", BeNumerically(">=", clients)),
		"client Secrets were deleted for re-issuance")
	s.expectStrictlyClean(0)
}

// TestFlippingTheStrategyMidRotationConverges: the flag flipped during a
// rotation, both ways. Back in zero-downtime, no root a client still uses
// is ever missing from the gateway.
func TestFlippingTheStrategyMidRotationConverges(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	s.startDualca(s.options(false))
	s.startTraffic()

	r2 := s.rotate()
	s.waitPhase(r2, bundle.PhaseRenewing)
	zd := s.fleet.Stats().Total
	s.g.Expect(zd.Failures).To(BeZero(), "no failure while zero-downtime ran")
	s.startDualca(s.options(true)) // zero-downtime -> legacy mid-rotation
	s.converged(r2, true, 60*time.Second)

	// legacy -> zero-downtime in the middle of the legacy strategy's
	// rotation: slowed down, it has re-issued some clients from R3 and not
	// the others yet. The adopted bundle must keep R2 for those. The
	// legacy dualca is stopped before they are counted: it deletes client
	// Secrets while cert-manager, slow on a busy machine, re-issues them,
	// and a client whose Secret is deleted is on neither root.
	slow := s.options(true)
	slow.RenewalQPS, slow.RenewalBurst = 1, 1
	s.startDualca(slow)
	r3 := s.rotate()
	s.g.Eventually(func() int { return s.clientsOn(r3) }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 2))
	leg := s.fleet.Stats().Total
	s.dualca.Stop()
	s.g.Expect(s.clientsOn(r2)).To(BeNumerically(">", 0), "the flip came while clients were still on R2")
	s.startDualca(s.options(false))
	s.g.Eventually(s.annotations).Should(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
	s.g.Expect(s.annotations()[bundle.AnnotationBundleRoots]).To(ContainSubstring(bundle.Fingerprint(r2)),
		"the adopted bundle keeps the root of the clients not yet re-issued")
	s.converged(r3, false, 60*time.Second)
	s.logPhases("rotation 3 (adopted from legacy)", r3)

	s.report("flips zero-downtime -> legacy -> zero-downtime")
	end := s.fleet.Stats().Total
	t.Logf("handshakes attempted/failed: zero-downtime until the flip %d/%d; legacy %d/%d; zero-downtime after the flip back %d/%d (clients the legacy strategy had left on R2, until re-issued)",
		zd.Attempts, zd.Failures, leg.Attempts-zd.Attempts, leg.Failures-zd.Failures, end.Attempts-leg.Attempts, end.Failures-leg.Failures)
	versions, races, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "no zero-downtime version of the gateway lacked a root in use")
	s.expectStrictlyClean(0)
	t.Logf("gateway versions checked: %d; client versions issued from a root not yet in the gateway (cert-manager racing dualca): %d", versions, races)
}

// TestABrokenClientDelaysTheSwitchUntilTheGracePeriod: one client's issuer
// cannot sign any more (its CA Secret's key no longer matches), so its
// re-issuance fails. It shows as failed; the server switch waits for the
// grace period and is then forced with a Warning; the other clients never
// fail a handshake.
func TestABrokenClientDelaysTheSwitchUntilTheGracePeriod(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients-1)
	const doomed = "doomed"
	// Its issuer signs with a copy of the root Secret, good at first.
	root := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: rootName}, root)).To(Succeed())
	s.g.Expect(s.c.Client.Create(s.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "doomed-ca"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: root.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: root.Data[corev1.TLSPrivateKeyKey]},
	})).To(Succeed())
	s.g.Expect(s.c.CreateCAIssuer(s.ctx, s.ns, "doomed-ca", "doomed-ca")).To(Succeed())
	s.g.Expect(s.c.Client.Create(s.ctx, s.c.ClientCertificate(s.ns, "doomed-ca", doomed, map[string]string{clientLabel: "agent"}))).To(Succeed())
	s.g.Expect(s.c.WaitReady(s.ctx, s.ns, doomed)).To(Succeed())
	s.clients = append(s.clients, doomed)
	// It refuses the server once the switch is forced: counted apart.
	s.watch.Excuse(doomed)

	o := s.options(false)
	// Long enough for cert-manager, slow on a busy machine, to fail the
	// broken client's issuance well before the grace period ends.
	o.ServerSwitchGrace = 30 * time.Second
	s.startDualca(o)
	s.startTraffic()

	// Now break the issuer: same certificate, another key.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s.g.Expect(err).NotTo(HaveOccurred())
	der, err := x509.MarshalECPrivateKey(key)
	s.g.Expect(err).NotTo(HaveOccurred())
	broken := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: "doomed-ca"}, broken)).To(Succeed())
	broken.Data[corev1.TLSPrivateKeyKey] = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	s.g.Expect(s.c.Client.Update(s.ctx, broken)).To(Succeed())

	r2 := s.rotate()
	gateway := s.annotations
	// Every other client renews early, the broken one shows as failed, and
	// the server still waits: a gateway version with that progress and the
	// old server must have been written.
	failedOne := fmt.Sprintf("renewed=%d pending=0 failed=1", clients-1)
	s.g.Eventually(gateway).WithTimeout(30*time.Second).Should(HaveKeyWithValue(bundle.AnnotationClients, failedOne),
		"the broken client shows as failed, the others renewed")
	// The monitor's watch may deliver that version a moment after the read.
	var waiting map[string]string
	s.g.Eventually(func() map[string]string {
		waiting = s.watch.firstGateway(func(a map[string]string) bool { return a[bundle.AnnotationClients] == failedOne })
		return waiting
	}).WithTimeout(10 * time.Second).ShouldNot(BeNil())
	s.g.Expect(waiting).NotTo(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r2)), "the server waits")

	s.g.Eventually(gateway).WithTimeout(60 * time.Second).Should(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r2)))
	a := gateway()
	added, _ := time.Parse(time.RFC3339, a[bundle.AnnotationRootAddedAt])
	switched, _ := time.Parse(time.RFC3339, a[bundle.AnnotationServerSwitchedAt])
	s.g.Expect(switched.Sub(added)).To(BeNumerically(">=", o.ServerSwitchGrace), "the switch came only when the grace period ended")
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).WithTimeout(10 * time.Second).
		Should(ContainElement("Warning " + bundle.ReasonServerSwitchForced))

	// The broken client's leaf still chains to R1, so R1 stays trusted.
	roots := func() []string {
		gw := &corev1.Secret{}
		_ = s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)
		cs, _ := bundle.ParseCertificates("ca.crt", gw.Data["ca.crt"])
		return fingerprints(cs)
	}
	s.g.Consistently(roots).WithTimeout(3 * time.Second).Should(HaveLen(2))
	s.report("a client that cannot be re-issued")
	stats := s.fleet.Stats()
	for name, c := range stats.Clients {
		if name != doomed {
			s.g.Expect(c.Failures).To(BeZero(), "client %s is unaffected: %v", name, c.Errors)
		}
	}
	for e := range s.gateway.Stats().Errors {
		// The broken client refusing the new server shows on the gateway as
		// its alert; the gateway itself must refuse nobody.
		s.g.Expect(e).To(HavePrefix("remote error"), "the gateway still trusts the broken client's root")
	}
	versions, races, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty())
	s.g.Expect(s.watch.Result().Excused).To(BeNumerically(">", 0), "the monitor saw the broken client refuse the forced server")
	s.expectStrictlyClean(0)
	t.Logf("gateway versions checked: %d (races %d); the broken client failed %d handshakes after the forced switch", versions, races, stats.Clients[doomed].Failures)
}

// expectCacheHoldsOnlyWhatItNeeds: a cache holds what it listed and
// watched, and dualca listed and watched the selected Certificates only
// (not the root's Certificate beside them) and their CertificateRequests,
// both by the clients' label, and of the Secrets only its two, by name:
// no list of the namespace's Secrets, cert-manager's included.
func (s *scenario) expectCacheHoldsOnlyWhatItNeeds() {
	s.t.Helper()
	selector := labels.SelectorFromSet(labels.Set{clientLabel: "agent"}).String()
	cached := map[string]bool{}
	for _, r := range s.dualca.Requests() {
		if r.Verb != "list" && r.Verb != "watch" {
			continue
		}
		s.g.Expect(r.Namespace).To(Equal(s.ns), "%s", r)
		switch r.Resource {
		case "certificates":
			s.g.Expect(r.LabelSelector).To(Equal(selector), "%s: the selected Certificates only", r)
		case "certificaterequests":
			s.g.Expect(r.LabelSelector).To(Equal(selector), "%s: the selected Certificates' requests only", r)
		case "secrets":
			// No Secret of a client namespace is read, cert-manager's
			// included: the clients' certificates come from their requests.
			// The root, the gateway, and the "-cacert" Secret that would
			// shadow the gateway's bundle in Istio (watched, never written).
			s.g.Expect(r.Name).To(BeElementOf(rootName, gatewayName, gatewayName+"-cacert"), "%s: one Secret by name, never a list", r)
		case "configmaps":
			s.g.Expect(r.Name).To(Equal(syncer.DefaultStatusConfigMap(types.NamespacedName{Namespace: s.ns, Name: gatewayName},
				types.NamespacedName{Namespace: s.ns}).Name), "%s: the status ConfigMap by name, for the operator's controls", r)
		default:
			s.g.Expect(r.Resource).To(BeElementOf("certificates", "certificaterequests", "secrets", "configmaps"), "%s: nothing else is cached", r)
		}
		cached[r.Verb+" "+r.Resource] = true
	}
	s.g.Expect(cached).To(HaveKey("watch certificates"))
	s.g.Expect(cached).To(HaveKey("watch certificaterequests"))
	// What the API server answers that list: the clients, not the root's Certificate.
	var crts cmapi.CertificateList
	s.g.Expect(s.c.Client.List(s.ctx, &crts, client.InNamespace(s.ns), client.MatchingLabels{clientLabel: "agent"})).To(Succeed())
	s.g.Expect(crts.Items).To(HaveLen(len(s.clients)), "only the selected Certificates are cached")
	var all cmapi.CertificateList
	s.g.Expect(s.c.Client.List(s.ctx, &all, client.InNamespace(s.ns))).To(Succeed())
	s.g.Expect(len(all.Items)).To(BeNumerically(">", len(crts.Items)), "a Certificate beside them is left out")
}
