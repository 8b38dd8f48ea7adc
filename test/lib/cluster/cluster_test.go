package cluster_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/test/lib/cluster"
)

const ns = "e2e"

// TestCluster drives a real cert-manager through what dualca's end-to-end
// tests need: a root, a CA issuer, clients, root rotations, and issuances
// that hang or fail. The subtests share one cluster and run in order.
func TestCluster(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := cluster.StartT(t, cluster.Options{})

	g.Expect(c.CreateNamespace(ctx, ns)).To(Succeed())
	root, err := c.CreateRootCA(ctx, ns, "root-ca")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(root.IsCA).To(BeTrue())
	g.Expect(root.CheckSignatureFrom(root)).To(Succeed(), "self-signed")
	g.Expect(root.PublicKey).To(BeAssignableToTypeOf(&ecdsa.PublicKey{}))
	g.Expect(root.PublicKey.(*ecdsa.PublicKey).Curve).To(Equal(elliptic.P256()))
	g.Expect(root.NotAfter.Sub(root.NotBefore)).To(Equal(2160 * time.Hour))
	g.Expect(c.CreateCAIssuer(ctx, ns, "ca", "root-ca")).To(Succeed())
	labels := map[string]string{"example.com/role": "client"}
	clients, err := c.CreateClients(ctx, ns, "ca", "client", 3, labels)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(clients).To(Equal([]string{"client-1", "client-2", "client-3"}))

	t.Run("a client Secret holds the leaf alone in tls.crt and the root alone in ca.crt", func(t *testing.T) {
		g := NewWithT(t)
		for _, name := range clients {
			s := secret(g, c, name)
			g.Expect(s.Labels).To(HaveKeyWithValue("example.com/role", "client"), "from secretTemplate")
			g.Expect(s.Labels).To(HaveKeyWithValue("controller.cert-manager.io/fao", "true"))
			leaf := certs(g, s, corev1.TLSCertKey)
			g.Expect(leaf).To(HaveLen(1))
			g.Expect(leaf[0].Subject.CommonName).To(Equal(name))
			g.Expect(leaf[0].ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
			g.Expect(leaf[0].CheckSignatureFrom(root)).To(Succeed())
			g.Expect(certs(g, s, cmmeta.TLSCAKey)).To(ConsistOf(root))
			t.Logf("secret %s: type %s, labels %v, annotations %v, keys %v", name, s.Type, s.Labels, s.Annotations, keys(s.Data))
		}
	})

	t.Run("each rotation gives a new root with a new key, and a reissued client follows it", func(t *testing.T) {
		g := NewWithT(t)
		prev, keysSeen := root, [][]byte{root.RawSubjectPublicKeyInfo}
		from := *certificate(g, c, "root-ca").Status.Revision
		var rotated []*x509.Certificate
		for range 2 {
			rotation, err := c.RotateRootThrough(ctx, ns, "root-ca")
			g.Expect(err).NotTo(HaveOccurred())
			next := rotation.Root
			g.Expect(rotation.Passed).To(BeEmpty(), "one issuance for the trigger")
			rotated = append(rotated, next)
			g.Expect(next.IsCA).To(BeTrue())
			g.Expect(next.SerialNumber).NotTo(Equal(prev.SerialNumber))
			g.Expect(keysSeen).NotTo(ContainElement(next.RawSubjectPublicKeyInfo), "a new key")
			keysSeen = append(keysSeen, next.RawSubjectPublicKeyInfo)

			leaf, err := c.Reissue(ctx, ns, "client-1")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(leaf.CheckSignatureFrom(next)).To(Succeed())
			g.Expect(leaf.CheckSignatureFrom(prev)).NotTo(Succeed())
			g.Expect(certs(g, secret(g, c, "client-1"), cmmeta.TLSCAKey)).To(ConsistOf(next))
			prev = next
		}
		// Its story tells each issuance: cert-manager's reason for the
		// first, a request created for each revision (events are sent in
		// the background: waited for), and the request it keeps.
		g.Eventually(func() []string { return c.Story(ctx, ns, "client-1") }).WithTimeout(10 * time.Second).Should(And(
			ContainElement(ContainSubstring("event Certificate Issuing (x1): Issuing certificate as Secret does not exist")),
			ContainElement(HaveSuffix(`event Certificate Requested (x1): Created new CertificateRequest resource "client-1-1"`)),
			ContainElement(HaveSuffix(`event Certificate Requested (x1): Created new CertificateRequest resource "client-1-3"`)),
			ContainElement(HaveSuffix(" request client-1-3 revision 3"))))
		// Two issuances: the roots in between are found from the root's
		// requests, as RotateRootThrough finds those of a double issuance.
		g.Expect(*certificate(g, c, "root-ca").Status.Revision).To(Equal(from + 2))
		between, err := cluster.IssuedBetween(c, ctx, types.NamespacedName{Namespace: ns, Name: "root-ca"}, from, from+2)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(between).To(HaveExactElements(rotated[0]))
		between, err = cluster.IssuedBetween(c, ctx, types.NamespacedName{Namespace: ns, Name: "root-ca"}, from-1, from+3)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(between).To(HaveExactElements(root, rotated[0], rotated[1]))
		// Clients are not renewed by a rotation: client-2 still has its
		// leaf from the first root.
		g.Expect(certs(g, secret(g, c, "client-2"), corev1.TLSCertKey)[0].CheckSignatureFrom(root)).To(Succeed())
	})

	t.Run("a renewal stays in flight while its issuer is not ready", func(t *testing.T) {
		g := NewWithT(t)
		// An issuer on a copy of the root, which then disappears.
		rootSecret := secret(g, c, "root-ca")
		g.Expect(c.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-root"},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: rootSecret.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: rootSecret.Data[corev1.TLSPrivateKeyKey]},
		})).To(Succeed())
		g.Expect(c.CreateCAIssuer(ctx, ns, "gone-ca", "gone-root")).To(Succeed())
		_, err := c.CreateClients(ctx, ns, "gone-ca", "stuck", 1, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gone-root"}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			issuer := &cmapi.Issuer{}
			g.Expect(c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "gone-ca"}, issuer)).To(Succeed())
			g.Expect(issuer.Status.Conditions).To(ContainElement(And(
				HaveField("Type", cmapi.IssuerConditionReady), HaveField("Status", cmmeta.ConditionFalse))))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		g.Expect(c.Trigger(ctx, ns, "stuck-1")).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(request(g, c, "stuck-1", 2).Status.Conditions).To(ContainElement(And(
				HaveField("Type", cmapi.CertificateRequestConditionReady),
				HaveField("Status", cmmeta.ConditionFalse),
				HaveField("Reason", cmapi.CertificateRequestReasonPending))))
		}).WithTimeout(2 * time.Minute).Should(Succeed()) // a busy machine: make test runs the soak and e2e beside it
		crt := certificate(g, c, "stuck-1")
		g.Expect(crt.Status.Conditions).To(ContainElements(
			And(HaveField("Type", cmapi.CertificateConditionReady), HaveField("Status", cmmeta.ConditionTrue)),
			And(HaveField("Type", cmapi.CertificateConditionIssuing), HaveField("Status", cmmeta.ConditionTrue),
				HaveField("Reason", "ManuallyTriggered"))))
		g.Expect(crt.Status.NextPrivateKeySecretName).NotTo(BeNil())
		g.Expect(crt.Status.LastFailureTime).To(BeNil())
		t.Logf("certificate status:\n%s\ncertificate request status:\n%s", toJSON(crt.Status), toJSON(request(g, c, "stuck-1", 2).Status))
	})

	t.Run("a failed issuance is recorded on the Certificate and counted again when retriggered", func(t *testing.T) {
		g := NewWithT(t)
		// A root certificate with some other key: the issuer is Ready (its
		// check does not compare them) but every signature fails.
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		g.Expect(err).NotTo(HaveOccurred())
		der, err := x509.MarshalECPrivateKey(key)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(c.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-root"},
			Type:       corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       secret(g, c, "root-ca").Data[corev1.TLSCertKey],
				corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
			},
		})).To(Succeed())
		g.Expect(c.CreateCAIssuer(ctx, ns, "bad-ca", "bad-root")).To(Succeed())
		g.Expect(c.Client.Create(ctx, c.ClientCertificate(ns, "bad-ca", "bad-1", nil))).To(Succeed())

		failedAfter := func(attempts int) func(g Gomega) {
			return func(g Gomega) {
				crt := certificate(g, c, "bad-1")
				g.Expect(crt.Status.FailedIssuanceAttempts).To(HaveValue(Equal(attempts)))
				g.Expect(crt.Status.LastFailureTime).NotTo(BeNil())
				g.Expect(crt.Status.Conditions).To(ContainElements(
					And(HaveField("Type", cmapi.CertificateConditionReady), HaveField("Status", cmmeta.ConditionFalse)),
					And(HaveField("Type", cmapi.CertificateConditionIssuing), HaveField("Status", cmmeta.ConditionFalse),
						HaveField("Reason", "Failed"))))
			}
		}
		g.Eventually(failedAfter(1)).WithTimeout(30 * time.Second).Should(Succeed())
		cr := request(g, c, "bad-1", 1)
		g.Expect(cr.Status.Conditions).To(ContainElement(And(
			HaveField("Type", cmapi.CertificateRequestConditionReady),
			HaveField("Reason", cmapi.CertificateRequestReasonFailed),
			HaveField("Message", ContainSubstring("doesn't match parent's PublicKey")))))
		err = c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bad-1"}, &corev1.Secret{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no Secret is written: %v", err)
		t.Logf("certificate status after the first failure:\n%s\ncertificate request status:\n%s",
			toJSON(certificate(g, c, "bad-1").Status), toJSON(cr.Status))

		// A manual trigger skips the backoff (1h after one failure).
		g.Expect(c.Trigger(ctx, ns, "bad-1")).To(Succeed())
		g.Eventually(failedAfter(2)).WithTimeout(30 * time.Second).Should(Succeed())
		t.Logf("certificate status after the second failure:\n%s", toJSON(certificate(g, c, "bad-1").Status))
	})

	t.Run("cert-manager labels the Secrets it writes, not those it reads", func(t *testing.T) {
		g := NewWithT(t)
		list := &corev1.SecretList{}
		g.Expect(c.Client.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		labelled := map[string]bool{}
		for _, s := range list.Items {
			labelled[s.Name] = s.Labels["controller.cert-manager.io/fao"] == "true"
			t.Logf("secret %s: labels %v", s.Name, s.Labels)
		}
		g.Expect(labelled).To(HaveKeyWithValue("root-ca", true))
		g.Expect(labelled).To(HaveKeyWithValue("client-1", true))
		g.Expect(labelled).To(HaveKeyWithValue("bad-root", false))
	})

	t.Run("a restarted cert-manager catches up", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(c.StopCertManager()).To(Succeed())
		g.Expect(c.Client.Create(ctx, c.ClientCertificate(ns, "ca", "late-1", nil))).To(Succeed())
		g.Consistently(func() error {
			return c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "late-1"}, &corev1.Secret{})
		}).WithTimeout(time.Second).Should(MatchError(apierrors.IsNotFound, "IsNotFound"))
		g.Expect(c.StartCertManager(ctx)).To(Succeed())
		g.Expect(c.WaitReady(ctx, ns, "late-1")).To(Succeed())
	})

	// The test suite runs on Linux (the control plane is built for it), so
	// the child processes are read from /proc.
	t.Run("stopping leaves no process behind", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(children(g)).NotTo(BeEmpty(), "kube-apiserver, etcd and cert-manager run")
		g.Expect(c.Stop()).To(Succeed())
		g.Expect(children(g)).To(BeEmpty())
	})
}

