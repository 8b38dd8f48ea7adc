package integration

import (
	"context"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/issuance"
)

// TestALostGatewayIsRestoredFromTheRecord: the gateway Secret is deleted
// while dualca is down, in the middle of a rotation. The old root is no
// longer in the root Secret, and its server credential can no longer be
// made: dualca's record still has both, so the gateway comes back as it
// was, with a GatewayRestored Warning. A client Secret carrying a CA of its
// own never reaches the gateway.
func TestALostGatewayIsRestoredFromTheRecord(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.ClientSelector, o.ClientNamespaces = labels.SelectorFromSet(clientLabel), []string{s.ns}
	// Roots of one cert-manager CA share their subject.
	r1 := s.newRoot("agents-root")
	s.putRoot(r1)
	d := s.start(o.Syncer())
	for i := range 3 {
		s.putClient(fmt.Sprintf("agent-%d", i), s.issueClient(r1))
	}
	// A client Secret carrying a CA of its own, which signed its leaf.
	intruder := certs.MustCA(t, "intruder", time.Hour)
	s.putClient("intruder", s.issueClient(intruder))
	s.g.Eventually(s.getGateway).Should(HaveField("Annotations", HaveKeyWithValue(bundle.AnnotationClients, "renewed=3 pending=1 failed=0")))

	r2 := s.newRoot("agents-root")
	s.putRoot(r2)
	s.g.Eventually(s.getGateway).Should(HaveField("Annotations", HaveKeyWithValue(bundle.AnnotationPhase, string(bundle.PhaseRenewing))))
	// cert-manager moved one client to the new root; two are still on the old.
	s.reissueClient("agent-0", s.issueClient(r2))

	d.Stop()
	s.g.Expect(k8s.Delete(context.Background(), s.gatewaySecret())).To(Succeed())
	s.start(o.Syncer())

	s.g.Eventually(s.getGateway).Should(HaveField("Data", HaveKey("ca.crt")))
	gw := s.gatewaySecret()
	roots, err := bundle.ParseCertificates("ca.crt", gw.Data["ca.crt"])
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(fingerprints(roots)).To(ConsistOf(fingerprint(r2.Cert), fingerprint(r1.Cert)),
		"the new root, and the old one two clients still use; not the intruder")
	s.g.Expect(gw.Annotations).To(HaveKeyWithValue(bundle.AnnotationServer, fingerprint(r1.Cert)),
		"the old server credential comes back from the record: the server still presents root-1")
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonGatewayRestored + ": gateway Secret was deleted; restored")))
	s.g.Consistently(s.view, time.Second).Should(HaveField("Roots", HaveLen(2)))
}

// reissueClient issues the client's Certificate again with data (tls.crt,
// tls.key, ca.crt), as cert-manager does when it renews it: a request of the
// next revision, the Secret, the Certificate's revision.
func (s *setup) reissueClient(name string, data map[string][]byte) {
	s.t.Helper()
	ctx := context.Background()
	crt := &cmapi.Certificate{}
	s.g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: name}, crt)).To(Succeed())
	s.g.Expect(issuance.Issue(ctx, k8s, crt, data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey], data["ca.crt"])).To(Succeed())
}

func fingerprints(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fingerprint(c)
	}
	return out
}
