package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/issuance"
)

// clientLabel selects the client Certificates of these tests.
var clientLabel = map[string]string{"dualca.io/client": "agent"}

// badClient is a selected client whose certificates, as its
// CertificateRequest tells them, dualca must not trust, and the reason an
// operator is told.
type badClient struct {
	name   string
	data   map[string][]byte
	reason string
}

func badClients(t *testing.T, root *certs.CA) []badClient {
	now := time.Now()
	leaf := certs.MustNew(t, "agent", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{}, root)
	other := certs.MustCA(t, "other-root", time.Hour)
	// A CA with the root's very name, but not the root: it signs nothing
	// the client holds.
	sameName := certs.MustNew(t, root.Cert.Subject.CommonName, now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true, KeyType: certs.KeyRSA}, nil)
	tls := func(crt, ca []byte) map[string][]byte {
		return map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": ca}
	}
	junk := make([]byte, 4096)
	_, _ = rand.Read(junk)
	withHeaders := bytes.Replace(root.CertPEM, []byte("-----\n"), []byte("-----\nComment: hello\n\n"), 1)
	huge := bytes.Repeat(leaf.CertPEM, bundle.MaxPEMBytes/len(leaf.CertPEM)+1)
	return []badClient{
		{name: "garbage", data: tls([]byte("hello"), root.CertPEM), reason: "tls.crt: has data before the first PEM block"},
		{name: "truncated", data: tls(leaf.CertPEM[:len(leaf.CertPEM)/2], root.CertPEM), reason: "tls.crt: block 1 is truncated"},
		{name: "ca-as-leaf", data: tls(root.CertPEM, root.CertPEM), reason: "tls.crt: holds a CA certificate, not a client certificate"},
		{name: "key-in-ca", data: tls(leaf.CertPEM, append(bytes.Clone(root.CertPEM), leaf.KeyPEM...)), reason: "ca.crt: block 2 is an EC PRIVATE KEY"},
		{name: "leaf-in-ca", data: tls(leaf.CertPEM, leaf.CertPEM), reason: "ca.crt: block 1 is not a CA certificate"},
		{name: "headers", data: tls(leaf.CertPEM, withHeaders), reason: "ca.crt: block 1 has PEM headers"},
		{name: "binary-ca", data: tls(leaf.CertPEM, junk), reason: "ca.crt: has data before the first PEM block"},
		{name: "oversized", data: tls(huge, root.CertPEM), reason: "tls.crt: is " + fmt.Sprint(len(huge)) + " bytes, more than the limit"},
		{name: "other-issuer", data: tls(leaf.CertPEM, other.CertPEM), reason: "tls.crt: not issued by any certificate of ca.crt"},
		{name: "same-name-other-key", data: tls(leaf.CertPEM, sameName.CertPEM), reason: "tls.crt: not issued by any certificate of ca.crt"},
		{name: "no-ca", data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM}, reason: "ca.crt: missing"},
	}
}

