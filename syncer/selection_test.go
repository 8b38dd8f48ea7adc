package syncer

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestAClientIsWhatEveryGivenPartSelects: each way of selecting clients
// matches what it names (the Certificate's labels, its Secret template's
// labels, its issuerRef as cert-manager defaults it) and nothing else;
// given together, all must match; none given selects nothing.
func TestAClientIsWhatEveryGivenPartSelects(t *testing.T) {
	t.Parallel()
	agent := labels.SelectorFromSet(agentLabels)
	issuer := &IssuerRef{Group: "cert-manager.io", Kind: "Issuer", Name: "agents-ca", Namespace: "agents"}
	cluster := &IssuerRef{Group: "cert-manager.io", Kind: "ClusterIssuer", Name: "agents-ca"}
	external := &IssuerRef{Group: "awspca.cert-manager.io", Kind: "AWSPCAIssuer", Name: "agents-ca"}
	with := func(change func(*cmapi.Certificate)) *cmapi.Certificate {
		crt := clientCert("agent", nil)
		change(crt)
		return crt
	}
	plain := with(func(*cmapi.Certificate) {})
	noLabels := with(func(c *cmapi.Certificate) { c.Labels = nil })
	noTemplate := with(func(c *cmapi.Certificate) { c.Spec.SecretTemplate = nil })
	otherSecretLabel := with(func(c *cmapi.Certificate) { c.Spec.SecretTemplate.Labels = map[string]string{"app": "web"} })
	spelledOut := with(func(c *cmapi.Certificate) {
		c.Spec.IssuerRef = cmmeta.IssuerReference{Name: "agents-ca", Kind: "Issuer", Group: "cert-manager.io"}
	})
	otherIssuer := with(func(c *cmapi.Certificate) { c.Spec.IssuerRef.Name = "web-ca" })
	clusterKind := with(func(c *cmapi.Certificate) { c.Spec.IssuerRef.Kind = "ClusterIssuer" })
	elsewhere := with(func(c *cmapi.Certificate) { c.Namespace = "edge" })
	elsewhereCluster := with(func(c *cmapi.Certificate) {
		c.Namespace, c.Spec.IssuerRef.Kind = "edge", "ClusterIssuer"
	})
	otherGroup := with(func(c *cmapi.Certificate) { c.Spec.IssuerRef.Group = "awspca.cert-manager.io" })
	externalKind := with(func(c *cmapi.Certificate) {
		c.Namespace, c.Spec.IssuerRef = "edge", cmmeta.IssuerReference{Name: "agents-ca", Kind: "AWSPCAIssuer", Group: "awspca.cert-manager.io"}
	})

	tests := map[string]struct {
		sel      ClientSelection
		selected []*cmapi.Certificate
		left     []*cmapi.Certificate
	}{
		"nothing given selects nothing": {left: []*cmapi.Certificate{plain}},
		"by the Certificate's labels": {sel: ClientSelection{Labels: agent},
			selected: []*cmapi.Certificate{plain, noTemplate, otherSecretLabel, otherIssuer}, left: []*cmapi.Certificate{noLabels}},
		"by the Secret's labels, from the template": {sel: ClientSelection{SecretLabels: agent},
			selected: []*cmapi.Certificate{plain, noLabels, otherIssuer}, left: []*cmapi.Certificate{noTemplate, otherSecretLabel}},
		"by an Issuer: an empty kind is an Issuer and an empty group cert-manager's; only in the root's namespace": {sel: ClientSelection{Issuer: issuer},
			selected: []*cmapi.Certificate{plain, noLabels, noTemplate, spelledOut},
			left:     []*cmapi.Certificate{otherIssuer, clusterKind, elsewhere, otherGroup}},
		"by a ClusterIssuer, in every namespace": {sel: ClientSelection{Issuer: cluster},
			selected: []*cmapi.Certificate{clusterKind, elsewhereCluster}, left: []*cmapi.Certificate{plain, elsewhere}},
		"by an issuer of another group, in every namespace": {sel: ClientSelection{Issuer: external},
			selected: []*cmapi.Certificate{externalKind}, left: []*cmapi.Certificate{plain, otherGroup}},
		"all three: every one must match": {sel: ClientSelection{Labels: agent, SecretLabels: agent, Issuer: issuer},
			selected: []*cmapi.Certificate{plain, spelledOut}, left: []*cmapi.Certificate{noLabels, noTemplate, otherSecretLabel, otherIssuer}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.sel.Tracked()).To(Equal(len(tc.selected) > 0))
			for _, crt := range tc.selected {
				g.Expect(tc.sel.selects(crt)).To(BeTrue(), "%s/%s %v %v", crt.Namespace, crt.Spec.IssuerRef, crt.Labels, crt.Spec.SecretTemplate)
			}
			for _, crt := range tc.left {
				g.Expect(tc.sel.selects(crt)).To(BeFalse(), "%s/%s %v %v", crt.Namespace, crt.Spec.IssuerRef, crt.Labels, crt.Spec.SecretTemplate)
			}
		})
	}
}

