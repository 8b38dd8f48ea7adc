package e2e

import (
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// The timings of the issuance-in-flight scenario: the gateway loads each
// version of its Secret gatewayLag late (a kubelet volume sync, an SDS
// push), and dualca gives it the longer issuingDelay to trust a new root.
const (
	gatewayLag    = 8 * time.Second
	issuingDelay  = 14 * time.Second
	inFlightCount = 3
	issuingName   = rootName + "-issuing"
	issuingIssuer = "agents-ca-issuing"
)

// TestAnIssuanceInFlightAsTheRootRotates: cert-manager issues a few
// clients right as the root rotates (an issuance in flight, a natural
// renewal: here triggered the moment the new root is written), while the
// gateway takes seconds to load what dualca writes. With the clients' CA
// Issuer on dualca's issuing Secret, they are issued from the root the
// gateway already trusts, dualca moves them to the new root once the
// gateway trusts it, and no handshake fails.
func TestAnIssuanceInFlightAsTheRootRotates(t *testing.T) {
	t.Parallel()
	issuanceInFlight(t, true)
}

// TestAnIssuanceInFlightAsTheRootRotatesWithoutTheIssuingSecret: the same
// with the Issuer on the root Secret, as before the issuing Secret: the
// clients issued in flight get leaves from the new root at once and are
// cut off until the gateway loads it. They fail handshakes, and only they:
// the scenario can fail, and what the issuing Secret closes is this.
func TestAnIssuanceInFlightAsTheRootRotatesWithoutTheIssuingSecret(t *testing.T) {
	t.Parallel()
	issuanceInFlight(t, false)
}

func issuanceInFlight(t *testing.T, withIssuing bool) {
	s := newIssuingScenario(t, withIssuing)
	r1 := s.rootCert()
	s.startTrafficWithGatewayLag(gatewayLag)
	inFlight := s.clients[:inFlightCount]
	before, err := s.clientRevisions()
	s.g.Expect(err).NotTo(HaveOccurred())

	r2 := s.rotate()
	for _, c := range inFlight {
		s.g.Expect(s.c.Trigger(s.ctx, s.ns, c)).To(Succeed())
	}
	// The issuance in flight lands: on the old root with the issuing
	// Secret, on the new one without.
	issuedFrom := r2
	if withIssuing {
		issuedFrom = r1
	}
	for _, c := range inFlight {
		leaf := s.leafOfRevision(c, before[c]+1)
		s.g.Expect(bundle.ChainsTo(leaf, issuedFrom)).To(BeTrue(), "%s was issued in flight from %s", c, issuedFrom.Subject.CommonName)
	}

	s.converged(r2, false, 3*time.Minute)
	attempts, failures := s.report(fmt.Sprintf("issuance in flight, issuing Secret %v", withIssuing))
	s.g.Expect(attempts).To(BeNumerically(">", 20*len(s.clients)), "the clients handshook throughout")
	if withIssuing {
		s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
		s.g.Expect(s.dualcaEvents()).To(ContainElement("Normal " + syncer.ReasonIssuingSecretMoved))
		return
	}
	s.g.Expect(failures).To(BeNumerically(">", 0), "the clients issued in flight were cut off")
	s.g.Expect(s.fleet.Stats().Failed()).To(ConsistOf(inFlight), "only they were")
}

// newIssuingScenario is a scenario whose clients are issued by a CA Issuer
// on dualca's issuing Secret (withIssuing; dualca starts first, to create
// it) or on the root Secret, with dualca running with issuingDelay.
func newIssuingScenario(t *testing.T, withIssuing bool) *scenario {
	t.Helper()
	s := newScenarioWith(t, shared, nil, func(sc *scenario) ([]string, error) {
		issuer := issuerName
		if withIssuing {
			sc.startDualca(sc.issuingOptions(true))
			sc.g.Eventually(func() error {
				return sc.c.Client.Get(sc.ctx, types.NamespacedName{Namespace: sc.ns, Name: issuingName}, &corev1.Secret{})
			}).Should(Succeed(), "dualca created the issuing Secret")
			if err := sc.c.CreateCAIssuer(sc.ctx, sc.ns, issuingIssuer, issuingName); err != nil {
				return nil, err
			}
			issuer = issuingIssuer
		}
		return sc.c.CreateClients(sc.ctx, sc.ns, issuer, "agent", 8, map[string]string{clientLabel: "agent"})
	})
	if !withIssuing {
		s.startDualca(s.issuingOptions(false))
	}
	// A first install is in sync before the clients are read: the
	// scenario rotates with them read, as it means to.
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_clients_read") }).Should(Equal(1.0))
	return s
}

// issuingOptions are the scenario's options with issuingDelay, and the
// issuing Secret when on.
func (s *scenario) issuingOptions(on bool) (o flags.Options) {
	o = s.options(false)
	o.TrustPropagationDelay = issuingDelay
	o.ServerSwitchGrace = 2 * time.Minute
	if on {
		o.IssuingSecret = types.NamespacedName{Namespace: s.ns, Name: issuingName}
	}
	return o
}

// leafOfRevision waits until client name's Certificate is at revision and
// returns the leaf its Secret holds then. cert-manager writes the Secret
// before it records the revision, so a Secret read between two reads of
// that revision holds its leaf.
func (s *scenario) leafOfRevision(name string, revision int) *x509.Certificate {
	s.t.Helper()
	var leaf *x509.Certificate
	s.g.Eventually(func(g Gomega) {
		revs, err := s.clientRevisions()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(revs[name]).To(Equal(revision), "%s issued again", name)
		sec := &corev1.Secret{}
		g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, sec)).To(Succeed())
		chain, err := bundle.ParseCertificates(corev1.TLSCertKey, sec.Data[corev1.TLSCertKey])
		g.Expect(err).NotTo(HaveOccurred())
		again, err := s.clientRevisions()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again[name]).To(Equal(revision), "%s still at that revision", name)
		leaf = chain[0]
	}).WithTimeout(time.Minute).Should(Succeed())
	return leaf
}
