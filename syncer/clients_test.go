package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dualca/dualca/test/certs"
)

// countingReader counts the lists made through it.
type countingReader struct {
	client.Reader
	lists atomic.Int32
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists.Add(1)
	return r.Reader.List(ctx, list, opts...)
}

// TestClientReadsListOnlyAfterAChange: a watched tracker lists the clients
// at its first read and again only after an event; between events it
// returns the last read's result (a reconcile at rest costs nothing per
// client). A tracker nothing tells of changes (dualca status) lists at
// every read.
func TestClientReadsListOnlyAfterAChange(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	scheme, err := Scheme()
	g.Expect(err).NotTo(HaveOccurred())
	now := time.Now()
	ca := certs.MustCA(t, "root", 48*time.Hour)
	_, leaf1, _, err := ca.Leaf("agent-1", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	leaf2, leaf2PEM, _, err := ca.Leaf("agent-1", now.Add(-time.Minute), now.Add(2*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())

	crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent-1", Labels: map[string]string{"app": "agent"}},
		Spec: cmapi.CertificateSpec{SecretName: "agent-1-tls"}} //nolint:gosec // G101: a Secret's name, no credential
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent-1-tls",
		Labels: map[string]string{cmapi.PartOfCertManagerControllerLabelKey: "true"}},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: leaf1, caKey: ca.CertPEM}}
	store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(crt, secret).Build()
	reader := &countingReader{Reader: store}
	tracker := (&clientTracker{reader: reader, selector: labels.SelectorFromSet(labels.Set{"app": "agent"}),
		namespaces: []string{"agents"}}).watched()

	first, views, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Items).To(HaveLen(1))
	g.Expect(views).To(HaveKey("agents/agent-1"))
	g.Expect(reader.lists.Load()).To(BeEquivalentTo(2), "Certificates and Secrets listed")
	for range 3 {
		again, _, err := tracker.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(again.Items).To(Equal(first.Items))
	}
	g.Expect(reader.lists.Load()).To(BeEquivalentTo(2), "no event, no list")

	secret.Data[corev1.TLSCertKey] = leaf2PEM
	g.Expect(store.Update(ctx, secret)).To(Succeed())
	tracker.changed()
	renewed, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(reader.lists.Load()).To(BeEquivalentTo(4), "an event, a list")
	g.Expect(renewed.Items).To(HaveLen(1))
	g.Expect(renewed.Items[0].Leaf.Equal(leaf2)).To(BeTrue(), "the read after the event sees the renewed leaf")

	unwatched := &clientTracker{reader: reader, selector: tracker.selector, namespaces: tracker.namespaces}
	for range 2 {
		_, _, err := unwatched.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(reader.lists.Load()).To(BeEquivalentTo(8), "a tracker told of no change lists at every read")
}
