package flags

import (
	"flag"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// Not parallel: controller-runtime binds --kubeconfig to a package-level
// variable, so concurrent Parse calls would race on it.
func TestParse(t *testing.T) {
	base := []string{"--root-secret=istio-system/root-ca", "--gateway-secret=istio-system/gateway-credential", "--server-dns-names=gw.example.com"}
	tests := map[string]struct {
		args    []string
		wantErr string
		check   func(g *WithT, o Options)
	}{
		"the defaults are those documented": {
			args: base,
			check: func(g *WithT, o Options) {
				g.Expect(o.RootSecret).To(Equal(types.NamespacedName{Namespace: "istio-system", Name: "root-ca"}))
				g.Expect(o.GatewaySecret).To(Equal(types.NamespacedName{Namespace: "istio-system", Name: "gateway-credential"}))
				g.Expect(o.Legacy).To(BeFalse())
				g.Expect(o.LeaderElect).To(BeFalse())
				g.Expect(o.PollInterval).To(Equal(5 * time.Minute))
				g.Expect(o.ServerSwitchGrace).To(BeNumerically(">", o.TrustPropagationDelay))
				g.Expect(o.ClientSelector).To(BeNil(), "clients are not tracked unless selected")
				g.Expect(o.ClientNamespaces).To(Equal([]string{"istio-system"}), "clients are looked for beside the gateway")
				g.Expect(o.RenewalQPS).To(BeNumerically("==", 5))
				g.Expect(o.RenewalBurst).To(Equal(10))
				g.Expect(o.Server.DNSNames).To(Equal([]string{"gw.example.com"}))
				g.Expect(o.Server.KeyAlgorithm).To(Equal(bundle.KeyECDSAP256))
				g.Expect(o.Server.Lifetime).To(Equal(2160 * time.Hour))
			},
		},
		"a server profile is taken, names once": {
			args: append(base[:2:2], "--server-dns-names=gw.example.com, *.gw.example.com,gw.example.com", "--server-ip-addresses=10.0.0.1,::1,10.0.0.1",
				"--server-key-algorithm=ed25519", "--server-lifetime=720h"),
			check: func(g *WithT, o Options) {
				g.Expect(o.Server.DNSNames).To(Equal([]string{"gw.example.com", "*.gw.example.com"}))
				g.Expect(ipStrings(o.Server.IPAddresses)).To(Equal([]string{"10.0.0.1", "::1"}))
				g.Expect(o.Syncer().Server).To(Equal(bundle.ServerProfile{DNSNames: o.Server.DNSNames, IPAddresses: o.Server.IPAddresses,
					KeyAlgorithm: bundle.KeyEd25519, Lifetime: 720 * time.Hour}))
			},
		},
		"a leaf without names when asked for": {
			args: append(base[:2:2], "--server-without-names"),
			check: func(g *WithT, o Options) {
				g.Expect(o.Server.WithoutNames).To(BeTrue())
				g.Expect(o.Syncer().Server.DNSNames).To(BeEmpty())
			},
		},
		"the legacy strategy needs no server names":                {args: append(base[:2:2], "--cert-management-legacy")},
		"no server names is refused in the zero-downtime strategy": {args: base[:2:2], wantErr: "--server-dns-names or --server-ip-addresses is required"},
		"names and without-names contradict":                       {args: append(base, "--server-without-names"), wantErr: "contradicts"},
		"an invalid server DNS name is named":                      {args: append(base[:2:2], "--server-dns-names=ok.example.com,Not_OK"), wantErr: `--server-dns-names: "Not_OK" is not a DNS name`},
		"a wildcard in the middle is refused":                      {args: append(base[:2:2], "--server-dns-names=a.*.example.com"), wantErr: "is not a DNS name"},
		"an invalid server IP address is named":                    {args: append(base[:2:2], "--server-ip-addresses=10.0.0.300"), wantErr: `"10.0.0.300" is not an IP address`},
		"an unknown key algorithm is named":                        {args: append(base, "--server-key-algorithm=dsa"), wantErr: `--server-key-algorithm="dsa": want one of ecdsa-p256, rsa-2048, rsa-3072, ed25519`},
		"a lifetime beyond a year is refused":                      {args: append(base, "--server-lifetime=9000h"), wantErr: "--server-lifetime must be between"},
		"a lifetime whose third is within the grace is refused": {args: append(base, "--server-lifetime=504h"),
			wantErr: "a third of it (168h0m0s, when the certificate is issued again) must exceed --server-switch-grace plus --trust-propagation-delay (168h2m0s)"},
		"a short lifetime goes with a short grace": {args: append(base, "--server-lifetime=2h", "--server-switch-grace=30m", "--trust-propagation-delay=1m")},
		"a client selector and namespaces are taken, duplicates once": {
			args: append(base, "--client-selector=dualca.io/client in (agent,edge)", "--client-namespaces=agents, edge,agents", "--renewal-qps=0.5", "--renewal-burst=1"),
			check: func(g *WithT, o Options) {
				g.Expect(o.ClientSelector.String()).To(Equal("dualca.io/client in (agent,edge)"))
				g.Expect(o.ClientNamespaces).To(Equal([]string{"agents", "edge"}))
				g.Expect(o.RenewalQPS).To(BeNumerically("==", 0.5))
				g.Expect(o.RenewalBurst).To(Equal(1))
			},
		},
		"the legacy flag and durations in seconds are taken": {
			args: append(base, "--cert-management-legacy", "--poll-interval=1s", "--trust-propagation-delay=2s", "--server-switch-grace=3s"),
			check: func(g *WithT, o Options) {
				g.Expect(o.Legacy).To(BeTrue())
				g.Expect([]time.Duration{o.PollInterval, o.TrustPropagationDelay, o.ServerSwitchGrace}).To(Equal([]time.Duration{time.Second, 2 * time.Second, 3 * time.Second}))
			},
		},
		"root and gateway may live in different namespaces": {
			args: []string{"--root-secret=cert-manager/root", "--gateway-secret=istio-system/gw", "--server-without-names"},
			check: func(g *WithT, o Options) {
				g.Expect(o.RootSecret.Namespace).NotTo(Equal(o.GatewaySecret.Namespace))
			},
		},
		"bundle targets alone need no gateway Secret, and name the rotation": {
			args: []string{"--root-secret=cert-manager/root", "--bundle-targets=configmap:edge/client-ca, secret:nginx/client-ca", "--bundle-key=trust.pem", "--bundle-secret-type=nginx.org/ca"},
			check: func(g *WithT, o Options) {
				g.Expect(o.GatewaySecret.Name).To(BeEmpty())
				g.Expect(o.BundleTargets).To(Equal([]syncer.BundleTarget{{Kind: "configmap", Key: types.NamespacedName{Namespace: "edge", Name: "client-ca"}},
					{Kind: "secret", Key: types.NamespacedName{Namespace: "nginx", Name: "client-ca"}}}))
				g.Expect(o.StateSecret).To(Equal(types.NamespacedName{Namespace: "edge", Name: "client-ca-dualca-state"}))
				g.Expect(o.StatusConfigMap).To(Equal(types.NamespacedName{Namespace: "edge", Name: "client-ca-dualca-status"}))
				g.Expect(o.ClientNamespaces).To(Equal([]string{"edge"}))
				g.Expect(o.BundleKey).To(Equal("trust.pem"))
				g.Expect(string(o.BundleSecretType)).To(Equal("nginx.org/ca"))
			},
		},
		"the split form is taken": {
			args:  append(base, "--gateway-form=split"),
			check: func(g *WithT, o Options) { g.Expect(o.GatewayForm).To(Equal(syncer.FormSplit)) },
		},
		"an unknown gateway form is refused":         {args: append(base, "--gateway-form=istio"), wantErr: `--gateway-form="istio"`},
		"a bundle target of another kind is refused": {args: append(base, "--bundle-targets=pod:a/b"), wantErr: "want secret:NAMESPACE/NAME"},
		"a bundle target with a bad name is refused": {args: append(base, "--bundle-targets=secret:a/B"), wantErr: `name "B"`},
		"a bundle target named twice is refused":     {args: append(base, "--bundle-targets=secret:a/b,secret:a/b"), wantErr: "names secret:a/b twice"},
		"the root as a bundle target is refused": {args: append(base, "--bundle-targets=secret:istio-system/root-ca"),
			wantErr: "is --root-secret: dualca writes only the bundle there"},
		"the status ConfigMap as a bundle target is refused": {args: append(base, "--bundle-targets=configmap:istio-system/gateway-credential-dualca-status"),
			wantErr: "is --status-configmap"},
		"the split form's Secret may not be the root": {args: []string{"--root-secret=istio-system/gw-cacert", "--gateway-secret=istio-system/gw", "--gateway-form=split"},
			wantErr: "writes the bundle to istio-system/gw-cacert, which is --root-secret"},
		"the combined form's shadow as a bundle target is refused": {args: append(base, "--bundle-targets=secret:istio-system/gateway-credential-cacert"),
			wantErr: "is the Secret Istio would prefer to the combined gateway Secret's bundle"},
		"an issuing Secret beside the root is taken": {args: append(base, "--issuing-secret=istio-system/root-ca-issuing"),
			check: func(g *WithT, o Options) {
				g.Expect(o.Syncer().IssuingSecret).To(Equal(types.NamespacedName{Namespace: "istio-system", Name: "root-ca-issuing"}))
			}},
		"an issuing Secret outside the root's namespace is refused: the root's key goes nowhere it was not": {
			args: append(base, "--issuing-secret=agents/root-ca-issuing"), wantErr: `must be in the root Secret's namespace "istio-system"`},
		"the root as the issuing Secret is refused": {args: append(base, "--issuing-secret=istio-system/root-ca"),
			wantErr: "--issuing-secret=istio-system/root-ca is --root-secret"},
		"the gateway Secret as the issuing Secret is refused": {args: append(base, "--issuing-secret=istio-system/gateway-credential"),
			wantErr: "is --gateway-secret"},
		"a malformed issuing Secret is named":                  {args: append(base, "--issuing-secret=root-ca-issuing"), wantErr: `--issuing-secret="root-ca-issuing": want NAMESPACE/NAME`},
		"a bad bundle key is refused":                          {args: append(base, "--bundle-key=a/b"), wantErr: `--bundle-key="a/b"`},
		"a TLS bundle Secret type is refused":                  {args: append(base, "--bundle-secret-type=kubernetes.io/tls"), wantErr: "requires keys of that type"},
		"a zero propagation delay is allowed":                  {args: append(base, "--trust-propagation-delay=0s")},
		"a missing root secret is named":                       {args: base[1:], wantErr: "--root-secret is required"},
		"a name with a slash too many is refused":              {args: []string{"--root-secret=a/b/c", base[1]}, wantErr: "want NAMESPACE/NAME"},
		"an upper-case name is refused":                        {args: []string{"--root-secret=ns/Root", base[1]}, wantErr: `name "Root"`},
		"a zero poll interval is refused":                      {args: append(base, "--poll-interval=0s"), wantErr: "--poll-interval must be positive"},
		"a negative propagation delay is refused":              {args: append(base, "--trust-propagation-delay=-1s"), wantErr: "--trust-propagation-delay must not be negative"},
		"an invalid leader election namespace is named":        {args: append(base, "--leader-election-namespace=No"), wantErr: "--leader-election-namespace"},
		"a malformed client selector is named":                 {args: append(base, "--client-selector=a in (b"), wantErr: "--client-selector"},
		"a client selector that selects everything is refused": {args: append(base, "--client-selector= "), wantErr: "selects everything"},
		"an invalid client namespace is named":                 {args: append(base, "--client-selector=a=b", "--client-namespaces=ok,Not_OK"), wantErr: `namespace "Not_OK"`},
		"client namespaces without a selection are refused":    {args: append(base, "--client-namespaces=agents"), wantErr: "needs a client selection"},
		"a malformed client secret selector is named":          {args: append(base, "--client-secret-selector=a in (b"), wantErr: "--client-secret-selector"},
		"a secret selector that selects everything is refused": {args: append(base, "--client-secret-selector= "), wantErr: "--client-secret-selector=\"\" selects everything"},
		"an issuer without a kind is refused":                  {args: append(base, "--client-issuer=agents-ca"), wantErr: "want ClusterIssuer/NAME, Issuer/NAME or KIND.GROUP/NAME"},
		"an issuer with a slash too many is refused":           {args: append(base, "--client-issuer=Issuer/a/b"), wantErr: "want ClusterIssuer/NAME"},
		"a kind cert-manager.io has not is refused":            {args: append(base, "--client-issuer=CAIssuer/x"), wantErr: "kinds Issuer and ClusterIssuer"},
		"a lower-case kind is refused":                         {args: append(base, "--client-issuer=issuer/x"), wantErr: `kind "issuer" is not a kind`},
		"an upper-case issuer name is refused":                 {args: append(base, "--client-issuer=ClusterIssuer/CA"), wantErr: `name "CA"`},
		"an invalid issuer group is refused":                   {args: append(base, "--client-issuer=PCAIssuer.Bad_Group/x"), wantErr: `group "Bad_Group"`},
		"an Issuer no client namespace can name is refused": {args: []string{"--root-secret=cert-manager/root", "--gateway-secret=istio-system/gw",
			"--client-issuer=Issuer/agents-ca", "--client-namespaces=agents"}, wantErr: `the root Secret's namespace "cert-manager", which is not among --client-namespaces`},
		"each client flag alone selects clients, namespaces too": {
			args: append(base, "--client-secret-selector=app=agent", "--client-namespaces=agents,istio-system"),
			check: func(g *WithT, o Options) {
				g.Expect(o.ClientSelector).To(BeNil())
				g.Expect(o.ClientSecretSelector.String()).To(Equal("app=agent"))
				g.Expect(o.Clients().Tracked()).To(BeTrue())
				g.Expect(o.ClientNamespaces).To(Equal([]string{"agents", "istio-system"}))
			},
		},
		"an issuer is cert-manager's unless a group is given, an Issuer the root's namespace's": {
			args: append(base, "--client-issuer=Issuer/agents-ca"),
			check: func(g *WithT, o Options) {
				g.Expect(*o.ClientIssuer).To(Equal(syncer.IssuerRef{Group: "cert-manager.io", Kind: "Issuer", Name: "agents-ca", Namespace: "istio-system"}))
				g.Expect(o.Syncer().Clients().Issuer).To(Equal(o.ClientIssuer))
			},
		},
		"a ClusterIssuer and an external issuer are of no namespace": {
			args: append(base, "--client-issuer=ClusterIssuer/agents-ca"),
			check: func(g *WithT, o Options) {
				g.Expect(*o.ClientIssuer).To(Equal(syncer.IssuerRef{Group: "cert-manager.io", Kind: "ClusterIssuer", Name: "agents-ca"}))
				ext, err := ParseIssuer("client-issuer", "AWSPCAClusterIssuer.awspca.cert-manager.io/pca", "istio-system")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(*ext).To(Equal(syncer.IssuerRef{Group: "awspca.cert-manager.io", Kind: "AWSPCAClusterIssuer", Name: "pca"}))
				g.Expect(ext.String()).To(Equal("AWSPCAClusterIssuer.awspca.cert-manager.io/pca"))
			},
		},
		"all three client flags together": {
			args: append(base, "--client-selector=a=b", "--client-secret-selector=c=d", "--client-issuer=Issuer.cert-manager.io/x"),
			check: func(g *WithT, o Options) {
				sel := o.Clients()
				g.Expect([]string{sel.Labels.String(), sel.SecretLabels.String(), sel.Issuer.String()}).To(Equal([]string{"a=b", "c=d", "Issuer/x"}))
			},
		},
		"a zero renewal rate is refused":  {args: append(base, "--renewal-qps=0"), wantErr: "--renewal-qps must be a positive number"},
		"a NaN renewal rate is refused":   {args: append(base, "--renewal-qps=NaN"), wantErr: "--renewal-qps must be a positive number"},
		"a zero renewal burst is refused": {args: append(base, "--renewal-burst=0"), wantErr: "--renewal-burst must be at least 1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			o, err := Parse("dualca", tc.args)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.check != nil {
				tc.check(g, o)
			}
		})
	}
}

