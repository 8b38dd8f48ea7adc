package e2e

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
)

// TestTheServerLeafIsReissuedBeforeItsEndWithoutAFailedHandshake: the
// server leaf has the names, key algorithm and lifetime of dualca's
// server flags (the lifetime compressed to 30 s, as every timing here;
// the flags themselves allow an hour at least), is issued again from the
// same root before it ends, three times over, and not one handshake fails
// meanwhile.
func TestTheServerLeafIsReissuedBeforeItsEndWithoutAFailedHandshake(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	o := s.options(false)
	o.Server.DNSNames = []string{"gateway.agents.example.com"}
	o.Server.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	o.Server.KeyAlgorithm = bundle.KeyEd25519
	o.Server.Lifetime = 30 * time.Second
	s.startDualca(o)
	s.startTraffic()
	root := s.rootCert()

	leaves := map[string]bool{} // serial numbers of the leaves served
	s.g.Eventually(func(g Gomega) int {
		leaf := s.servedLeaf(g)
		g.Expect(leaf.DNSNames).To(Equal(o.Server.DNSNames), "the leaf's names are the flag's")
		g.Expect(leaf.IPAddresses).To(HaveLen(1))
		g.Expect(leaf.IPAddresses[0].Equal(o.Server.IPAddresses[0])).To(BeTrue())
		g.Expect(leaf.PublicKeyAlgorithm).To(Equal(x509.Ed25519), "the leaf's key is the flag's algorithm")
		g.Expect(leaf.NotAfter.Sub(leaf.NotBefore)).To(Equal(o.Server.Lifetime+bundle.ClockSkew), "its lifetime, after the backdate for skewed clocks")
		g.Expect(bundle.ChainsTo(leaf, root)).To(BeTrue(), "issued again from the same root: no switch")
		g.Expect(time.Until(leaf.NotAfter)).To(BeNumerically(">", 0), "never served past its end")
		leaves[leaf.SerialNumber.String()] = true
		return len(leaves)
	}).WithTimeout(2*time.Minute).WithPolling(500*time.Millisecond).Should(BeNumerically(">=", 4), "the first leaf and three issued again")
	s.g.Expect(s.dualcaEvents()).To(ContainElement("Normal " + bundle.ReasonServerLeafReissued))

	attempts, failures := s.report("server leaf issued again 3 times")
	s.g.Expect(attempts).To(BeNumerically(">", 20*clients), "the clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no client: %v", s.gateway.Stats().Errors)
}

// servedLeaf is the first certificate of the gateway Secret's tls.crt.
func (s *scenario) servedLeaf(g Gomega) *x509.Certificate {
	gw := &corev1.Secret{}
	g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
	chain, err := bundle.ParseCertificates(corev1.TLSCertKey, gw.Data[corev1.TLSCertKey])
	g.Expect(err).NotTo(HaveOccurred())
	return chain[0]
}
