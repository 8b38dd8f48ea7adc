package e2e

import (
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// The scenarios of this file select their clients the two ways an
// operator may label them without labelling the Certificates: by the
// label of the Secrets cert-manager writes (--client-secret-selector,
// matched against spec.secretTemplate.labels) and by their issuer
// (--client-issuer). Their client Certificates carry no label at all; a
// bystander Certificate beside them, which the older selection by
// Certificate label would have picked, must be left alone: never
// triggered, and no root kept for it.

const (
	// bystander is the Certificate dualca must not select, and its Secret.
	bystander = "bystander"
	// otherRoot and otherIssuer are a CA of their own and its CA Issuer.
	otherRoot, otherIssuer = "other-root-ca", "other-ca"
	// selectionClients is each scenario's fleet.
	selectionClients = 10
)

// TestClientsSelectedByTheirSecretsLabelRotateWithoutAFailedHandshake:
// the clients are chosen by their Secrets' label alone. A rotation moves
// every one of them to the new root without a failed handshake; the
// bystander, labelled on its Certificate but not on its Secret, is never
// triggered and no root is kept for it; dualca lists no Secret.
func TestClientsSelectedByTheirSecretsLabelRotateWithoutAFailedHandshake(t *testing.T) {
	t.Parallel()
	s := newSelectionScenario(t, func(crt *cmapi.Certificate) { crt.Labels = nil })
	by := s.createBystander(issuerName)
	o := s.options(false)
	o.ClientSelector = nil
	o.ClientSecretSelector = labels.SelectorFromSet(labels.Set{clientLabel: "agent"})
	s.startDualca(reparsed(s.g, o))
	s.startTraffic()
	s.expectNothingTriggeredAtRest()

	r2 := s.rotate()
	s.converged(r2, false, 60*time.Second)
	s.logPhases("rotation 2, clients selected by their Secrets' label", r2)
	s.expectBystanderLeftAlone(by, r2)
	s.expectNoFailure("clients selected by their Secrets' label, 1 rotation")
	s.expectCachedUnfiltered()
}

// TestClientsSelectedByTheirIssuerRotateWithoutAFailedHandshake: the
// clients are chosen by the CA Issuer of the root Secret (--client-issuer,
// checked at start). Two rotations move every one of them to the newest
// root without a failed handshake; the bystander, issued by another CA
// Issuer and labelled like a client on its Certificate, is left alone.
// Pointed at that other issuer, dualca refuses to start.
func TestClientsSelectedByTheirIssuerRotateWithoutAFailedHandshake(t *testing.T) {
	t.Parallel()
	s := newSelectionScenario(t, func(crt *cmapi.Certificate) { crt.Labels = nil })
	_, err := s.c.CreateRootCA(s.ctx, s.ns, otherRoot)
	s.g.Expect(err).NotTo(HaveOccurred())
	s.g.Expect(s.c.CreateCAIssuer(s.ctx, s.ns, otherIssuer, otherRoot)).To(Succeed())
	by := s.createBystander(otherIssuer)

	o := s.options(false)
	o.ClientSelector = nil
	o.ClientIssuer = &syncer.IssuerRef{Group: "cert-manager.io", Kind: cmapi.IssuerKind, Name: otherIssuer, Namespace: s.ns}
	s.expectRefusedToStart(reparsed(s.g, o), `signs with secret "other-root-ca", not the root secret "root-ca"`)

	o.ClientIssuer.Name = issuerName
	s.startDualca(reparsed(s.g, o))
	s.startTraffic()
	s.expectNothingTriggeredAtRest()

	r2 := s.rotate()
	s.converged(r2, false, 60*time.Second)
	s.logPhases("rotation 2, clients selected by their issuer", r2)
	r3 := s.rotate()
	s.converged(r3, false, 60*time.Second)
	s.logPhases("rotation 3, clients selected by their issuer", r3)
	t.Logf("client revisions after 2 rotations: %v (revision: clients)", s.revisionsOf())
	s.expectBystanderLeftAlone(by, r3)
	s.expectNoFailure("clients selected by their issuer, 2 rotations")
	s.expectCachedUnfiltered()
}

// newSelectionScenario is a scenario whose selectionClients client
// Certificates are the cluster's, issued by the root's CA Issuer with the
// client label on their Secret (the monitor tells clients by it), then
// changed by change before they are created.
func newSelectionScenario(t *testing.T, change func(*cmapi.Certificate)) *scenario {
	t.Helper()
	return newScenarioWith(t, shared, nil, func(s *scenario) ([]string, error) {
		var names []string
		for i := range selectionClients {
			name := fmt.Sprintf("agent-%d", i+1)
			crt := s.c.ClientCertificate(s.ns, issuerName, name, map[string]string{clientLabel: "agent"})
			change(crt)
			if err := s.c.Client.Create(s.ctx, crt); err != nil {
				return nil, err
			}
			names = append(names, name)
		}
		return names, s.c.WaitReady(s.ctx, s.ns, names...)
	})
}

// createBystander creates the Certificate dualca must leave alone, issued
// by issuer: the client label on the Certificate (what --client-selector
// would select), another on its Secret. It returns its leaf once issued.
func (s *scenario) createBystander(issuer string) *x509.Certificate {
	s.t.Helper()
	crt := s.c.ClientCertificate(s.ns, issuer, bystander, map[string]string{"app": "bystander"})
	crt.Labels = map[string]string{clientLabel: "agent"}
	s.g.Expect(s.c.Client.Create(s.ctx, crt)).To(Succeed())
	s.g.Expect(s.c.WaitReady(s.ctx, s.ns, bystander)).To(Succeed())
	return s.leafOf(bystander)
}

// leafOf is the leaf in the Secret name.
func (s *scenario) leafOf(name string) *x509.Certificate {
	s.t.Helper()
	sec := &corev1.Secret{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: name}, sec)).To(Succeed())
	cs, err := bundle.ParseCertificates("tls.crt", sec.Data[corev1.TLSCertKey])
	s.g.Expect(err).NotTo(HaveOccurred())
	return cs[0]
}