// TestTheClientCacheWithoutALabelHoldsTheRequestsOfTheNamespace: with no
// Certificate label to filter by, both caches list the client namespaces
// unfiltered (the requests carry no Secret template); selecting by issuer,
// a request naming another issuer keeps what makes it a claimant but not
// its certificates. Given a Certificate label, the API server filters by
// it whatever else is given.
func TestTheClientCacheWithoutALabelHoldsTheRequestsOfTheNamespace(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	by := labels.SelectorFromSet(agentLabels)
	issuer := &IssuerRef{Group: "cert-manager.io", Kind: "ClusterIssuer", Name: "agents-ca"}
	leaves := &requestLeaves{}
	byObject := func(o Options) (certs, requests cache.ByObject) {
		for obj, b := range clientCacheOptions(o, leaves).ByObject {
			switch obj.(type) {
			case *cmapi.Certificate:
				certs = b
			case *cmapi.CertificateRequest:
				requests = b
			}
		}
		return certs, requests
	}
	o := testOptions()
	o.ClientSecretSelector = by
	certs, requests := byObject(o)
	g.Expect(certs.Label).To(BeNil(), "no label to filter Certificates by on the API server")
	g.Expect(requests.Label).To(BeNil())

	o.ClientSelector, o.ClientIssuer = by, issuer
	certs, requests = byObject(o)
	g.Expect(certs.Label).To(Equal(by), "a Certificate label filters both on the API server")
	g.Expect(requests.Label).To(Equal(by))

	o.ClientSelector = nil
	_, requests = byObject(o)
	g.Expect(requests.Label).To(BeNil())
	crt := clientCert("agent", ptr.To(1))
	crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: "agents-ca", Kind: "ClusterIssuer"}
	ours := request(crt, 1, "", []byte("crt"), []byte("ca"))
	ours.UID, ours.ResourceVersion = "uid-ours", "7"
	out, err := requests.Transform(ours)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*cmapi.CertificateRequest).Status).To(Equal(cmapi.CertificateRequestStatus{CA: []byte("ca")}), "a request of the issuer keeps its ca.crt")
	g.Expect(leaves.of(ours)).NotTo(BeNil(), "and its certificate is read")
	g.Expect(out.(*cmapi.CertificateRequest).Annotations).To(BeNil(), "what it claims is read too")
	g.Expect(out.(*cmapi.CertificateRequest).OwnerReferences).To(BeNil())
	g.Expect(out.(*cmapi.CertificateRequest).Spec).To(Equal(cmapi.CertificateRequestSpec{IssuerRef: crt.Spec.IssuerRef}), "and of its spec its issuer only")
	// client-go may transform an object twice (a streaming list): the
	// second pass decides as the first (a pass that forgot the issuer
	// dropped every client's certificates at start, and dualca triggered
	// them all: found by the e2e scenario of the issuer).
	again, err := requests.Transform(out)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.(*cmapi.CertificateRequest).Status.CA).To(Equal([]byte("ca")), "a second pass keeps them too")
	g.Expect(leaves.of(ours)).NotTo(BeNil(), "and what was read")

	other := request(crt, 1, "", []byte("crt"), []byte("ca"))
	other.UID, other.ResourceVersion = "uid-other", "8"
	other.Spec.IssuerRef.Name = "web-ca"
	out, err = requests.Transform(other)
	g.Expect(err).NotTo(HaveOccurred())
	stripped := out.(*cmapi.CertificateRequest)
	g.Expect(stripped.Status).To(BeZero(), "a request of another issuer keeps no certificate")
	read := leaves.of(other)
	g.Expect(read).NotTo(BeNil(), "but stays a claimant of its revision")
	g.Expect(read.claim).To(Equal(claimOf(crt)))
	g.Expect(read.name).To(Equal(crt.Name))
	g.Expect(read.issued).To(BeFalse(), "with no certificate read")
	again, err = requests.Transform(stripped)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.(*cmapi.CertificateRequest).Status).To(BeZero())
	g.Expect(leaves.of(other)).To(BeIdenticalTo(read), "a second pass leaves what the first read")
}

