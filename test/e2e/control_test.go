package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/apirequest"
)

// TestOperatorPausesResumesAndPromotesRotations: an operator steers
// rotations with what `dualca pause`, `dualca resume` and `dualca promote`
// do, as a user holding only the chart's operator Role, while dualca runs
// as the chart's ServiceAccount. A paused rotation trusts the new root but
// renews no client and keeps the server where it is; resumed, it
// converges; a promoted one switches the server before dualca would have.
// Every step is an event and dualca_paused says it; `dualca status` is
// logged at each, and not one handshake fails.
func TestOperatorPausesResumesAndPromotesRotations(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	operator := "oncall-" + s.ns
	_, sa := s.installChartRBAC(false, fmt.Sprintf("operatorRole: {subjects: [{kind: User, name: %s, apiGroup: rbac.authorization.k8s.io}]}", operator))
	ops := s.operatorClient(operator)
	requests := &apirequest.Log{}
	o := s.options(false)
	o.RenewalQPS, o.RenewalBurst = 4, 1 // about five seconds of renewals
	o.ServerSwitchGrace = 10 * time.Minute
	s.startDualcaAs(s.impersonating(sa, requests), o)
	s.startTraffic()
	key := o.GatewaySecret

	// Paused before the rotation comes: the bundle takes R2, nothing else moves.
	_, err := syncer.Pause(s.ctx, ops.CoreV1(), key, true)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.expectEvent("Normal " + bundle.ReasonRotationPaused)
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_paused") }).Should(Equal(1.0))
	r1 := s.rootCert()
	r2 := s.rotate()
	s.waitPhase(r2, bundle.PhaseRenewing)
	s.g.Consistently(func(g Gomega) {
		g.Expect(s.clientsOn(r2)).To(BeZero(), "no client renewed while paused")
		g.Expect(s.annotations()).To(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r1)), "the server stays on R1")
		g.Expect(s.trustedRoots()).To(ConsistOf(bundle.Fingerprint(r2), bundle.Fingerprint(r1)), "the gateway trusts both")
	}).WithTimeout(5 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	paused := s.status(o, "paused")
	s.g.Expect(paused.Paused).To(BeTrue())
	s.g.Expect(paused.Clients).To(HaveValue(HaveField("Pending", clients)))
	s.g.Expect(paused.Next.Summary).To(HavePrefix("paused: no client is renewed"))
	s.g.Expect(paused.Attention).To(ContainElement(ContainSubstring("rotation paused")))

	// Resumed: the renewals start, and the rotation converges.
	_, err = syncer.Pause(s.ctx, ops.CoreV1(), key, false)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.expectEvent("Normal " + bundle.ReasonRotationResumed)
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_paused") }).Should(BeZero())
	var resumed *syncer.Report
	s.g.Eventually(func(g Gomega) {
		resumed = s.statusReport(o)
		g.Expect(resumed.Clients.Renewed).To(BeNumerically(">", 0))
		g.Expect(resumed.Clients.Pending).To(BeNumerically(">", 0))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	s.logStatus("resumed", resumed)
	s.g.Expect(resumed.Paused).To(BeFalse())
	s.g.Expect(resumed.Next.Summary).To(MatchRegexp(`^renewing: \d+ clients pending; server switch when they are on %s for 1s, or at \S+ \(grace\)`,
		bundle.Short(bundle.Fingerprint(r2))))
	s.converged(r2, false, 60*time.Second)

	// Promoted: every client is on R3, and the server would wait the
	// propagation delay (20 s here) for them to load it; the promote
	// switches it at once.
	o.TrustPropagationDelay = 20 * time.Second
	s.startDualcaAs(s.impersonating(sa, requests), o)
	r3 := s.rotate()
	s.g.Eventually(s.annotations).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(And(
		HaveKeyWithValue(bundle.AnnotationClients, fmt.Sprintf("renewed=%d pending=0 failed=0", clients)),
		HaveKey(bundle.AnnotationClientsReadyAt)))
	before := s.status(o, "every client on R3, before the promote")
	s.g.Expect(before.Next.Upcoming).To(ContainElement(HaveField("Step", bundle.StepSwitchClientsReady)))
	readyAt := bundle.ParseState(s.annotations()).ClientsReadyAt
	fp, err := syncer.Promote(s.ctx, ops.CoreV1(), key)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(fp).To(Equal(bundle.Fingerprint(r3)))
	s.g.Eventually(s.annotations).WithTimeout(10*time.Second).Should(And(
		HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r3)), Not(HaveKey(bundle.AnnotationPromote))), "switched, and the promote consumed")
	switchedAt := bundle.ParseState(s.annotations()).SwitchedAt
	s.g.Expect(switchedAt).To(BeTemporally("<", readyAt.Add(o.TrustPropagationDelay)), "the promote came before dualca would have switched")
	s.expectEvent("Warning " + bundle.ReasonServerSwitchForced)
	s.g.Expect(s.eventMessages(bundle.ReasonServerSwitchForced)).To(ContainElement(ContainSubstring("promoted by the operator (dualca promote) with 0 clients")))
	after := s.status(o, "promoted")
	s.g.Expect(after.Next.Summary).To(HavePrefix("retiring: the server presents root " + bundle.Short(bundle.Fingerprint(r3))))
	_, err = syncer.Promote(s.ctx, ops.CoreV1(), key)
	s.g.Expect(err).To(MatchError(syncer.ErrNothingToPromote), "a second promote has nothing to do")
	s.converged(r3, false, 60*time.Second)

	_, failures := s.report("paused, resumed and promoted, as the chart's ServiceAccount and operator Role")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero())
	_, _, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "every gateway version trusted every root in use")
	s.expectOperatorRoleNoMore(ops)
	s.g.Expect(requestsRefused(requests)).To(BeEmpty(), "the API server refused none of dualca's requests")
}

