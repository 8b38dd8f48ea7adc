package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
)

// TestTheStatusConfigMapIsPublishedAndObeyed: dualca publishes its status
// to the status ConfigMap at once, writes it again only when it changes
// (its own writes start no reconcile loop), obeys a pause set there though
// its poll is minutes away (no poll runs meanwhile: the watch did it; how
// soon is not judged here), takes a pause put on the gateway Secret for
// nothing, and publishes again, without a poll, a ConfigMap deleted by
// hand.
func TestTheStatusConfigMapIsPublishedAndObeyed(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	ctx := context.Background()
	o := s.options().Syncer() // polls every five minutes: what happens here is the watches'
	d, _ := s.startOnFirstRoot(o)
	key := syncer.DefaultStatusConfigMap(s.gateway, syncer.DefaultStateSecret(s.gateway))
	kube := kubernetes.NewForConfigOrDie(restConfig)
	status := func() (*operator.Status, error) {
		return operator.ReadStatus(ctx, kube.CoreV1(), key, time.Hour, time.Now())
	}
	configMapWrites := d.configMapWrites

	// Published, steady, and nothing due before the roots expire: from now
	// on nothing changes, and nothing is written.
	s.g.Eventually(func(g Gomega) {
		r, err := status()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Phase).To(Equal(string(bundle.PhaseSteady)))
		g.Expect(r.Root).To(HaveField("Valid", true))
		g.Expect(r.Attention).To(BeEmpty())
		g.Expect(r.Next.Upcoming).NotTo(BeEmpty())
		g.Expect(r.Next.Upcoming[0].At).To(BeTemporally(">", time.Now().Add(time.Hour)), "nothing due soon")
	}).Should(Succeed())
	// At rest once the start's writes have landed: a second publish may
	// land just after the status first reads steady (seen once in a
	// clean-clone run: 2 writes, not 1, 11 ms after the count; what it
	// changed is not known yet). Settled is two counts a second apart that
	// agree; a loop of a write a second or faster never settles, and a
	// slower one is caught by the two seconds after.
	writes := -1
	s.g.Eventually(func() bool {
		n := configMapWrites()
		settled := n == writes
		writes = n
		return settled
	}).WithTimeout(30*time.Second).WithPolling(time.Second).Should(BeTrue(), "the start's writes land")
	s.g.Expect(writes).To(BeNumerically(">=", 1), "the count sees the writes that did happen")
	s.g.Expect(writes).To(BeNumerically("<=", 3), "the start publishes a few times at most")
	s.g.Consistently(configMapWrites).WithTimeout(2*time.Second).Should(Equal(writes), "no write, and no loop, at rest")

	// A pause on the gateway Secret is no control.
	s.g.Expect(k8s.Patch(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.gateway.Namespace, Name: s.gateway.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":"true"}}}`)))).To(Succeed())
	s.g.Eventually(func() map[string]string { return s.gatewaySecret().Annotations }).ShouldNot(HaveKey(bundle.AnnotationPaused), "written back")
	s.g.Expect(d.Gauge("dualca_paused")).To(BeZero())
	s.g.Expect(status()).To(HaveField("Paused", false))

	// A pause on the status ConfigMap is, at once: no poll runs meanwhile.
	polled := d.polls()
	s.g.Expect(k8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":"true"}}}`)))).To(Succeed())
	s.g.Eventually(func() float64 { return d.Gauge("dualca_paused") }).Should(Equal(1.0), "obeyed")
	s.g.Expect(d.polls()).To(Equal(polled), "obeyed from the watch, with the poll %s away", o.PollInterval)
	s.g.Eventually(status).Should(And(HaveField("Paused", true), HaveField("PausedAt", Not(BeNil()))))
	writes = configMapWrites()
	s.g.Consistently(configMapWrites).WithTimeout(2*time.Second).Should(Equal(writes), "publishing the pause starts no loop")

	// Resumed the same way.
	s.g.Expect(k8s.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":null}}}`)))).To(Succeed())
	s.g.Eventually(func() float64 { return d.Gauge("dualca_paused") }).Should(BeZero())
	s.g.Eventually(status).Should(HaveField("Paused", false))
	s.g.Expect(d.polls()).To(Equal(polled), "resumed from the watch")

	// Deleted by hand: published again at once.
	s.g.Expect(k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
	s.g.Eventually(func(g Gomega) {
		r, err := status()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Phase).To(Equal(string(bundle.PhaseSteady)))
		g.Expect(r.Attention).To(BeEmpty())
	}).Should(Succeed())
	s.g.Expect(d.polls()).To(Equal(polled), "published again from the watch")
}
