package e2e

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// TestStatusShowsARotationAtAGlance runs `dualca status`'s report during a
// slowed-down rotation: the roots with what each is there for, the client
// progress, and nothing to attend to; then with the root Secret broken.
func TestStatusShowsARotationAtAGlance(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	o := s.options(false)
	o.RenewalQPS, o.RenewalBurst = 2, 1 // about ten seconds of renewals
	s.startDualca(o)
	s.startTraffic()
	r2 := s.rotate()
	s.waitPhase(r2, bundle.PhaseRenewing)

	opts := syncer.StatusOptions{GatewaySecret: o.GatewaySecret, RootSecret: o.RootSecret,
		ClientSelector: o.ClientSelector, ClientNamespaces: o.ClientNamespaces, StalledAfter: time.Hour}
	var report *syncer.Report
	s.g.Eventually(func(g Gomega) {
		var err error
		report, err = syncer.Status(s.ctx, s.c.Client, opts, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(report.Clients.Renewed).To(BeNumerically(">", 0), "some clients renewed")
		g.Expect(report.Clients.Pending).To(BeNumerically(">", 0), "some still pending")
	}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	var text bytes.Buffer
	s.g.Expect(report.WriteText(&text)).To(Succeed())
	t.Logf("dualca status during the rotation:\n%s", text.String())

	s.g.Expect(report.Strategy).To(Equal(bundle.StrategyZeroDowntime))
	s.g.Expect(report.Phase).To(Equal(string(bundle.PhaseRenewing)))
	s.g.Expect(report.Root.Valid).To(BeTrue())
	s.g.Expect(report.Attention).To(BeEmpty())
	s.g.Expect(report.Roots).To(HaveLen(2))
	current, server := report.Roots[0], report.Roots[1]
	s.g.Expect(current.Fingerprint).To(Equal(bundle.Short(bundle.Fingerprint(r2))))
	s.g.Expect(current.Current).To(BeTrue())
	s.g.Expect(server.Server).To(BeTrue())
	s.g.Expect(*current.Clients+*server.Clients).To(Equal(clients), "every client needs one of the two roots")
	s.g.Expect(text.String()).To(And(ContainSubstring("Renewing"), ContainSubstring("server, needed by"), ContainSubstring("attention: none")))
	s.g.Expect(text.String()).NotTo(ContainSubstring("BEGIN"), "no certificate material")

	var js bytes.Buffer
	s.g.Expect(report.WriteJSON(&js)).To(Succeed())
	var back syncer.Report
	s.g.Expect(json.Unmarshal(js.Bytes(), &back)).To(Succeed())
	s.g.Expect(back.Roots).To(HaveLen(2))
	s.g.Expect(back.Clients).To(Equal(report.Clients))

	// A root Secret that is not usable needs attention. (A copy with a bad
	// key: cert-manager would mend its own root Secret at once.)
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "broken-root"}, Type: corev1.SecretTypeTLS}
	root := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: rootName}, root)).To(Succeed())
	broken.Data = map[string][]byte{"tls.crt": root.Data["tls.crt"], "tls.key": []byte("not a key")}
	s.g.Expect(s.c.Client.Create(s.ctx, broken)).To(Succeed())
	opts.RootSecret.Name = broken.Name
	report, err := syncer.Status(s.ctx, s.c.Client, opts, time.Now())
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(report.Root.Valid).To(BeFalse())
	s.g.Expect(report.Attention).To(ContainElement(ContainSubstring("invalid root: tls.key")))
}
