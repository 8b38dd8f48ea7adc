package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// The attacker of these tests holds, in the client namespace, only what
// cert-manager's aggregated edit role gives there: Issuers, Certificates
// and CertificateRequests, no Secret. Subjects are public (every client's
// ca.crt and the gateway's handshake show the root's), so it makes a CA of
// its own with the root's exact subject, a CA Issuer on it, and a
// Certificate carrying the client label that dualca selects clients by:
// its Secret's ca.crt then holds a CA with the root's subject that signed
// a selected client's leaf. dualca must never trust that CA.

const (
	// forgedClient is the attacker's labelled Certificate and its Secret.
	forgedClient = "agent-forged"
	// forgedCA is the attacker's CA Certificate, its Secret and its Issuer.
	forgedCA = "shadow-root-ca"
)

// TestAForgedRootInAClientIsNotTrustedOnFirstInstall: the forgery is in
// place before dualca's first start (zero-downtime). Every version of the
// gateway Secret, watched from before dualca starts, trusts only roots of
// the root Secret and never the forged CA; dualca says why with an
// UntrustedRoot Warning naming a selected client's ca.crt and counts it;
// the honest clients handshake throughout without a failure.
func TestAForgedRootInAClientIsNotTrustedOnFirstInstall(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 10)
	cas := s.watchTrust()
	root := s.rootCert()
	forged := s.forgeRoot(root)

	s.startDualca(s.options(false))
	s.startTraffic()
	// The gateway serves dualca's first version: it and the next ones
	// trust the root alone, while dualca polls and re-reads the clients.
	s.g.Consistently(s.trustedRoots).WithTimeout(5*time.Second).WithPolling(100*time.Millisecond).
		Should(Equal([]string{bundle.Fingerprint(root)}), "the gateway trusts the root alone, not the forged CA %s", bundle.Short(bundle.Fingerprint(forged)))
	s.converged(root, false, 60*time.Second)
	s.expectUntrustedRootReported(forged)

	cas.expectNeverTrusted(s, forged)
	attempts, failures := s.report("a forged root in a client, first install")
	s.g.Expect(attempts).To(BeNumerically(">", 2*len(s.clients)), "the honest clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no honest client failed a handshake: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no honest client: %v", s.gateway.Stats().Errors)
	s.expectStrictlyClean(0)
}

// TestAForgedRootInAClientIsNotTrustedOnAFlipFromLegacy: dualca runs the
// legacy strategy and converges; then the forgery is made, the root is
// rotated once under a slowed legacy dualca, and dualca is restarted
// zero-downtime while some honest clients are still on the old root. The
// adopted bundle keeps both roots dualca read from the root Secret (the
// clients left on the old one need it) and never the forged CA, in any
// version of the gateway Secret from before the first start to the end.
func TestAForgedRootInAClientIsNotTrustedOnAFlipFromLegacy(t *testing.T) {
	t.Parallel()
	s := newScenario(t, 10)
	cas := s.watchTrust()
	r1 := s.rootCert()
	s.startDualca(s.options(true))
	s.startTraffic()
	s.converged(r1, true, 60*time.Second)

	forged := s.forgeRoot(r1)
	slow := s.options(true)
	slow.RenewalQPS, slow.RenewalBurst = 1, 1
	s.startDualca(slow)
	r2 := s.rotate()
	s.g.Eventually(func() int { return s.clientsOn(r2) }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 2))
	s.dualca.Stop()
	left := s.clientsOn(r1)
	s.g.Expect(left).To(BeNumerically(">", 0), "the flip comes while honest clients are still on the old root")
	before, err := s.untrustedRootNotes()
	s.g.Expect(err).NotTo(HaveOccurred())
	legacy := s.fleet.Stats().Total
	t.Logf("flip to zero-downtime with %d of %d honest clients still on the old root; UntrustedRoot events under legacy: %d", left, len(s.clients), len(before))

	o := s.options(false)
	// The forged client can never move to a root of the root Secret: the
	// server switch waits for the grace period, shortened here.
	o.ServerSwitchGrace = 15 * time.Second
	s.startDualca(o)
	s.g.Eventually(s.annotations).Should(HaveKeyWithValue(bundle.AnnotationStrategy, bundle.StrategyZeroDowntime))
	// The first zero-downtime version is the adoption: it kept both roots
	// dualca read, and not the forged CA.
	var adopted []string
	s.g.Eventually(func() []string {
		adopted = cas.firstTrustedBy(bundle.StrategyZeroDowntime)
		return adopted
	}).WithTimeout(10 * time.Second).ShouldNot(BeNil())
	s.g.Expect(adopted).To(ContainElements(bundle.Fingerprint(r1), bundle.Fingerprint(r2)),
		"the adopted bundle keeps the old root of the clients not yet re-issued, and the new one")
	s.g.Expect(adopted).NotTo(ContainElement(bundle.Fingerprint(forged)), "the adopted bundle does not trust the forged CA")
	s.expectUntrustedRootReported(forged)
	s.converged(r2, false, 90*time.Second)

	cas.expectNeverTrusted(s, forged)
	s.report("a forged root in a client, flip legacy -> zero-downtime")
	end := s.fleet.Stats().Total
	t.Logf("handshakes attempted/failed: legacy %d/%d; zero-downtime after the flip %d/%d (clients the legacy strategy had left behind, until re-issued)",
		legacy.Attempts, legacy.Failures, end.Attempts-legacy.Attempts, end.Failures-legacy.Failures)
	s.expectStrictlyClean(0)
}

