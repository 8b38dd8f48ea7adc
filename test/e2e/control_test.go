package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
	"github.com/dualca/dualca/test/lib/apirequest"
	"github.com/dualca/dualca/test/lib/run"
)

// TestOperatorPausesResumesAndPromotesRotations: an operator steers
// rotations with `dualca pause`, `dualca resume` and `dualca promote` and
// watches them with `dualca status`, the real commands, run as a user
// holding one Role alone, the chart's operator Role: get, patch and update
// of the status ConfigMap, by name; no Secret. dualca runs as the chart's
// ServiceAccount. A paused
// rotation trusts the new root but renews no client and keeps the server
// where it is; resumed, it converges; a promoted one switches the server
// before dualca would have. A pause put on the gateway Secret pauses
// nothing: its annotations are no input any more. Every step is an event
// and dualca_paused says it, and not one handshake fails.
func TestOperatorPausesResumesAndPromotesRotations(t *testing.T) {
	t.Parallel()
	s := newScenario(t, clients)
	oncall := "oncall-" + s.ns
	_, sa := s.installChartRBAC(false, fmt.Sprintf("operatorRole: {subjects: [{kind: User, name: %s, apiGroup: rbac.authorization.k8s.io}]}", oncall))
	o := s.options(false)
	o.StatusConfigMap = types.NamespacedName{Namespace: s.ns, Name: gatewayName + "-dualca-status"}
	s.expectOperatorRoleOnTheConfigMapAlone(oncall, o.StatusConfigMap)
	ops := s.operatorClient(oncall)
	cli := s.operatorCLI(oncall, o.StatusConfigMap)
	requests := &apirequest.Log{}
	o.RenewalQPS, o.RenewalBurst = 4, 1 // about five seconds of renewals
	o.ServerSwitchGrace = 10 * time.Minute
	// No poll in the test's minutes: every control is obeyed from a watch,
	// which polls() shows (how soon is not judged: a busy machine is slow).
	o.PollInterval = time.Hour
	s.startDualcaAs(s.impersonating(sa, requests), o)
	s.startTraffic()
	s.g.Eventually(func() int { return cli.statusCode() }).Should(Equal(0), "dualca publishes, and all is well")
	s.logCLIStatus(cli, "steady")

	// A pause put on the gateway Secret (by whoever may write it) is no
	// control: dualca writes the Secret back without it, and pauses nothing.
	s.g.Expect(s.c.Client.Patch(s.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: gatewayName}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":"true"}}}`)))).To(Succeed())
	s.g.Eventually(s.annotations).WithTimeout(10*time.Second).ShouldNot(HaveKey(bundle.AnnotationPaused), "dualca removes it")
	s.expectEvent("Warning " + bundle.ReasonGatewayTampered)
	s.g.Expect(s.dualca.Gauge("dualca_paused")).To(BeZero())
	s.g.Expect(s.dualcaEvents()).NotTo(ContainElement("Normal "+bundle.ReasonRotationPaused), "nothing paused")

	// Paused before the rotation comes, through the ConfigMap: dualca hears
	// of it from its watch, not from a poll.
	polled := s.polls()
	out, code := cli.run("pause")
	s.g.Expect(code).To(Equal(0), out)
	s.g.Expect(out).To(ContainSubstring("paused: dualca renews no client"))
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_paused") }).Should(Equal(1.0), "paused")
	s.g.Expect(s.polls()).To(Equal(polled), "the pause was obeyed from the watch, no poll (every %s) read the root meanwhile", o.PollInterval)
	s.expectEvent("Normal " + bundle.ReasonRotationPaused)
	r1 := s.rootCert()
	rotation := s.rotateThrough()
	r2 := rotation.Root
	// Should cert-manager have issued twice for the trigger, the root it
	// issued first was the root Secret's for a moment, and is trusted too.
	trusted := []string{bundle.Fingerprint(r1), bundle.Fingerprint(r2)}
	for _, passed := range rotation.Passed {
		trusted = append(trusted, bundle.Fingerprint(passed))
	}
	s.waitPhase(r2, bundle.PhaseRenewing)
	s.g.Consistently(func(g Gomega) {
		g.Expect(s.clientsOn(r2)).To(BeZero(), "no client renewed while paused")
		g.Expect(s.annotations()).To(HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r1)), "the server stays on R1")
		g.Expect(s.trustedRoots()).To(ConsistOf(trusted), "the gateway trusts R1, R2 and any root between")
	}).WithTimeout(5 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	var paused *operator.Status
	s.g.Eventually(func(g Gomega) {
		paused = cli.status(g)
		g.Expect(paused.Phase).To(Equal(string(bundle.PhaseRenewing)))
	}).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	s.logCLIStatus(cli, "paused")
	s.g.Expect(paused.Paused).To(BeTrue())
	s.g.Expect(paused.Clients).To(HaveValue(HaveField("Pending", clients)))
	s.g.Expect(paused.Next.Summary).To(HavePrefix("paused: no client is renewed"))
	s.g.Expect(paused.Attention).To(ContainElement(ContainSubstring("rotation paused")))
	s.g.Expect(cli.statusCode()).To(Equal(1), "a paused rotation needs attention")

	// Resumed: the renewals start, and the rotation converges.
	out, code = cli.run("resume")
	s.g.Expect(code).To(Equal(0), out)
	polled = s.polls()
	s.g.Eventually(func() float64 { return s.dualca.Gauge("dualca_paused") }).Should(BeZero())
	s.g.Expect(s.polls()).To(Equal(polled), "the resume was obeyed from the watch")
	s.expectEvent("Normal " + bundle.ReasonRotationResumed)
	s.g.Eventually(func(g Gomega) {
		resumed := cli.status(g)
		g.Expect(resumed.Paused).To(BeFalse())
		g.Expect(resumed.Clients.Renewed).To(BeNumerically(">", 0), "renewals started")
		// The published progress is paced (5 s): a fast fan-out may be
		// seen done already; while clients are pending, it says so.
		if resumed.Clients.Pending > 0 {
			g.Expect(resumed.Next.Summary).To(MatchRegexp(`^renewing: \d+ clients pending; server switch when they are on %s for %s, or at \S+ \(grace\)`,
				bundle.Short(bundle.Fingerprint(r2)), regexp.QuoteMeta(o.TrustPropagationDelay.String())))
		}
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	s.logCLIStatus(cli, "resumed")
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
	s.g.Eventually(func(g Gomega) {
		before := cli.status(g)
		g.Expect(before.Next.Upcoming).To(ContainElement(HaveField("Step", bundle.StepSwitchClientsReady)))
	}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	s.logCLIStatus(cli, "every client on R3, before the promote")
	readyAt := bundle.ParseState(s.annotations()).ClientsReadyAt
	// The promote is made at the version of the status it read: should
	// dualca publish in between, it fails, and is run again.
	s.g.Eventually(func() int { out, code = cli.run("promote"); return code }).WithTimeout(10*time.Second).Should(Equal(0), func() string { return out })
	s.g.Expect(out).To(ContainSubstring("promote to root " + bundle.Short(bundle.Fingerprint(r3)) + " requested"))
	s.g.Eventually(s.annotations).WithTimeout(10*time.Second).Should(
		HaveKeyWithValue(bundle.AnnotationServer, bundle.Fingerprint(r3)), "switched")
	s.g.Eventually(func() map[string]string { return s.statusConfigMap(o.StatusConfigMap).Annotations }).WithTimeout(10*time.Second).
		ShouldNot(HaveKey(bundle.AnnotationPromote), "the promote consumed")
	switchedAt := bundle.ParseState(s.annotations()).SwitchedAt
	s.g.Expect(switchedAt).To(BeTemporally("<", readyAt.Add(o.TrustPropagationDelay)), "the promote came before dualca would have switched")
	s.expectEvent("Warning " + bundle.ReasonServerSwitchForced)
	s.g.Expect(s.eventMessages(bundle.ReasonServerSwitchForced)).To(ContainElement(ContainSubstring("promoted by the operator (dualca promote) with 0 clients")))
	s.g.Eventually(func(g Gomega) {
		after := cli.status(g)
		g.Expect(after.Next.Summary).To(HavePrefix("retiring: the server presents root " + bundle.Short(bundle.Fingerprint(r3))))
	}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	s.logCLIStatus(cli, "promoted")
	out, code = cli.run("promote")
	s.g.Expect(code).To(Equal(1), "a second promote has nothing to do: %s", out)
	s.g.Expect(out).To(ContainSubstring("nothing to promote"))
	s.converged(r3, false, 60*time.Second)
	s.g.Expect(s.eventMessages(bundle.ReasonPromoteIgnored)).To(BeEmpty(), "the consumed promote was not read again")

	_, failures := s.report("paused, resumed and promoted through the status ConfigMap, as the chart's ServiceAccount and a ConfigMap-only operator")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero())
	_, _, violations := s.watch.result()
	s.g.Expect(violations).To(BeEmpty(), "every gateway version trusted every root in use")
	s.expectOperatorReadsNoSecret(ops, o.StatusConfigMap)
	s.g.Expect(requestsRefused(requests)).To(BeEmpty(), "the API server refused none of dualca's requests")
}

// expectOperatorRoleOnTheConfigMapAlone: the user name is bound to one
// Role, the chart's operator Role, which grants get, patch and update of
// the status ConfigMap key, by name, and nothing else.
func (s *scenario) expectOperatorRoleOnTheConfigMapAlone(name string, key types.NamespacedName) {
	s.t.Helper()
	var bindings rbacv1.RoleBindingList
	s.g.Expect(s.c.Client.List(s.ctx, &bindings)).To(Succeed())
	var roles []string
	for _, b := range bindings.Items {
		for _, subject := range b.Subjects {
			if subject.Kind == rbacv1.UserKind && subject.Name == name {
				roles = append(roles, b.Namespace+"/"+b.RoleRef.Kind+"/"+b.RoleRef.Name)
			}
		}
	}
	var cluster rbacv1.ClusterRoleBindingList
	s.g.Expect(s.c.Client.List(s.ctx, &cluster)).To(Succeed())
	for _, b := range cluster.Items {
		for _, subject := range b.Subjects {
			s.g.Expect(subject.Kind == rbacv1.UserKind && subject.Name == name).To(BeFalse(), "no ClusterRole for the operator: %s", b.Name)
		}
	}
	s.g.Expect(roles).To(ConsistOf(HavePrefix(key.Namespace+"/Role/")), "one Role")
	role := &rbacv1.Role{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: key.Namespace, Name: roles[0][len(key.Namespace+"/Role/"):]}, role)).To(Succeed())
	s.g.Expect(role.Rules).To(ConsistOf(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{key.Name}, Verbs: []string{"get", "patch", "update"}}), "the status ConfigMap alone")
}

