package issuance_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"strconv"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/dualca/dualca/test/lib/certs"
	"github.com/dualca/dualca/test/lib/issuance"
)

// These tests run on controller-runtime's fake client, with the status
// subresources of the two cert-manager kinds, so that they need no control
// plane (make test-unit runs them). The users of the package, the
// integration tests, issue against a real kube-apiserver with cert-manager's
// CRDs, which also validate the request's schema.

const ns = "agents"

var labels = map[string]string{"dualca.io/client": "agent"}

// world is a fake API server holding the Certificate agent-1, and the
// requests sent to it, by verb and kind.
type world struct {
	c    client.Client
	crt  *cmapi.Certificate
	mu   sync.Mutex
	sent []string
}

func newWorld(t *testing.T, g Gomega) *world {
	t.Helper()
	scheme := runtime.NewScheme()
	g.Expect(corev1.AddToScheme(scheme)).To(Succeed())
	g.Expect(cmapi.AddToScheme(scheme)).To(Succeed())
	w := &world{}
	count := func(verb string, obj runtime.Object) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sent = append(w.sent, verb+" "+kind(obj))
	}
	base := fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&cmapi.Certificate{}, &cmapi.CertificateRequest{}).Build()
	w.c = interceptor.NewClient(base, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			count("get", obj)
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			count("list", list)
			return c.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count("create", obj)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count("update", obj)
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count("delete", obj)
			return c.Delete(ctx, obj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			count("update/"+sub, obj)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	// The fake API server sets no UID; a real one would.
	w.crt = &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-1", Labels: labels, UID: "uid-agent-1"},
		Spec: cmapi.CertificateSpec{CommonName: "agent-1", SecretName: "agent-1-tls", //nolint:gosec // G101: a Secret's name, no credential
			IssuerRef: cmmeta.IssuerReference{Name: "agents", Kind: "Issuer", Group: "cert-manager.io"}},
	}
	g.Expect(w.c.Create(context.Background(), w.crt)).To(Succeed())
	w.requests()
	return w
}

func kind(obj runtime.Object) string {
	switch obj.(type) {
	case *cmapi.Certificate:
		return "certificate"
	case *cmapi.CertificateRequest, *cmapi.CertificateRequestList:
		return "certificaterequest"
	case *corev1.Secret:
		return "secret"
	}
	return "other"
}

// requests returns the requests sent since the last call.
func (w *world) requests() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.sent
	w.sent = nil
	return out
}

func (w *world) request(g Gomega, revision int) *cmapi.CertificateRequest {
	cr := &cmapi.CertificateRequest{}
	g.Expect(w.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: issuance.RequestName("agent-1", revision)}, cr)).To(Succeed())
	return cr
}

func (w *world) certificate(g Gomega) *cmapi.Certificate {
	crt := &cmapi.Certificate{}
	g.Expect(w.c.Get(context.Background(), client.ObjectKeyFromObject(w.crt), crt)).To(Succeed())
	return crt
}

func (w *world) secret(g Gomega) *corev1.Secret {
	s := &corev1.Secret{}
	g.Expect(w.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "agent-1-tls"}, s)).To(Succeed())
	return s
}

