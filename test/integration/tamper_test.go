package integration

import (
	"bytes"
	"context"
	"crypto/x509"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/certs"
)

// TestAGatewayWriterGetsNothingSignedNorTrusted: whoever may patch the
// gateway Secret (the operator Role of dualca 4341162 could) writes a CA of
// their own into it, in each of the ways that made dualca 4341162 sign or
// keep it: as tls.crt/tls.key recorded as the server root and paused (it
// then cross-signed the attacker's key with the live root), in ca.crt with
// dualca.io/bundle-hash made to match, and in ca.crt with
// dualca.io/strategy removed (adopted). Every version of the gateway Secret
// the API server ever holds is watched: apart from the attacker's own
// writes, none carries the attacker's CA or any certificate for its key;
// each attack is undone from dualca's record with one GatewayTampered
// Warning and one count of dualca_gateway_tampered_total.
func TestAGatewayWriterGetsNothingSignedNorTrusted(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	d, _ := s.startOnFirstRoot(s.options().Syncer())
	s.putRoot(s.newRoot("root-2"))
	mid := gatewayView{Roots: []string{"root-2", "root-1"}, Server: "root-1", Phase: "Renewing"}
	s.g.Eventually(s.view).Should(Equal(mid))
	good := s.gatewaySecret()
	versions := s.watchGateway(good.ResourceVersion)

	attacker := certs.MustCA(t, "root-1", 24*time.Hour) // the root's own subject: subjects are public
	attacks := map[string]func(gw *corev1.Secret){
		"own CA as the server, recorded and paused": func(gw *corev1.Secret) {
			gw.Data[corev1.TLSCertKey], gw.Data[corev1.TLSPrivateKeyKey] = attacker.CertPEM, attacker.KeyPEM
			gw.Annotations[bundle.AnnotationServer] = fingerprint(attacker.Cert)
			gw.Annotations[bundle.AnnotationPaused] = bundle.PausedTrue
		},
		"own CA in ca.crt, bundle-hash made to match": func(gw *corev1.Secret) {
			gw.Data["ca.crt"] = append(bytes.Clone(gw.Data["ca.crt"]), attacker.CertPEM...)
			gw.Annotations[bundle.AnnotationBundleHash] = bundle.Hash(gw.Data["ca.crt"])
			gw.Annotations[bundle.AnnotationBundleRoots] += "," + fingerprint(attacker.Cert)
		},
		"own CA in ca.crt, strategy annotation removed": func(gw *corev1.Secret) {
			gw.Data["ca.crt"] = append(bytes.Clone(gw.Data["ca.crt"]), attacker.CertPEM...)
			delete(gw.Annotations, bundle.AnnotationStrategy)
		},
	}
	var written []string // the attacker's versions
	n := 0
	for name, attack := range attacks {
		gw := s.gatewaySecret()
		attack(gw)
		s.g.Expect(k8s.Update(context.Background(), gw)).To(Succeed(), name)
		written = append(written, gw.ResourceVersion)
		n++
		s.g.Eventually(func(g Gomega) {
			cur := s.gatewaySecret()
			g.Expect(cur.ResourceVersion).NotTo(Equal(gw.ResourceVersion), name)
			g.Expect(cur.Data).To(Equal(good.Data), name+": restored from dualca's record, byte for byte")
			g.Expect(dualcaAnnotations(cur.Annotations)).To(Equal(dualcaAnnotations(good.Annotations)), name)
		}).Should(Succeed(), name)
		s.g.Eventually(func() float64 { return d.Counter("dualca_gateway_tampered_total") }).Should(Equal(float64(n)), name)
	}
	s.g.Eventually(s.events).Should(ContainElement(HavePrefix(bundle.ReasonGatewayTampered + ": gateway Secret was changed outside dualca (")))
	s.g.Expect(s.view()).To(Equal(mid), "the rotation goes on where it was: nothing paused, the server still on root-1")

	// Every version the API server held, in order.
	seen := versions()
	s.g.Expect(len(seen)).To(BeNumerically(">=", 2*len(attacks)), "the watch saw every attack and every restore")
	for _, v := range seen {
		if bytesIn(written, v.ResourceVersion) {
			continue // the attacker's own write
		}
		for _, c := range certsIn(v.Data[corev1.TLSCertKey]) {
			s.g.Expect(c.RawSubjectPublicKeyInfo).NotTo(Equal(attacker.Cert.RawSubjectPublicKeyInfo),
				"version %s: tls.crt holds a certificate (CA: %v, issuer %q) for the attacker's key", v.ResourceVersion, c.IsCA, c.Issuer.CommonName)
		}
		for _, c := range certsIn(v.Data["ca.crt"]) {
			s.g.Expect(c.Raw).NotTo(Equal(attacker.Cert.Raw), "version %s: ca.crt trusts the attacker's CA", v.ResourceVersion)
		}
	}
}

// watchGateway records every version of the gateway Secret after
// resourceVersion from, until the test ends; the function returns those
// seen so far.
func (s *setup) watchGateway(from string) func() []*corev1.Secret {
	s.t.Helper()
	return s.watchSecret(s.gateway, from)
}

// dualcaAnnotations are the rotation's state on a target: its dualca.io/
// annotations but the seal, which each write makes anew for the record
// version it started from.
func dualcaAnnotations(a map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		if len(k) > len(bundle.AnnotationPrefix) && k[:len(bundle.AnnotationPrefix)] == bundle.AnnotationPrefix && k != syncer.AnnotationSeal {
			out[k] = v
		}
	}
	return out
}

func bytesIn(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// certsIn parses every certificate of PEM, skipping what is not one.
func certsIn(data []byte) []*x509.Certificate {
	cs, err := bundle.ParseCertificates("pem", data)
	if err != nil {
		return nil
	}
	return cs
}