// expectBystanderLeftAlone: dualca never wrote to the bystander's
// Certificate (so never triggered it) while it wrote to every client's,
// and the gateway, converged on root, keeps no other root for it.
//
// The bystander's revision is not the measure: cert-manager may issue a
// Certificate twice on its own when its caches lag on a busy machine (its
// trigger controller reads the Secret of a first issuance as missing; see
// cert-manager's issue 3891). When it did, its story is logged.
func (s *scenario) expectBystanderLeftAlone(first, root *x509.Certificate) {
	s.t.Helper()
	writes := s.certificateWrites()
	s.g.Expect(writes).NotTo(HaveKey(bystander), "dualca never wrote to the bystander")
	for _, n := range s.clients {
		s.g.Expect(writes).To(HaveKeyWithValue(n, BeNumerically(">", 0)), "dualca triggered client %s", n)
	}
	crt := &cmapi.Certificate{}
	s.g.Expect(s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: bystander}, crt)).To(Succeed())
	if crt.Status.Revision == nil || *crt.Status.Revision != 1 || !s.leafOf(bystander).Equal(first) {
		s.t.Logf("cert-manager issued the bystander again on its own; its story:\n%s", strings.Join(s.c.Story(s.ctx, s.ns, bystander), "\n"))
	}
	s.g.Expect(s.trustedRoots()).To(Equal([]string{bundle.Fingerprint(root)}), "no root kept for the bystander")
}

// certificateWrites counts dualca's writes to each Certificate or its
// status, by name.
func (s *scenario) certificateWrites() map[string]int {
	out := map[string]int{}
	for _, r := range s.dualca.Requests() {
		if r.Group == cmapi.SchemeGroupVersion.Group && strings.HasPrefix(r.Resource, "certificates") && r.Writes() {
			out[r.Name]++
		}
	}
	return out
}