func TestAFirstIssuanceIsWhatCertManagerWrites(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, g)
	root := certs.MustCA(t, "root", time.Hour)
	leaf := certs.MustNew(t, "agent-1", time.Now().Add(-time.Minute), time.Now().Add(30*time.Minute), certs.Options{}, root)

	g.Expect(issuance.Issue(ctx, w.c, w.crt, leaf.CertPEM, leaf.KeyPEM, root.CertPEM)).To(Succeed())
	g.Expect(w.requests()).To(Equal([]string{
		"create certificaterequest", "update/status certificaterequest", "create secret", "update/status certificate",
	}), "in cert-manager's order, no read and no list for a first issuance: the benchmark issues 50,000 this way")

	// The request: what dualca matches it to its Certificate by.
	cr := w.request(g, 1)
	g.Expect(cr.Labels).To(Equal(labels), "the Certificate's labels, so that the client selector selects it too")
	g.Expect(cr.Annotations).To(HaveKeyWithValue(cmapi.CertificateNameKey, "agent-1"))
	g.Expect(cr.Annotations).To(HaveKeyWithValue(cmapi.CertificateRequestRevisionAnnotationKey, "1"))
	g.Expect(cr.Annotations).To(HaveKeyWithValue(cmapi.CertificateRequestPrivateKeyAnnotationKey, HavePrefix("agent-1-")))
	owner := metav1.GetControllerOf(cr)
	g.Expect(owner).NotTo(BeNil())
	g.Expect(*owner).To(And(HaveField("UID", w.crt.UID), HaveField("Kind", "Certificate"), HaveField("APIVersion", "cert-manager.io/v1")))
	g.Expect(cr.Spec.IssuerRef).To(Equal(w.crt.Spec.IssuerRef))
	block, _ := pem.Decode(cr.Spec.Request)
	g.Expect(block).NotTo(BeNil())
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(csr.CheckSignature()).To(Succeed(), "a CSR, as the CRD's description asks")
	g.Expect(cr.Status.Certificate).To(Equal(leaf.CertPEM))
	g.Expect(cr.Status.CA).To(Equal(root.CertPEM))
	g.Expect(cr.Status.Conditions).To(ContainElement(And(HaveField("Type", cmapi.CertificateRequestConditionReady),
		HaveField("Status", cmmeta.ConditionTrue), HaveField("Reason", cmapi.CertificateRequestReasonIssued))))

	// The Secret, for TLS clients of the tests to load.
	s := w.secret(g)
	g.Expect(s.Type).To(Equal(corev1.SecretTypeTLS))
	g.Expect(s.Data).To(Equal(map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": root.CertPEM}))
	g.Expect(s.Labels).To(HaveKeyWithValue(cmapi.PartOfCertManagerControllerLabelKey, "true"))
	g.Expect(s.Annotations).To(HaveKeyWithValue(cmapi.CertificateNameKey, "agent-1"))

	// The Certificate: its revision says which request is current.
	crt := w.certificate(g)
	g.Expect(crt.Status.Revision).To(HaveValue(Equal(1)))
	g.Expect(crt.Status.NotAfter.Time).To(BeTemporally("==", leaf.Cert.NotAfter))
	g.Expect(crt.Status.NotBefore.Time).To(BeTemporally("==", leaf.Cert.NotBefore))
	g.Expect(crt.Status.Conditions).To(ConsistOf(And(HaveField("Type", cmapi.CertificateConditionReady), HaveField("Status", cmmeta.ConditionTrue))))
	g.Expect(w.crt.Status).To(Equal(crt.Status), "the caller's Certificate is the one written")
}

// A re-issue after dualca triggered it: the next revision, the Issuing
// condition gone, the older request deleted, another Certificate's request
// left alone, and a Certificate written by someone else meanwhile (a
// stale copy) is read again rather than failing.
func TestAReissueMovesToTheNextRevision(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, g)
	r1 := certs.MustCA(t, "root", time.Hour)
	r2 := certs.MustCA(t, "root", 2*time.Hour)
	now := time.Now()
	leaf1 := certs.MustNew(t, "agent-1", now.Add(-time.Minute), now.Add(30*time.Minute), certs.Options{}, r1)
	leaf2 := certs.MustNew(t, "agent-1", now.Add(-time.Minute), now.Add(90*time.Minute), certs.Options{}, r2)
	other := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent-2", Labels: labels, UID: "uid-agent-2"},
		Spec: cmapi.CertificateSpec{SecretName: "agent-2-tls", IssuerRef: w.crt.Spec.IssuerRef}} //nolint:gosec // G101: a Secret's name, no credential
	g.Expect(w.c.Create(ctx, other)).To(Succeed())
	for range 2 {
		g.Expect(issuance.Issue(ctx, w.c, other, leaf1.CertPEM, leaf1.KeyPEM, r1.CertPEM)).To(Succeed())
	}
	g.Expect(issuance.Issue(ctx, w.c, w.crt, leaf1.CertPEM, leaf1.KeyPEM, r1.CertPEM)).To(Succeed())

	// dualca triggers the renewal, and someone else labels the Secret.
	stale := w.crt.DeepCopy()
	crt := w.certificate(g)
	crt.Status.Conditions = append(crt.Status.Conditions, cmapi.CertificateCondition{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "Renewing"})
	g.Expect(w.c.Status().Update(ctx, crt)).To(Succeed())
	s := w.secret(g)
	s.Labels["team"] = "edge"
	g.Expect(w.c.Update(ctx, s)).To(Succeed())
	w.requests()

	g.Expect(issuance.Issue(ctx, w.c, stale, leaf2.CertPEM, leaf2.KeyPEM, r2.CertPEM)).To(Succeed())
	g.Expect(w.requests()).To(Equal([]string{
		"create certificaterequest", "update/status certificaterequest",
		"create secret", "get secret", "update secret",
		"update/status certificate", "get certificate", "update/status certificate",
		"list certificaterequest", "delete certificaterequest",
	}), "the Secret and the stale Certificate read again once each, the older request deleted")

	g.Expect(w.request(g, 2).Status.Certificate).To(Equal(leaf2.CertPEM))
	err := w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: issuance.RequestName("agent-1", 1)}, &cmapi.CertificateRequest{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "revision 1 is garbage-collected: %v", err)
	g.Expect(w.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: issuance.RequestName("agent-2", 2)}, &cmapi.CertificateRequest{})).To(Succeed(),
		"agent-2's current request is not agent-1's to delete")

	got := w.certificate(g)
	g.Expect(got.Status.Revision).To(HaveValue(Equal(2)))
	g.Expect(got.Status.NotAfter.Time).To(BeTemporally("==", leaf2.Cert.NotAfter))
	g.Expect(got.Status.Conditions).NotTo(ContainElement(HaveField("Type", cmapi.CertificateConditionIssuing)), "issued: no longer issuing")
	g.Expect(stale.Status.Revision).To(HaveValue(Equal(2)), "the caller's copy is the one written")

	s = w.secret(g)
	g.Expect(s.Data).To(HaveKeyWithValue("tls.crt", leaf2.CertPEM))
	g.Expect(s.Data).To(HaveKeyWithValue("ca.crt", r2.CertPEM))
	g.Expect(s.Labels).To(HaveKeyWithValue("team", "edge"), "cert-manager keeps what others put on the Secret")
}