func TestAllProblemsAreReportedTogether(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse("dualca", []string{"--poll-interval=0s"})
	g.Expect(err).To(MatchError(And(
		ContainSubstring("--root-secret is required"),
		ContainSubstring("--gateway-secret is required"),
		ContainSubstring("--poll-interval must be positive"))))
}

// TestArgsGiveBackTheOptions: Args is the command line of an Options built
// in code, every flag of dualca's own set away from its default, so that
// a test running the binary drops none of them.
func TestArgsGiveBackTheOptions(t *testing.T) {
	g := NewWithT(t)
	o := Defaults()
	o.RootSecret = types.NamespacedName{Namespace: "cert-manager", Name: "root"}
	o.GatewaySecret = types.NamespacedName{Namespace: "istio-system", Name: "gw"}
	o.Legacy, o.LeaderElect = true, true
	o.PollInterval, o.TrustPropagationDelay, o.ServerSwitchGrace = time.Second, 2*time.Second, 3*time.Second
	o.ClientSelector = labels.SelectorFromSet(labels.Set{"dualca.io/client": "agent"})
	o.ClientSecretSelector = labels.SelectorFromSet(labels.Set{"app": "agent"})
	o.ClientIssuer = &syncer.IssuerRef{Group: "cert-manager.io", Kind: "Issuer", Name: "agents-ca", Namespace: "cert-manager"}
	o.ClientNamespaces = []string{"agents", "edge", "cert-manager"}
	o.RenewalQPS, o.RenewalBurst = 0.5, 2
	o.MetricsBindAddress, o.HealthProbeBindAddress = "127.0.0.1:1", "127.0.0.1:2"
	o.LeaderElectionNamespace = "elections"
	o.StateSecret = types.NamespacedName{Namespace: "dualca", Name: "gw-record"}
	o.StatusConfigMap = types.NamespacedName{Namespace: "dualca", Name: "gw-status"}
	o.GatewayForm, o.BundleKey, o.BundleSecretType = syncer.FormSplit, "trust.pem", "nginx.org/ca"
	o.BundleTargets = []syncer.BundleTarget{{Kind: syncer.KindConfigMap, Key: types.NamespacedName{Namespace: "edge", Name: "trust"}},
		{Kind: syncer.KindSecret, Key: types.NamespacedName{Namespace: "nginx", Name: "client-ca"}}}
	o.IssuingSecret = types.NamespacedName{Namespace: "cert-manager", Name: "root-issuing"}
	o.Server = Server{DNSNames: []string{"gw.example.com", "*.gw.example.com"}, IPAddresses: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")},
		KeyAlgorithm: bundle.KeyRSA3072, Lifetime: 48 * time.Hour, WithoutNames: true} // legacy: no contradiction

	args := o.Args()
	fs := flag.NewFlagSet("own", flag.ContinueOnError)
	(&Options{}).addOwnFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		g.Expect(args).To(ContainElement(HavePrefix("--"+f.Name+"=")), "every flag of dualca's own is given")
	})
	back, err := Parse("dualca", args)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.Syncer()).To(Equal(o.Syncer()))
	g.Expect(back.Legacy).To(BeTrue())
	g.Expect(back.Server.Profile()).To(Equal(o.Server.Profile()))
	g.Expect(back.Server.WithoutNames).To(BeTrue())
	withoutNames := Defaults()
	withoutNames.RootSecret, withoutNames.GatewaySecret, withoutNames.Server.WithoutNames = o.RootSecret, o.GatewaySecret, true
	back, err = Parse("dualca", withoutNames.Args())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.Server.WithoutNames).To(BeTrue())

	defaults := Defaults()
	defaults.RootSecret, defaults.GatewaySecret = o.RootSecret, o.GatewaySecret
	g.Expect(defaults.Args()).To(ConsistOf("--root-secret=cert-manager/root", "--gateway-secret=istio-system/gw"),
		"a default is not repeated, and client namespaces go with a selector only")

	// Each client flag alone carries the namespaces with it.
	for _, one := range []func(*Options){
		func(o *Options) { o.ClientSecretSelector = labels.SelectorFromSet(labels.Set{"app": "agent"}) },
		func(o *Options) {
			o.ClientIssuer = &syncer.IssuerRef{Group: "example.com", Kind: "PCAIssuer", Name: "pca"}
		},
	} {
		alone := defaults
		alone.ClientNamespaces, alone.Server.DNSNames = []string{"agents"}, []string{"gw.example.com"}
		one(&alone)
		args := alone.Args()
		g.Expect(args).To(ContainElement("--client-namespaces=agents"))
		back, err := Parse("dualca", args)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(back.Clients()).To(Equal(alone.Clients()))
		g.Expect(back.ClientNamespaces).To(Equal(alone.ClientNamespaces))
	}
}