// TestChangingWhatSelectsAClientOnlyChangesWhichAreTracked: a writer of a
// client namespace controls a Certificate's labels, Secret template and
// issuerRef. Changing them mid-rotation takes the client out of the
// selection (not tracked, not remembered) or brings it in, and nothing
// else: another client's credential stays as it was, and a client brought
// back whose request is gone is unknown, never given another's.
func TestChangingWhatSelectsAClientOnlyChangesWhichAreTracked(t *testing.T) {
	t.Parallel()
	now := time.Now()
	r1 := certs.MustCA(t, "root", 48*time.Hour)
	_, pemA, _, err := r1.Leaf("a", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leafB, pemB, _, err := r1.Leaf("b", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	changes := map[string]func(*cmapi.Certificate){
		"by Secret label": func(c *cmapi.Certificate) { c.Spec.SecretTemplate.Labels = map[string]string{"app": "web"} },
		"by issuer":       func(c *cmapi.Certificate) { c.Spec.IssuerRef.Name = "web-ca" },
		"by label":        func(c *cmapi.Certificate) { c.Labels = map[string]string{"app": "web"} },
	}
	for mode, sel := range selections() {
		if changes[mode] == nil {
			continue
		}
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := context.Background()
			a, b := clientCert("a", ptr.To(1)), clientCert("b", ptr.To(1))
			reqA := request(a, 1, "", pemA, r1.CertPEM)
			tracker, _, store := newTrackerOf(g, sel, a, b, reqA, request(b, 1, "", pemB, r1.CertPEM))
			cs, _, err := tracker.read(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(cs)).To(ConsistOf("agents/a", "agents/b"))
			g.Expect(tracker.held).To(HaveLen(2), "one memory per Certificate")

			changes[mode](a)
			g.Expect(store.Update(ctx, a)).To(Succeed())
			cs, _, err = tracker.read(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(cs)).To(ConsistOf("agents/b"), "a is no client any more")
			g.Expect(tracker.held).To(HaveLen(1), "and not remembered")
			g.Expect(tracker.held).To(HaveKey(b.UID))
			g.Expect(cs.Items[0].Leaf.Is(leafB)).To(BeTrue(), "b's own leaf")

			// a comes back after its request was collected: unknown, fail-safe.
			g.Expect(store.Delete(ctx, reqA)).To(Succeed())
			back := clientCert("a", ptr.To(1))
			g.Expect(store.Get(ctx, client.ObjectKeyFromObject(a), a)).To(Succeed())
			a.Labels, a.Spec = back.Labels, back.Spec
			g.Expect(store.Update(ctx, a)).To(Succeed())
			cs, _, err = tracker.read(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(cs)).To(ConsistOf("agents/a", "agents/b"))
			for _, c := range cs.Items {
				if c.Name == "agents/a" {
					g.Expect(c.Unknown).To(BeTrue(), "a's request is gone and it was not remembered")
					g.Expect(c.Leaf).To(BeNil())
				}
			}
		})
	}
}