// operatorClient is a client acting as the user name.
func (s *scenario) operatorClient(name string) kubernetes.Interface {
	cfg := rest.CopyConfig(s.c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return kubernetes.NewForConfigOrDie(cfg)
}

// cli runs the dualca binary's operator commands as a user, through a
// kubeconfig that impersonates them, on one status ConfigMap.
type cli struct {
	s          *scenario
	bin        string
	kubeconfig string
	configMap  types.NamespacedName
}

// operatorCLI is the dualca command line of the user name.
func (s *scenario) operatorCLI(name string, key types.NamespacedName) *cli {
	s.t.Helper()
	bin, err := run.Binary()
	s.g.Expect(err).NotTo(HaveOccurred())
	cfg, err := clientcmd.LoadFromFile(s.c.Kubeconfig)
	s.g.Expect(err).NotTo(HaveOccurred())
	for _, user := range cfg.AuthInfos {
		user.Impersonate = name
	}
	path := filepath.Join(s.t.TempDir(), "operator.kubeconfig")
	s.g.Expect(clientcmd.WriteToFile(*cfg, path)).To(Succeed())
	return &cli{s: s, bin: bin, kubeconfig: path, configMap: key}
}

// run runs `dualca cmd` with the ConfigMap and any args, and returns what
// it printed (stdout then stderr) and its exit code.
func (c *cli) run(cmd string, args ...string) (string, int) {
	c.s.t.Helper()
	x := exec.CommandContext(c.s.ctx, c.bin, append([]string{cmd, "--kubeconfig=" + c.kubeconfig, "--status-configmap=" + c.configMap.String()}, args...)...)
	var stdout, stderr bytes.Buffer
	x.Stdout, x.Stderr = &stdout, &stderr
	err := x.Run()
	var exit *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		c.s.t.Fatalf("running dualca %s: %v", cmd, err)
	}
	return stdout.String() + stderr.String(), code
}