// forgeRoot plays the attacker in the scenario's namespace with the rights
// of cert-manager's aggregated edit role only: a self-signed Issuer, a CA
// Certificate with root's exact subject, a CA Issuer on its Secret, and a
// Certificate with the client label issued by it. It returns the forged CA
// once cert-manager has issued the labelled Certificate, which the
// scenario's monitor excuses (the gateway is right to refuse it).
func (s *scenario) forgeRoot(root *x509.Certificate) *x509.Certificate {
	s.t.Helper()
	s.watch.Excuse(forgedClient)
	mallory := s.certManagerEditor()
	selfSigned := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: forgedCA + "-selfsigned"},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
	s.g.Expect(mallory.Create(s.ctx, selfSigned)).To(Succeed())
	ca := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: forgedCA},
		Spec: cmapi.CertificateSpec{
			CommonName: root.Subject.CommonName,
			Subject:    subjectOf(root.Subject),
			SecretName: forgedCA,
			IsCA:       true,
			Duration:   &metav1.Duration{Duration: 2160 * time.Hour},
			Usages:     []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature},
			PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256},
			IssuerRef:  cmmeta.IssuerReference{Name: selfSigned.Name, Kind: cmapi.IssuerKind, Group: "cert-manager.io"},
		},
	}
	s.g.Expect(mallory.Create(s.ctx, ca)).To(Succeed())
	s.g.Expect(s.c.WaitReady(s.ctx, s.ns, forgedCA)).To(Succeed())
	caIssuer := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: forgedCA},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: forgedCA}}},
	}
	s.g.Expect(mallory.Create(s.ctx, caIssuer)).To(Succeed())
	s.g.Eventually(func(g Gomega) {
		got := &cmapi.Issuer{}
		g.Expect(mallory.Get(s.ctx, client.ObjectKeyFromObject(caIssuer), got)).To(Succeed())
		g.Expect(got.Status.Conditions).To(ContainElement(And(
			HaveField("Type", cmapi.IssuerConditionReady), HaveField("Status", cmmeta.ConditionTrue))))
	}).Should(Succeed(), "cert-manager makes the attacker's CA Issuer Ready")
	s.g.Expect(mallory.Create(s.ctx, s.c.ClientCertificate(s.ns, forgedCA, forgedClient, map[string]string{clientLabel: "agent"}))).To(Succeed())
	s.g.Expect(s.c.WaitReady(s.ctx, s.ns, forgedClient)).To(Succeed())

	// What the attacker got, as dualca will find it (read by the test). A
	// running legacy dualca deletes the forged client's Secret to have it
	// re-issued from the root, and cert-manager issues it again from the
	// forged CA: it is looked at while it exists.
	caSecret := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: forgedCA}, caSecret)).To(Succeed())
	own, err := bundle.ParseCertificates("tls.crt", caSecret.Data[corev1.TLSCertKey])
	s.g.Expect(err).NotTo(HaveOccurred())
	forged := own[0]
	s.g.Expect(forged.IsCA).To(BeTrue(), "the forged certificate is a CA")
	s.g.Expect(bytes.Equal(forged.RawSubject, root.RawSubject)).To(BeTrue(),
		"the forged CA has the root's exact subject: %q vs %q", forged.Subject, root.Subject)
	s.g.Expect(bundle.Fingerprint(forged)).NotTo(Equal(bundle.Fingerprint(root)))
	s.g.Eventually(func(g Gomega) {
		sec := &corev1.Secret{}
		g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: forgedClient}, sec)).To(Succeed())
		g.Expect(sec.Labels).To(HaveKeyWithValue(clientLabel, "agent"), "the forged client's Secret is selected")
		leaf, err := bundle.ParseCertificates("tls.crt", sec.Data[corev1.TLSCertKey])
		g.Expect(err).NotTo(HaveOccurred())
		cas, err := bundle.ParseCertificates("ca.crt", sec.Data["ca.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fingerprints(cas)).To(Equal([]string{bundle.Fingerprint(forged)}), "the forged client's ca.crt is the forged CA")
		g.Expect(bundle.ChainsTo(leaf[0], forged)).To(BeTrue(), "the forged CA signed the labelled client's leaf")
		g.Expect(bundle.ChainsTo(leaf[0], root)).To(BeFalse(), "the root did not")
	}).Should(Succeed())
	s.t.Logf("%s: forged CA %s with the root's subject signed the labelled client %s", s.ns, bundle.Short(bundle.Fingerprint(forged)), forgedClient)
	return forged
}