func secret(g Gomega, c *cluster.Cluster, name string) *corev1.Secret {
	s := &corev1.Secret{}
	g.Expect(c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, s)).To(Succeed())
	return s
}

func certificate(g Gomega, c *cluster.Cluster, name string) *cmapi.Certificate {
	crt := &cmapi.Certificate{}
	g.Expect(c.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, crt)).To(Succeed())
	return crt
}

// request is the CertificateRequest of a Certificate's revision.
func request(g Gomega, c *cluster.Cluster, certName string, revision int) *cmapi.CertificateRequest {
	list := &cmapi.CertificateRequestList{}
	g.Expect(c.Client.List(context.Background(), list, client.InNamespace(ns))).To(Succeed())
	var found *cmapi.CertificateRequest
	for i, cr := range list.Items {
		if cr.Annotations[cmapi.CertificateNameKey] == certName &&
			cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey] == strconv.Itoa(revision) {
			found = &list.Items[i]
		}
	}
	g.Expect(found).NotTo(BeNil(), "a CertificateRequest for revision %d of %s", revision, certName)
	return found
}

// certs parses the PEM certificates under key in a Secret.
func certs(g Gomega, s *corev1.Secret, key string) []*x509.Certificate {
	parsed, err := certutil.ParseCertsPEM(s.Data[key])
	g.Expect(err).NotTo(HaveOccurred(), "%s of secret %s", key, s.Name)
	return parsed
}

func keys(data map[string][]byte) []string {
	var k []string
	for key := range data {
		k = append(k, key)
	}
	return k
}

func toJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// children are the commands of the live child processes of the test binary.
func children(g Gomega) []string {
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	g.Expect(err).NotTo(HaveOccurred())
	var found []string
	for _, path := range stats {
		stat, err := os.ReadFile(path)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		end := bytes.LastIndexByte(stat, ')')
		fields := strings.Fields(string(stat[end+1:]))
		if len(fields) > 1 && fields[0] != "Z" && fields[1] == strconv.Itoa(os.Getpid()) {
			found = append(found, string(stat[bytes.IndexByte(stat, '(')+1:end]))
		}
	}
	return found
}