// statusCode is the exit code of `dualca status`.
func (c *cli) statusCode() int {
	_, code := c.run("status")
	return code
}

// status is `dualca status -o json`, which must have read the status.
func (c *cli) status(g Gomega) *operator.Status {
	out, code := c.run("status", "-o=json")
	g.Expect(code).To(BeElementOf(0, 1), out)
	r := &operator.Status{}
	g.Expect(json.Unmarshal([]byte(out), r)).To(Succeed(), out)
	g.Expect(r.ObservedAt).NotTo(BeNil(), "dualca published it")
	g.Expect(r.Next).NotTo(BeNil())
	g.Expect(r.Next.Unknown).To(BeEmpty())
	return r
}

// logCLIStatus logs `dualca status` as text.
func (s *scenario) logCLIStatus(c *cli, when string) {
	s.t.Helper()
	out, code := c.run("status")
	s.g.Expect(out).NotTo(ContainSubstring("BEGIN"), "no certificate material")
	s.t.Logf("dualca status (exit %d), %s:\n%s", code, when, out)
}

// statusConfigMap is the status ConfigMap as the API server has it.
func (s *scenario) statusConfigMap(key types.NamespacedName) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	s.g.Expect(s.c.Client.Get(s.ctx, key, cm)).To(Succeed())
	return cm
}