// certManagerEditor is a client acting as a user who holds, in the
// scenario's namespace, what cert-manager's aggregated edit (and view)
// ClusterRoles give on cert-manager.io: no Secret, no RBAC, nothing else.
// It checks that the user cannot read a Secret.
func (s *scenario) certManagerEditor() client.Client {
	s.t.Helper()
	user := "mallory@" + s.ns
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "cert-manager-edit"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates", "certificaterequests", "issuers"},
				Verbs: []string{"get", "list", "watch", "create", "delete", "deletecollection", "patch", "update"}},
			{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates/status"}, Verbs: []string{"update"}},
		},
	}
	s.g.Expect(s.c.Client.Create(s.ctx, role)).To(Succeed())
	s.g.Expect(s.c.Client.Create(s.ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: "cert-manager-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(Succeed())
	cfg := rest.CopyConfig(s.c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: s.c.Client.Scheme()})
	s.g.Expect(err).NotTo(HaveOccurred())
	// The binding takes effect through the authorizer's cache.
	s.g.Eventually(func() error {
		return c.List(s.ctx, &cmapi.IssuerList{}, client.InNamespace(s.ns))
	}).Should(Succeed(), "the attacker may use cert-manager's resources")
	for _, name := range []string{rootName, issuerName} {
		err := c.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, &corev1.Secret{})
		s.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the attacker cannot read Secret %s, got %v", name, err)
	}
	s.g.Expect(apierrors.IsForbidden(c.List(s.ctx, &corev1.SecretList{}, client.InNamespace(s.ns)))).To(BeTrue(), "nor list Secrets")
	return c
}

// subjectOf is cert-manager's spelling of the subject fields of name other
// than the common name, nil when it has none.
func subjectOf(name pkix.Name) *cmapi.X509Subject {
	if len(name.Organization)+len(name.Country)+len(name.OrganizationalUnit)+len(name.Locality)+
		len(name.Province)+len(name.StreetAddress)+len(name.PostalCode) == 0 && name.SerialNumber == "" {
		return nil
	}
	return &cmapi.X509Subject{
		Organizations: name.Organization, Countries: name.Country, OrganizationalUnits: name.OrganizationalUnit,
		Localities: name.Locality, Provinces: name.Province, StreetAddresses: name.StreetAddress,
		PostalCodes: name.PostalCode, SerialNumber: name.SerialNumber,
	}
}

// expectUntrustedRootReported waits until dualca reports forged with an
// UntrustedRoot Warning naming a selected client's ca.crt, and counts it.
func (s *scenario) expectUntrustedRootReported(forged *x509.Certificate) {
	s.t.Helper()
	s.g.Eventually(s.untrustedRootNotes).WithTimeout(30*time.Second).Should(ContainElement(And(
		ContainSubstring("a selected client's ca.crt"), ContainSubstring(bundle.Short(bundle.Fingerprint(forged))))),
		"an UntrustedRoot Warning names the forged CA in a selected client's ca.crt")
	s.g.Eventually(func() float64 { return s.dualca.Counter("dualca_untrusted_roots_total") }).
		WithTimeout(10*time.Second).Should(BeNumerically(">=", 1), "dualca_untrusted_roots_total counts it")
}

// untrustedRootNotes are the notes of dualca's UntrustedRoot Warnings in
// the scenario's namespace.
func (s *scenario) untrustedRootNotes() ([]string, error) {
	var list eventsv1.EventList
	if err := s.c.Client.List(s.ctx, &list, client.InNamespace(s.ns)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.ReportingController == "dualca" && e.Type == corev1.EventTypeWarning && e.Reason == bundle.ReasonUntrustedRoot {
			out = append(out, e.Note)
		}
	}
	return out, nil
}