// expectNoFailure: the clients handshook throughout, not one failed, the
// gateway refused none, and every gateway version served every client.
func (s *scenario) expectNoFailure(what string) {
	s.t.Helper()
	attempts, failures := s.report(what)
	s.g.Expect(attempts).To(BeNumerically(">", 10*len(s.clients)), "the clients handshook throughout")
	s.g.Expect(failures).To(BeZero(), "no handshake failed: %v", s.fleet.Stats().Total.Errors)
	s.g.Expect(s.gateway.Stats().Rejected).To(BeZero(), "the gateway rejected no client: %v", s.gateway.Stats().Errors)
	s.expectStrictlyClean(0)
}

// expectCachedUnfiltered: without a Certificate label, dualca lists and
// watches the namespace's Certificates and requests unfiltered, and still
// no Secret but its two by name.
func (s *scenario) expectCachedUnfiltered() {
	s.t.Helper()
	cached := map[string]bool{}
	for _, r := range s.dualca.Requests() {
		if r.Verb != "list" && r.Verb != "watch" {
			continue
		}
		switch r.Resource {
		case "certificates", "certificaterequests":
			s.g.Expect(r.Namespace).To(Equal(s.ns), "%s", r)
			s.g.Expect(r.LabelSelector).To(BeEmpty(), "%s: no label to filter by", r)
		case "secrets":
			// The root, the gateway, and the "-cacert" Secret that would
			// shadow the gateway's bundle in Istio (watched, never written).
			s.g.Expect(r.Name).To(BeElementOf(rootName, gatewayName, gatewayName+"-cacert"), "%s: one Secret by name, never a list", r)
		}
		cached[r.Verb+" "+r.Resource] = true
	}
	s.g.Expect(cached).To(HaveKey("watch certificates"))
	s.g.Expect(cached).To(HaveKey("watch certificaterequests"))
}

// expectNothingTriggeredAtRest: started beside clients on the current
// root, dualca has seen each client's certificates and triggered none (a
// client it cannot see is unknown, and renewed): it counted no trigger and
// wrote to no Certificate. (Not their revisions: cert-manager may issue a
// Certificate twice on its own, see expectBystanderLeftAlone.)
//
// A first install is in sync before the clients are read, and a decision
// with them unread renews no one: what is checked is the decision made
// with them read, which counts every selected client on the one root
// (dualca_root_clients is set by no other). The renewals such a decision
// asks for are triggered after it, so the absence of any is watched for
// a while, not read once.
func (s *scenario) expectNothingTriggeredAtRest() {
	s.t.Helper()
	s.g.Eventually(s.dualca.Synced).Should(BeTrue())
	s.g.Eventually(func() float64 { return s.dualca.GaugeTotal("dualca_root_clients") }).WithTimeout(60*time.Second).
		Should(Equal(float64(selectionClients)), "a decision made with every selected client read")
	s.g.Consistently(func() int { return s.dualca.Renewals()["triggered"] }).WithTimeout(time.Second).
		Should(BeZero(), "no client triggered at rest")
	s.g.Expect(s.certificateWrites()).To(BeEmpty(), "dualca wrote to no client Certificate")
}

// expectRefusedToStart: dualca with o does not start, saying why.
func (s *scenario) expectRefusedToStart(o flags.Options, why string) {
	s.t.Helper()
	so := o.Syncer()
	so.Metrics = syncer.NewMetrics()
	_, err := syncer.NewManager(s.c.RESTConfig, so)
	s.g.Expect(err).To(MatchError(syncer.ErrIssuerNotOfTheRoot))
	s.g.Expect(err).To(MatchError(ContainSubstring(why)))
}

// reparsed is o after a trip through its command line, as the binary and
// the chart give it.
func reparsed(g *WithT, o flags.Options) flags.Options {
	back, err := flags.Parse("dualca", o.Args())
	g.Expect(err).NotTo(HaveOccurred(), "%v", o.Args())
	g.Expect(back.Clients()).To(Equal(o.Clients()))
	return back
}

// revisionsOf counts the clients by their Certificate's revision.
func (s *scenario) revisionsOf() map[int]int {
	out := map[int]int{}
	for _, n := range s.clients {
		crt := &cmapi.Certificate{}
		_ = s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: s.ns, Name: n}, crt)
		if crt.Status.Revision != nil {
			out[*crt.Status.Revision]++
		}
	}
	return out
}