// operatorClient is a client acting as the user name, who holds the
// chart's operator Role alone.
func (s *scenario) operatorClient(name string) kubernetes.Interface {
	cfg := rest.CopyConfig(s.c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return kubernetes.NewForConfigOrDie(cfg)
}

// expectOperatorRoleNoMore: the operator Role reads and patches the
// gateway Secret, nothing else.
func (s *scenario) expectOperatorRoleNoMore(ops kubernetes.Interface) {
	s.t.Helper()
	secrets := ops.CoreV1().Secrets(s.ns)
	_, err := secrets.Get(s.ctx, rootName, metav1.GetOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading the root Secret is forbidden, got %v", err)
	_, err = secrets.Patch(s.ctx, rootName, types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "patching the root Secret is forbidden, got %v", err)
	_, err = secrets.List(s.ctx, metav1.ListOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets is forbidden, got %v", err)
	err = secrets.Delete(s.ctx, gatewayName, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "deleting the gateway Secret is forbidden, got %v", err)
}

// expectEvent waits for an event of dualca's, "Type Reason".
func (s *scenario) expectEvent(typeReason string) {
	s.t.Helper()
	s.g.Eventually(func() ([]string, error) { return s.dualcaEvents() }).WithTimeout(10 * time.Second).Should(ContainElement(typeReason))
}

// eventMessages are the notes of dualca's events with reason.
func (s *scenario) eventMessages(reason string) []string {
	events, err := s.kube.EventsV1().Events(s.ns).List(s.ctx, metav1.ListOptions{})
	s.g.Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range events.Items {
		if e.ReportingController == "dualca" && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out
}

// statusReport is `dualca status`'s report of the scenario now, with the
// root and the clients dualca runs with.
func (s *scenario) statusReport(o flags.Options) *syncer.Report {
	s.t.Helper()
	r, err := syncer.Status(s.ctx, s.c.Client, syncer.StatusOptions{GatewaySecret: o.GatewaySecret, RootSecret: o.RootSecret,
		ClientSelector: o.ClientSelector, ClientNamespaces: o.ClientNamespaces, StalledAfter: time.Hour}, time.Now())
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(r.Next).NotTo(BeNil())
	s.g.Expect(r.Next.Unknown).To(BeEmpty())
	return r
}

// status logs `dualca status` of the scenario now, as text, and returns it.
func (s *scenario) status(o flags.Options, when string) *syncer.Report {
	s.t.Helper()
	r := s.statusReport(o)
	s.logStatus(when, r)
	return r
}

func (s *scenario) logStatus(when string, r *syncer.Report) {
	s.t.Helper()
	var text bytes.Buffer
	s.g.Expect(r.WriteText(&text)).To(Succeed())
	s.g.Expect(text.String()).NotTo(ContainSubstring("BEGIN"), "no certificate material")
	s.t.Logf("dualca status, %s:\n%s", when, text.String())
	// The same for scripts: -o json carries the next step and every moment.
	var js bytes.Buffer
	s.g.Expect(r.WriteJSON(&js)).To(Succeed())
	var back syncer.Report
	s.g.Expect(json.Unmarshal(js.Bytes(), &back)).To(Succeed())
	s.g.Expect(back.Paused).To(Equal(r.Paused))
	s.g.Expect(back.Next).NotTo(BeNil())
	s.g.Expect(back.Next.Summary).To(Equal(r.Next.Summary))
	s.g.Expect(back.Next.Upcoming).To(HaveLen(len(r.Next.Upcoming)))
	for i, u := range back.Next.Upcoming {
		s.g.Expect(u.Step).To(Equal(r.Next.Upcoming[i].Step))
		s.g.Expect(u.At).To(BeTemporally("==", r.Next.Upcoming[i].At))
	}
}

// requestsRefused are the requests of log the API server refused.
func requestsRefused(log *apirequest.Log) []string {
	var out []string
	for _, r := range log.All() {
		if r.Code == http.StatusForbidden {
			out = append(out, r.String())
		}
	}
	return out
}