// expectOperatorReadsNoSecret: the operator can get and patch the status
// ConfigMap, and can neither get nor list any Secret, nor write the
// gateway's, nor read another ConfigMap.
func (s *scenario) expectOperatorReadsNoSecret(ops kubernetes.Interface, key types.NamespacedName) {
	s.t.Helper()
	_, err := ops.CoreV1().ConfigMaps(key.Namespace).Get(s.ctx, key.Name, metav1.GetOptions{})
	s.g.Expect(err).NotTo(HaveOccurred(), "the control for the refusals below")
	secrets := ops.CoreV1().Secrets(s.ns)
	for _, name := range []string{rootName, gatewayName, s.clients[0]} {
		_, err := secrets.Get(s.ctx, name, metav1.GetOptions{})
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading Secret %s is forbidden, got %v", name, err)
	}
	_, err = secrets.List(s.ctx, metav1.ListOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets is forbidden, got %v", err)
	_, err = ops.CoreV1().Secrets(metav1.NamespaceAll).List(s.ctx, metav1.ListOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing Secrets cluster-wide is forbidden, got %v", err)
	_, err = secrets.Patch(s.ctx, gatewayName, types.MergePatchType, []byte(`{"metadata":{"annotations":{"dualca.io/paused":"true"}}}`), metav1.PatchOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "patching the gateway Secret is forbidden, got %v", err)
	_, err = ops.CoreV1().ConfigMaps(key.Namespace).List(s.ctx, metav1.ListOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "listing ConfigMaps is forbidden, got %v", err)
	_, err = ops.CoreV1().ConfigMaps(key.Namespace).Get(s.ctx, "kube-root-ca.crt", metav1.GetOptions{})
	s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "reading another ConfigMap is forbidden, got %v", err)
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

// logStatus logs r as `dualca status` prints it, and checks that its JSON
// gives it back.
func (s *scenario) logStatus(when string, r *operator.Status) {
	s.t.Helper()
	var text bytes.Buffer
	s.g.Expect(r.WriteText(&text)).To(Succeed())
	s.g.Expect(text.String()).NotTo(ContainSubstring("BEGIN"), "no certificate material")
	s.t.Logf("dualca status, %s:\n%s", when, text.String())
	var js bytes.Buffer
	s.g.Expect(r.WriteJSON(&js)).To(Succeed())
	var back syncer.Report
	s.g.Expect(json.Unmarshal(js.Bytes(), &back)).To(Succeed())
	s.g.Expect(back.Paused).To(Equal(r.Paused))
	s.g.Expect(back.Roots).To(HaveLen(len(r.Roots)))
	if r.Next != nil {
		s.g.Expect(back.Next.Summary).To(Equal(r.Next.Summary))
		s.g.Expect(back.Next.Upcoming).To(HaveLen(len(r.Next.Upcoming)))
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
