package gateways

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dualca/dualca/test/lib/certs"
)

// TestRefusedReloadsAreCounted: a version of the credential that a gateway
// cannot load (a key that is not the certificate's, as a writer mixing two
// versions would leave) is refused and counted, so the count the suite
// asserts to be zero can be other than zero. nginx and HAProxy go on
// serving the version before it; Traefik drops the certificate and serves
// its own default one, which no client trusts.
func TestRefusedReloadsAreCounted(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := kubernetes.NewForConfigOrDie(shared.RESTConfig)
	ns := fmt.Sprintf("gw-refusals-%d", scenarios.Add(1))
	g.Expect(shared.CreateNamespace(ctx, ns)).To(Succeed())

	ca := certs.MustCA(t, "refusals-ca", time.Hour)
	notBefore, notAfter := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	_, serverPEM, serverKey, err := ca.Leaf(ServerName, notBefore, notAfter)
	g.Expect(err).NotTo(HaveOccurred())
	_, _, otherKey, err := ca.Leaf(ServerName, notBefore, notAfter)
	g.Expect(err).NotTo(HaveOccurred())
	_, clientPEM, clientKey, err := ca.Leaf("agent", notBefore, notAfter)
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gatewayName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": serverPEM, "tls.key": serverKey, "ca.crt": ca.CertPEM},
	}
	g.Expect(shared.Client.Create(ctx, secret)).To(Succeed())
	client := t.TempDir()
	for name, content := range map[string][]byte{"tls.crt": clientPEM, "tls.key": clientKey, "ca.crt": ca.CertPEM} {
		g.Expect(os.WriteFile(filepath.Join(client, name), content, 0o600)).To(Succeed())
	}

	servers := map[string]Server{}
	for _, gw := range fileGateways {
		dir := filepath.Join(t.TempDir(), gw.Name)
		g.Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
		server, stop, err := StartFile(ctx, kube, ns, gw, Combined, gatewayName, dir, nil)
		g.Expect(err).NotTo(HaveOccurred(), "starting %s", gw.Name)
		t.Cleanup(stop)
		servers[gw.Name] = server
	}
	tr, err := StartTraefik(ctx, shared.Client, shared.Kubeconfig, traefikBinary, ns, Combined, gatewayName, t.TempDir())
	g.Expect(err).NotTo(HaveOccurred(), "starting Traefik")
	t.Cleanup(tr.Stop)
	servers[TraefikName] = tr
	through := func(s Server) func() error {
		return func() error {
			status, err := Curl.Attempt(ctx, client, s.Addr())
			if err == nil && status != s.Expect() {
				err = fmt.Errorf("HTTP status %d", status)
			}
			return err
		}
	}
	for name, s := range servers {
		g.Eventually(through(s)).WithTimeout(time.Minute).Should(Succeed(), "%s serves the first version", name)
		g.Expect(s.Refused()).To(BeZero(), "%s took the first version in", name)
	}

	secret.Data["tls.key"] = otherKey
	g.Expect(shared.Client.Update(ctx, secret)).To(Succeed())
	for name, s := range servers {
		g.Eventually(s.Refused).WithTimeout(time.Minute).Should(BeNumerically(">=", 1), "%s refuses the version whose key is not its certificate's", name)
		t.Logf("%s refused it: %s", name, s.Problems())
	}
	for _, gw := range fileGateways {
		g.Expect(through(servers[gw.Name])()).To(Succeed(), "%s goes on serving the version before", gw.Name)
	}
	// Traefik applies the configuration it built without the certificate
	// a moment after it logged the error.
	g.Eventually(through(tr)).WithTimeout(30*time.Second).Should(MatchError(ContainSubstring("self-signed")), "Traefik serves its default certificate instead")
}

// TestClientsCheckTheServersChainAndName: both client stacks refuse a
// gateway whose certificate is not for ServerName, though its chain is
// trusted, and one whose chain they do not trust, though its name is
// right; so a handshake the suite counts as through was checked for both.
func TestClientsCheckTheServersChainAndName(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := kubernetes.NewForConfigOrDie(shared.RESTConfig)
	ns := fmt.Sprintf("gw-checks-%d", scenarios.Add(1))
	g.Expect(shared.CreateNamespace(ctx, ns)).To(Succeed())
	ca, stranger := certs.MustCA(t, "checks-ca", time.Hour), certs.MustCA(t, "stranger-ca", time.Hour)
	notBefore, notAfter := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	_, clientPEM, clientKey, err := ca.Leaf("agent", notBefore, notAfter)
	g.Expect(err).NotTo(HaveOccurred())
	client := t.TempDir()
	for name, content := range map[string][]byte{"tls.crt": clientPEM, "tls.key": clientKey, "ca.crt": ca.CertPEM} {
		g.Expect(os.WriteFile(filepath.Join(client, name), content, 0o600)).To(Succeed())
	}
	for _, c := range []struct {
		what   string
		issuer *certs.CA
		name   string
		why    string // in both stacks' error
	}{
		{"a certificate for another name", ca, "elsewhere.dualca.test", "name"},
		{"a chain the client does not trust", stranger, ServerName, "issuer"},
	} {
		_, serverPEM, serverKey, err := c.issuer.Leaf(c.name, notBefore, notAfter)
		g.Expect(err).NotTo(HaveOccurred())
		secret := fmt.Sprintf("server-%d", len(c.what))
		g.Expect(shared.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secret},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"tls.crt": serverPEM, "tls.key": serverKey, "ca.crt": ca.CertPEM},
		})).To(Succeed())
		server, stop, err := StartFile(ctx, kube, ns, Nginx, Combined, secret, t.TempDir(), nil)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(stop)
		for _, st := range Stacks {
			_, err := st.Attempt(ctx, client, server.Addr())
			g.Expect(err).To(MatchError(ContainSubstring(c.why)), "%s refuses %s", st.Name, c.what)
			t.Logf("%s, %s: %v", st.Name, c.what, err)
		}
	}
}