func TestABadClientNeverReachesTheGateway(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.ClientSelector, o.ClientNamespaces = labels.SelectorFromSet(clientLabel), []string{s.ns}
	d, r1 := s.startOnFirstRoot(o.Syncer())
	for i := range 3 {
		s.putClient(fmt.Sprintf("good-%d", i), s.issueClient(r1))
	}
	s.g.Eventually(s.getGateway).Should(HaveField("Annotations", HaveKeyWithValue(bundle.AnnotationClients, Equal("renewed=3 pending=0 failed=0"))))
	before := s.gatewaySecret()

	cases := badClients(t, r1)
	for _, bad := range cases {
		s.putClient(bad.name, bad.data)
		// The reason reaches the operator as a Warning event naming the client...
		s.g.Eventually(s.events).Should(ContainElement(And(
			HavePrefix(bundle.ReasonClientInvalid+": client "+s.ns+"/"+bad.name+": "),
			ContainSubstring(bad.reason))), bad.name)
		// ...and in the log.
		quoted, _ := json.Marshal(bad.reason)
		s.g.Eventually(d.Log).Should(ContainSubstring(string(quoted[1:len(quoted)-1])), bad.name)
		// The gateway's trust and server credential are exactly as they were.
		after := s.gatewaySecret()
		s.g.Expect(after.Data).To(Equal(before.Data), bad.name)
		s.g.Expect(after.Annotations[bundle.AnnotationBundleHash]).To(Equal(before.Annotations[bundle.AnnotationBundleHash]), bad.name)
	}
	s.g.Expect(len(cases)).To(BeNumerically(">=", 10))
	t.Logf("%d bad clients reported, each with its own event and log line; the gateway's data unchanged", len(cases))

	// Anyone who may create CertificateRequests in the namespace can copy
	// a request's annotations and controller reference: a second request
	// claiming good-1's revision, with a CA of its own, makes good-1
	// unknown and is told; nothing of it reaches the gateway.
	ctx := context.Background()
	var genuine cmapi.CertificateRequest
	s.g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: issuance.RequestName("good-1", 1)}, &genuine)).To(Succeed())
	impostor := certs.MustCA(t, r1.Cert.Subject.CommonName, time.Hour)
	forgedLeaf := certs.MustNew(t, "good-1", time.Now().Add(-time.Minute), time.Now().Add(time.Hour), certs.Options{}, impostor)
	copied := &cmapi.CertificateRequest{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "good-1-copy",
		Labels: genuine.Labels, Annotations: genuine.Annotations, OwnerReferences: genuine.OwnerReferences},
		Spec: genuine.Spec}
	s.g.Expect(k8s.Create(ctx, copied)).To(Succeed())
	copied.Status = cmapi.CertificateRequestStatus{Certificate: forgedLeaf.CertPEM, CA: impostor.CertPEM}
	s.g.Expect(k8s.Status().Update(ctx, copied)).To(Succeed())
	s.g.Eventually(s.events).Should(ContainElement(And(
		HavePrefix(bundle.ReasonClientInvalid+": client "+s.ns+"/good-1: "),
		ContainSubstring("2 certificate requests claim its revision 1"))))
	after := s.gatewaySecret()
	s.g.Expect(after.Data).To(Equal(before.Data), "a copied request changes nothing of the gateway")

	// A rotation with all of them selected: the bundle holds the two roots
	// and nothing any bad client carried, the good clients are renewed.
	r2 := s.newRoot("root-2")
	s.putRoot(r2)
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))
	s.g.Consistently(s.view, 2*time.Second).Should(HaveField("Roots", []string{"root-2", "root-1"}))
}

// issueClient is a client Secret's data as cert-manager's CA issuer writes
// it: a leaf from root, and the root as ca.crt.
func (s *setup) issueClient(root *certs.CA) map[string][]byte {
	s.t.Helper()
	now := time.Now()
	leaf := certs.MustNew(s.t, "agent", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{}, root)
	return map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM, "ca.crt": root.CertPEM}
}

// putClient creates a selected Certificate and, unless data is nil, issues
// it with data (tls.crt, tls.key, ca.crt) as cert-manager would: its
// request, its Secret, its revision.
func (s *setup) putClient(name string, data map[string][]byte) {
	s.t.Helper()
	ctx := context.Background()
	crt := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name, Labels: clientLabel},
		Spec: cmapi.CertificateSpec{CommonName: name, SecretName: name,
			IssuerRef: cmmeta.IssuerReference{Name: "agents", Kind: "Issuer", Group: "cert-manager.io"}},
	}
	s.g.Expect(k8s.Create(ctx, crt)).To(Succeed())
	if data == nil {
		return
	}
	s.g.Expect(issuance.Issue(ctx, k8s, crt, data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey], data["ca.crt"])).To(Succeed())
}