// A request keeps what its history limit says: with a limit of 2, the
// revision before the current one stays.
func TestTheHistoryLimitIsKept(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, g)
	two := int32(2)
	w.crt.Spec.RevisionHistoryLimit = &two
	g.Expect(w.c.Update(ctx, w.crt)).To(Succeed())
	root := certs.MustCA(t, "root", time.Hour)
	for range 3 {
		g.Expect(issuance.Issue(ctx, w.c, w.crt, root.CertPEM, root.KeyPEM, root.CertPEM)).To(Succeed())
	}
	var list cmapi.CertificateRequestList
	g.Expect(w.c.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	var revisions []string
	for _, cr := range list.Items {
		revisions = append(revisions, cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
	}
	g.Expect(revisions).To(ConsistOf("2", "3"))
}

func TestWhatCannotBeIssued(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	w := newWorld(t, g)
	root := certs.MustCA(t, "root", time.Hour)

	unsaved := w.crt.DeepCopy()
	unsaved.UID = ""
	g.Expect(issuance.Issue(ctx, w.c, unsaved, root.CertPEM, root.KeyPEM, root.CertPEM)).To(MatchError(ContainSubstring("create it first")))
	g.Expect(w.requests()).To(BeEmpty(), "nothing written for a Certificate that cannot be issued")

	// Damaged PEM is issued as given, for the bad-input tests: the times
	// are left unset, as cert-manager could not read them either.
	g.Expect(issuance.Issue(ctx, w.c, w.crt, []byte("hello"), []byte("not a key"), nil)).To(Succeed())
	crt := w.certificate(g)
	g.Expect(crt.Status.Revision).To(HaveValue(Equal(1)))
	g.Expect(crt.Status.NotAfter).To(BeNil())
	g.Expect(w.request(g, 1).Status.Certificate).To(Equal([]byte("hello")))
	g.Expect(w.secret(g).Data).To(HaveKeyWithValue("tls.key", []byte("not a key")))
	g.Expect(strconv.Itoa(*crt.Status.Revision)).To(Equal(w.request(g, 1).Annotations[cmapi.CertificateRequestRevisionAnnotationKey]))
}