// trustWatch follows the root and the gateway Secrets of a namespace
// through one watch that resumes where it stopped, so that it sees every
// version in the order the API server wrote them. It keeps fingerprints
// only.
type trustWatch struct {
	mu sync.Mutex
	// roots are the roots the root Secret held so far.
	roots map[string]bool
	// versions are the gateway Secret's versions: strategy and ca.crt.
	versions []trustVersion
	// foreign are the CAs of a ca.crt that the root Secret never held
	// before that version.
	foreign []string
	// problems are versions that could not be read and watch errors.
	problems []string
}

type trustVersion struct {
	rv, strategy string
	trusted      []string
}

// watchTrust starts a trustWatch of the scenario's namespace and returns
// once it listed it: it sees every version written after that.
func (s *scenario) watchTrust() *trustWatch {
	s.t.Helper()
	w := &trustWatch{roots: map[string]bool{}}
	secrets := s.kube.CoreV1().Secrets(s.ns)
	list, err := secrets.List(s.ctx, metav1.ListOptions{})
	s.g.Expect(err).NotTo(HaveOccurred())
	for i := range list.Items {
		w.seen(&list.Items[i])
	}
	rw, err := watchtools.NewRetryWatcherWithContext(s.ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return secrets.Watch(ctx, o)
		},
	})
	s.g.Expect(err).NotTo(HaveOccurred())
	s.t.Cleanup(rw.Stop)
	go func() {
		for ev := range rw.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				if sec, ok := ev.Object.(*corev1.Secret); ok {
					w.seen(sec)
				}
			case watch.Error:
				w.mu.Lock()
				w.problems = append(w.problems, fmt.Sprintf("watch error: %v", apierrors.FromObject(ev.Object)))
				w.mu.Unlock()
			}
		}
	}()
	return w
}

func (w *trustWatch) seen(sec *corev1.Secret) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch sec.Name {
	case rootName:
		if cs, err := bundle.ParseCertificates("tls.crt", sec.Data[corev1.TLSCertKey]); err == nil {
			w.roots[bundle.Fingerprint(cs[0])] = true
		}
	case gatewayName:
		v := trustVersion{rv: sec.ResourceVersion, strategy: sec.Annotations[bundle.AnnotationStrategy]}
		cs, err := bundle.ParseCertificates("ca.crt", sec.Data["ca.crt"])
		if err != nil {
			w.problems = append(w.problems, fmt.Sprintf("gateway %s: %v", sec.ResourceVersion, err))
		}
		for _, c := range cs {
			fp := bundle.Fingerprint(c)
			v.trusted = append(v.trusted, fp)
			if !w.roots[fp] {
				w.foreign = append(w.foreign, fmt.Sprintf("gateway %s trusts %s", sec.ResourceVersion, bundle.Short(fp)))
			}
		}
		w.versions = append(w.versions, v)
	}
}

// firstTrustedBy is the ca.crt of the first gateway version with the
// strategy annotation strategy, nil before there is one.
func (w *trustWatch) firstTrustedBy(strategy string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.versions {
		if v.strategy == strategy {
			return slices.Clone(v.trusted)
		}
	}
	return nil
}

// expectNeverTrusted waits until the watch has seen the gateway Secret's
// current version, then asserts that no version trusted forged nor any CA
// the root Secret had not held.
func (w *trustWatch) expectNeverTrusted(s *scenario, forged *x509.Certificate) {
	s.t.Helper()
	gw := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: gatewayName}, gw)).To(Succeed())
	s.g.Eventually(func() []string {
		w.mu.Lock()
		defer w.mu.Unlock()
		var rvs []string
		for _, v := range w.versions {
			rvs = append(rvs, v.rv)
		}
		return rvs
	}).WithTimeout(10*time.Second).Should(ContainElement(gw.ResourceVersion), "the watch reached the current gateway version")
	w.mu.Lock()
	defer w.mu.Unlock()
	fp := bundle.Fingerprint(forged)
	var with []string
	for _, v := range w.versions {
		if slices.Contains(v.trusted, fp) {
			with = append(with, v.rv)
		}
	}
	s.t.Logf("%s: %d gateway versions watched from before dualca's first start", s.ns, len(w.versions))
	s.g.Expect(w.problems).To(BeEmpty(), "every gateway version was watched and parsed")
	s.g.Expect(len(w.versions)).To(BeNumerically(">", 0))
	s.g.Expect(with).To(BeEmpty(), "no gateway version trusted the forged CA %s", bundle.Short(fp))
	s.g.Expect(w.foreign).To(BeEmpty(), "every CA any gateway version trusted was read from the root Secret first")
}
