package e2e

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
)

// TestStatusShowsARotationAtAGlance reads what `dualca status` shows,
// the status dualca publishes in its ConfigMap, during a slowed-down
// rotation: the roots with what each is there for, the client progress,
// and nothing to attend to; then what needs attention: a status grown old,
// a renewal stalled, a root Secret broken; and a ConfigMap nobody
// published.
func TestStatusShowsARotationAtAGlance(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	o := s.options(false)
	o.StatusConfigMap = types.NamespacedName{Namespace: s.ns, Name: "gateway-status"}
	o.RenewalQPS, o.RenewalBurst = 2, 1 // about ten seconds of renewals
	s.startDualca(o)
	s.startTraffic()
	r2 := s.rotate()
	s.waitPhase(r2, bundle.PhaseRenewing)

	var report *operator.Status
	s.g.Eventually(func(g Gomega) {
		var err error
		report, err = operator.ReadStatus(s.ctx, s.kube.CoreV1(), o.StatusConfigMap, time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(report.Clients).NotTo(BeNil())
		g.Expect(report.Clients.Renewed).To(BeNumerically(">", 0), "some clients renewed")
		g.Expect(report.Clients.Pending).To(BeNumerically(">", 0), "some still pending")
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	var text bytes.Buffer
	s.g.Expect(report.WriteText(&text)).To(Succeed())
	t.Logf("dualca status during the rotation:\n%s", text.String())

	s.g.Expect(report.Gateway).To(Equal(o.GatewaySecret.String()))
	s.g.Expect(report.Strategy).To(Equal(bundle.StrategyZeroDowntime))
	s.g.Expect(report.Phase).To(Equal(string(bundle.PhaseRenewing)))
	s.g.Expect(report.Root.Valid).To(BeTrue())
	s.g.Expect(report.Root.Fingerprint).To(Equal(bundle.Short(bundle.Fingerprint(r2))))
	s.g.Expect(report.Attention).To(BeEmpty())
	s.g.Expect(report.ObservedAt).To(HaveValue(BeTemporally("~", time.Now(), 3*o.PollInterval)))
	s.g.Expect(report.Roots).To(HaveLen(2))
	current, server := report.Roots[0], report.Roots[1]
	s.g.Expect(current.Fingerprint).To(Equal(bundle.Short(bundle.Fingerprint(r2))))
	s.g.Expect(current.Current).To(BeTrue())
	s.g.Expect(server.Server).To(BeTrue())
	s.g.Expect(*current.Clients+*server.Clients).To(Equal(clients), "every client needs one of the two roots")
	s.g.Expect(*current.Clients).To(Equal(report.Clients.Renewed), "counted from the same decision")
	s.g.Expect(text.String()).To(And(ContainSubstring("Renewing"), ContainSubstring("server, needed by"), ContainSubstring("published"), ContainSubstring("attention: none")))
	s.logStatus("during the rotation", report)

	// The ConfigMap holds public material alone.
	cm := s.statusConfigMap(o.StatusConfigMap)
	s.g.Expect(cm.Data).To(HaveLen(1))
	s.g.Expect(cm.Data).To(HaveKey(syncer.StatusKey))
	s.g.Expect(cm.Data[syncer.StatusKey]).NotTo(Or(ContainSubstring("BEGIN"), ContainSubstring("PRIVATE"), ContainSubstring(bundle.Fingerprint(r2))))
	s.g.Expect(cm.BinaryData).To(BeEmpty())

	// Seen later, as if dualca had stopped publishing: stale once its next
	// step is three poll intervals past; and a renewal stalled past
	// --stalled-after.
	s.g.Expect(report.Next).NotTo(BeNil())
	s.g.Expect(report.Next.Upcoming).NotTo(BeEmpty(), "a rotation renewing has a next step")
	due := report.Next.Upcoming[0].At
	later, err := operator.ReadStatus(s.ctx, s.kube.CoreV1(), o.StatusConfigMap, time.Second, due.Add(3*o.PollInterval+time.Minute))
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(later.Attention).To(ContainElements(ContainSubstring("more than 3 poll intervals (10s): is dualca running"),
		ContainSubstring("client renewal stalled")))
	s.converged(r2, false, 60*time.Second)

	// A root Secret that is not usable is published as such. (dualca is
	// pointed at a broken copy: cert-manager would mend its own root
	// Secret at once.)
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "broken-root"}, Type: corev1.SecretTypeTLS}
	root := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: rootName}, root)).To(Succeed())
	broken.Data = map[string][]byte{"tls.crt": root.Data["tls.crt"], "tls.key": []byte("not a key")}
	s.g.Expect(s.c.Client.Create(s.ctx, broken)).To(Succeed())
	o.RootSecret.Name = broken.Name
	s.startDualca(o)
	s.g.Eventually(func(g Gomega) {
		r, err := operator.ReadStatus(s.ctx, s.kube.CoreV1(), o.StatusConfigMap, time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Root).NotTo(BeNil())
		g.Expect(r.Root.Valid).To(BeFalse())
		g.Expect(r.Root.Secret).To(Equal(s.ns + "/broken-root"))
		g.Expect(r.Attention).To(ContainElement(HavePrefix("invalid root: tls.key")))
		g.Expect(r.Roots).To(HaveLen(1), "the gateway as it was")
		report = r
	}).WithTimeout(20 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	text.Reset()
	s.g.Expect(report.WriteText(&text)).To(Succeed())
	t.Logf("dualca status with the root broken:\n%s", text.String())

	// A ConfigMap nobody publishes to: dualca is not running there.
	missing, err := operator.ReadStatus(s.ctx, s.kube.CoreV1(), types.NamespacedName{Namespace: s.ns, Name: "nobody-publishes-here"}, time.Hour, time.Now())
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(missing.Attention).To(ConsistOf(ContainSubstring("dualca has not published status to configmap " + s.ns + "/nobody-publishes-here: is it running?")))
}
