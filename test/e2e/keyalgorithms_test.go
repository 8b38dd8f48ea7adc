package e2e

import (
	"crypto/x509"
	"fmt"
	"net"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/cluster"
)

// TestRotationsOfRSARootsFailNoHandshake: cert-manager issues the root
// with an RSA-3072 key (spec.privateKey.algorithm), dualca issues the
// gateway's RSA-2048 leaf and cross-signs with it, and two rotations, the
// second overlapping the first, fail not one handshake.
func TestRotationsOfRSARootsFailNoHandshake(t *testing.T) {
	t.Parallel()
	rotateKeyed(t, "RSA-3072", cluster.RSAKey(3072), bundle.KeyRSA3072, bundle.KeyRSA2048)
}

// TestRotationsOfEd25519RootsFailNoHandshake: the same with Ed25519 roots
// and an Ed25519 leaf.
func TestRotationsOfEd25519RootsFailNoHandshake(t *testing.T) {
	t.Parallel()
	rotateKeyed(t, "Ed25519", cluster.Ed25519Key(), bundle.KeyEd25519, bundle.KeyEd25519)
}

// rotateKeyed runs a scenario whose root cert-manager issues with rootKey
// (of algorithm rootAlg), dualca serving a leaf of leafAlg: two rotations,
// the second overlapping the first, fail no handshake.
func rotateKeyed(t *testing.T, name string, rootKey *cmapi.CertificatePrivateKey, rootAlg, leafAlg bundle.KeyAlgorithm) {
	s := newScenarioKeyed(t, shared, clients, rootKey)
	r1 := s.rootCert()
	o := s.options(false)
	o.Server.KeyAlgorithm = leafAlg
	s.g.Expect(o.Validate()).To(Succeed())
	s.startDualca(o)
	s.startTraffic()
	s.expectServerLeaf(r1, leafAlg)

	r2 := s.rotate()
	// The next rotation once every client is on R2, the server not yet
	// (as in TestZeroDowntimeRotationsFailNoHandshake: not while a
	// client's issuance is in flight).
	s.waitPhase(r2, bundle.PhaseRenewing)
	s.g.Eventually(s.annotations).WithTimeout(60 * time.Second).Should(And(
		HaveKeyWithValue(bundle.AnnotationClients, fmt.Sprintf("renewed=%d pending=0 failed=0", clients)),
		Not(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r2)))))
	r3 := s.rotate()
	s.converged(r3, false, 90*time.Second)
	for _, r := range []*x509.Certificate{r1, r2, r3} {
		s.g.Expect(bundle.KeyAlgorithmOf(r.PublicKey)).To(Equal(rootAlg), "cert-manager issued every root with the key asked for")
	}
	s.expectServerLeaf(r3, leafAlg)
	s.logPhases("rotation 2 (overlapped by 3)", r2)
	s.logPhases("rotation 3", r3)

	attempts, failures := s.report(name + " roots, 2 rotations")
	s.g.Expect(attempts).To(BeNumerically(">", 10*clients), "the clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no client: %v", s.gateway.Stats().Errors)
	s.expectStrictlyClean(0)
}

// expectServerLeaf expects the gateway to serve a leaf of root, of key
// algorithm alg, named as the harness asks (127.0.0.1), that verifies.
func (s *scenario) expectServerLeaf(root *x509.Certificate, alg bundle.KeyAlgorithm) {
	s.t.Helper()
	s.g.Eventually(func(g Gomega) {
		gw := &corev1.Secret{}
		g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
		chain, err := bundle.ParseCertificates("tls.crt", gw.Data[corev1.TLSCertKey])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(chain[0].CheckSignatureFrom(root)).To(Succeed(), "the leaf is signed by the root")
		g.Expect(bundle.KeyAlgorithmOf(chain[0].PublicKey)).To(Equal(alg))
		g.Expect(chain[0].IPAddresses).To(HaveLen(1))
		g.Expect(chain[0].IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1))).To(BeTrue())
		g.Expect(bundle.VerifyServer(gw.Data[corev1.TLSCertKey], root, time.Now())).To(Succeed())
	}).Should(Succeed())
}