// TestAClientOfTheIssuerSignedByAnotherCAGetsNoRootTrusted: a writer of a
// client namespace makes its Certificate name the selected issuer (or
// carry the selected Secret label) while its current request holds a
// leaf and ca.crt of its own CA, with the root's subject. The tracker
// reports what the request says, and the decision, on a first install
// where the clients' roots are adopted, trusts the root Secret's root
// alone, with an UntrustedRoot Warning: selection decides what is
// followed, never what is trusted.
func TestAClientOfTheIssuerSignedByAnotherCAGetsNoRootTrusted(t *testing.T) {
	t.Parallel()
	now := time.Now()
	root := certs.MustCA(t, "root", 48*time.Hour)
	forged := certs.MustCA(t, "root", 48*time.Hour) // the root's subject, another key
	_, honestPEM, _, err := root.Leaf("honest", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, forgedPEM, _, err := forged.Leaf("mallory", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for mode, sel := range selections() {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			honest, mallory := clientCert("honest", ptr.To(1)), clientCert("mallory", ptr.To(1))
			tracker, _, _ := newTrackerOf(g, sel, honest, mallory,
				request(honest, 1, "", honestPEM, root.CertPEM), request(mallory, 1, "", forgedPEM, forged.CertPEM))
			cs, _, err := tracker.read(context.Background())
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(names(cs)).To(ConsistOf("agents/honest", "agents/mallory"), "the hostile Certificate is selected")

			valid, err := bundle.ValidateRoot(root.CertPEM, root.KeyPEM, nil, now)
			g.Expect(err).NotTo(HaveOccurred())
			d := bundle.Plan(bundle.Gateway{}, valid, cs, bundle.Timings{TrustPropagationDelay: time.Minute, ServerSwitchGrace: time.Hour}, now)
			trusted, err := bundle.ParseCertificates("ca.crt", d.CAPEM)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fingerprintsOf(trusted)).To(Equal([]string{bundle.Fingerprint(root.Cert)}), "the root Secret's root alone is trusted")
			g.Expect(bundle.Contains(d.Known, forged.Cert)).To(BeFalse())
			var reasons []string
			for _, e := range d.Events {
				reasons = append(reasons, e.Reason)
			}
			g.Expect(reasons).To(ContainElement(bundle.ReasonUntrustedRoot))
		})
	}
}

// TestTheIssuerIsCheckedAtStart: the issuer that selects clients must be a
// CA issuer of the root Secret's name, or of the issuing Secret's when
// dualca keeps one; another is refused, one not found (created after
// dualca) is let through.
func TestTheIssuerIsCheckedAtStart(t *testing.T) {
	t.Parallel()
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	root := types.NamespacedName{Namespace: "cert-manager", Name: "root-ca"}
	ca := func(secret string) cmapi.IssuerSpec {
		return cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: secret}}}
	}
	api := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "good"}, Spec: ca("root-ca")},
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "elsewhere"}, Spec: ca("root-ca")},
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "other-secret"}, Spec: ca("web-ca")},
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "on-issuing"}, Spec: ca("root-ca-issuing")},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: ca("root-ca")},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "self"},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}},
	).Build()
	issuer := func(kind, name string) IssuerRef {
		r := IssuerRef{Group: "cert-manager.io", Kind: kind, Name: name}
		if kind == "Issuer" {
			r.Namespace = root.Namespace
		}
		return r
	}
	issuing := types.NamespacedName{Namespace: root.Namespace, Name: "root-ca-issuing"}
	tests := map[string]struct {
		ref     IssuerRef
		issuing types.NamespacedName
		wantErr string
	}{
		"a CA Issuer of the issuing Secret, which dualca keeps":           {ref: issuer("Issuer", "on-issuing"), issuing: issuing},
		"a CA Issuer of the root Secret, with an issuing Secret kept too": {ref: issuer("Issuer", "good"), issuing: issuing},
		"a CA Issuer of a Secret named as an issuing Secret dualca does not keep": {ref: issuer("Issuer", "on-issuing"),
			wantErr: `signs with secret "root-ca-issuing", not the root secret "root-ca"`},
		"an Issuer signing with another Secret, with an issuing Secret kept": {ref: issuer("Issuer", "other-secret"), issuing: issuing,
			wantErr: `not the root secret "root-ca" or the issuing secret "root-ca-issuing"`},
		"a CA Issuer of the root Secret":                             {ref: issuer("Issuer", "good")},
		"a CA ClusterIssuer of the root Secret's name":               {ref: issuer("ClusterIssuer", "good")},
		"an Issuer signing with another Secret":                      {ref: issuer("Issuer", "other-secret"), wantErr: `signs with secret "web-ca", not the root secret "root-ca"`},
		"an Issuer not in the root's namespace (yet) is let through": {ref: issuer("Issuer", "elsewhere")},
		"a self-signed ClusterIssuer":                                {ref: issuer("ClusterIssuer", "self"), wantErr: "is not a CA issuer"},
		"an issuer of another group cannot be checked":               {ref: IssuerRef{Group: "example.com", Kind: "PCAIssuer", Name: "x"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			err := checkIssuer(context.Background(), api, tc.ref, root, tc.issuing, logr.Discard())
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ErrIssuerNotOfTheRoot))
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
		})
	}
}