// TestValidateChangesNothing: Validate of options built in code checks
// them as Parse would, and leaves them as they were.
func TestValidateChangesNothing(t *testing.T) {
	g := NewWithT(t)
	o := Defaults()
	o.RootSecret = types.NamespacedName{Namespace: "ns", Name: "root"}
	o.GatewaySecret = types.NamespacedName{Namespace: "ns", Name: "gw"}
	o.Server.IPAddresses = []net.IP{net.ParseIP("10.0.0.1")}
	before := o
	g.Expect(o.Validate()).To(Succeed())
	g.Expect(o).To(Equal(before))
	o.GatewaySecret = o.RootSecret
	g.Expect(o.Validate()).To(MatchError(ContainSubstring("--gateway-secret must differ from --root-secret")))
	o.GatewaySecret = types.NamespacedName{Namespace: "Not_OK", Name: "gw"}
	g.Expect(o.Validate()).To(MatchError(ContainSubstring(`namespace "Not_OK"`)))
}

func TestAMalformedKeyIsNotAlsoMissing(t *testing.T) {
	g := NewWithT(t)
	_, err := Parse("dualca", []string{"--root-secret=nonsense", "--gateway-secret=ns/gw", "--poll-interval=0s"})
	g.Expect(err).To(MatchError(And(
		ContainSubstring(`--root-secret="nonsense": want NAMESPACE/NAME`),
		ContainSubstring("--poll-interval must be positive"),
		Not(ContainSubstring("--root-secret is required")))))
}