func names(cs bundle.Clients) []string {
	out := make([]string, len(cs.Items))
	for i, c := range cs.Items {
		out[i] = c.Name
	}
	return out
}

func fingerprintsOf(cs []*x509.Certificate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = bundle.Fingerprint(c)
	}
	return out
}

// TestTheClientCacheKeepsOfACertificateWhatSelectsIt: the cache keeps of a
// Certificate what identifies it, the labels the selectors name, its
// Secret's name, its issuer and its whole status; every selection decides
// on the kept Certificate as on the whole one, and a second pass (client-go
// may transform twice) keeps the same.
func TestTheClientCacheKeepsOfACertificateWhatSelectsIt(t *testing.T) {
	t.Parallel()
	many := map[string]string{"app.kubernetes.io/name": "agent", "app.kubernetes.io/part-of": "fleet", "team": "edge"}
	for k, v := range agentLabels {
		many[k] = v
	}
	other := map[string]string{"app": "web"}
	for mode, sel := range selections() {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			o := testOptions()
			o.ClientSelector, o.ClientSecretSelector, o.ClientIssuer = sel.Labels, sel.SecretLabels, sel.Issuer
			var transform func(any) (any, error)
			for obj, b := range clientCacheOptions(o, &requestLeaves{}).ByObject {
				if _, ok := obj.(*cmapi.Certificate); ok {
					transform = b.Transform
				}
			}
			g.Expect(transform).NotTo(BeNil())
			for _, tt := range []struct {
				name           string
				labels, secret map[string]string
				issuer         string
			}{
				{"selected", many, many, agentsIssuer.Name},
				{"another label", other, many, agentsIssuer.Name},
				{"another Secret label", many, other, agentsIssuer.Name},
				{"another issuer", many, many, "web-ca"},
			} {
				whole := clientCert("agent", ptr.To(3))
				whole.Labels, whole.Spec.SecretTemplate.Labels, whole.Spec.IssuerRef.Name = tt.labels, tt.secret, tt.issuer
				whole.Annotations = map[string]string{"note": "n"}
				whole.Generation, whole.ResourceVersion = 7, "42"
				whole.Spec.DNSNames, whole.Spec.Usages = []string{"agent.example.com"}, []cmapi.KeyUsage{cmapi.UsageClientAuth}
				whole.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, Message: "up to date"}}
				whole.Status.NotAfter = &metav1.Time{Time: time.Unix(1e9, 0)}
				out, err := transform(whole.DeepCopy())
				g.Expect(err).NotTo(HaveOccurred())
				kept := out.(*cmapi.Certificate)
				g.Expect(sel.selects(kept)).To(Equal(sel.selects(whole)), tt.name)
				g.Expect(kept.Status).To(Equal(whole.Status), "%s: the status stays whole", tt.name)
				g.Expect([]any{kept.Name, kept.Namespace, kept.UID, kept.ResourceVersion, kept.Generation, kept.Spec.SecretName, kept.Spec.IssuerRef}).
					To(Equal([]any{whole.Name, whole.Namespace, whole.UID, whole.ResourceVersion, whole.Generation, whole.Spec.SecretName, whole.Spec.IssuerRef}))
				g.Expect(kept.Annotations).To(BeEmpty())
				g.Expect(kept.Spec.DNSNames).To(BeEmpty())
				g.Expect(len(kept.Labels)).To(BeNumerically("<=", len(agentLabels)), "only the labels a selector names")
				again, err := transform(kept.DeepCopy())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(again).To(Equal(kept), "a second pass keeps the same")
			}
		})
	}
}
