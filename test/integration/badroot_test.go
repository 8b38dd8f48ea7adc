package integration

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// badRoot is a root Secret that must never reach the gateway, and the part
// of the reason an operator is told.
type badRoot struct {
	name   string
	typ    corev1.SecretType
	data   map[string][]byte
	delete bool
	reason string
}

func badRoots(t *testing.T, good *certs.CA) []badRoot {
	now := time.Now()
	tls := func(crt, key, ca []byte) map[string][]byte {
		return map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key, "ca.crt": ca}
	}
	leaf := certs.MustNew(t, "a-leaf", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{}, good)
	expired := certs.MustNew(t, "expired-root", now.Add(-2*time.Hour), now.Add(-time.Hour), certs.Options{IsCA: true}, nil)
	future := certs.MustNew(t, "future-root", now.Add(time.Hour), now.Add(2*time.Hour), certs.Options{IsCA: true}, nil)
	noSign := certs.MustNew(t, "no-signing-root", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true, NoCertSign: true}, nil)
	other := certs.MustCA(t, "other-root", time.Hour)
	junk := make([]byte, 4096)
	_, _ = rand.Read(junk)
	withHeaders := bytes.Replace(good.CertPEM, []byte("-----\n"), []byte("-----\nProc-Type: 4,ENCRYPTED\n\n"), 1)
	huge := bytes.Repeat(good.CertPEM, (bundle.MaxPEMBytes/len(good.CertPEM))+1)
	rsaRoot := certs.MustNew(t, "rsa-root", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true, KeyType: certs.KeyRSA}, nil)
	edRoot := certs.MustNew(t, "ed25519-root", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)
	// The API server takes at most 1 MiB of data per Secret, all keys together.
	megabyte := make([]byte, 1<<20-16<<10)
	_, _ = rand.Read(megabyte)
	return []badRoot{
		{name: "garbage instead of PEM", data: tls([]byte("hello, world"), good.KeyPEM, good.CertPEM), reason: "tls.crt: has data before the first PEM block"},
		{name: "binary junk in ca.crt", data: tls(good.CertPEM, good.KeyPEM, junk), reason: "ca.crt: has data before the first PEM block"},
		{name: "truncated PEM", data: tls(good.CertPEM[:len(good.CertPEM)/2], good.KeyPEM, good.CertPEM), reason: "tls.crt: block 1 is truncated"},
		{name: "a leaf instead of a CA", data: tls(leaf.CertPEM, leaf.KeyPEM, good.CertPEM), reason: "tls.crt: certificate is not a CA"},
		{name: "an expired root", data: tls(expired.CertPEM, expired.KeyPEM, expired.CertPEM), reason: "tls.crt: certificate expired at"},
		{name: "a root not valid yet", data: tls(future.CertPEM, future.KeyPEM, future.CertPEM), reason: "tls.crt: certificate not valid before"},
		{name: "a CA that may not sign", data: tls(noSign.CertPEM, noSign.KeyPEM, noSign.CertPEM), reason: "tls.crt: CA may not sign certificates"},
		{name: "the key of another root", data: tls(good.CertPEM, other.KeyPEM, good.CertPEM), reason: "tls.key:"},
		{name: "a private key in ca.crt", data: tls(good.CertPEM, good.KeyPEM, append(bytes.Clone(good.CertPEM), good.KeyPEM...)), reason: "ca.crt: block 2 is"},
		{name: "PEM headers", data: tls(withHeaders, good.KeyPEM, good.CertPEM), reason: "tls.crt: block 1 has PEM headers"},
		{name: "an empty tls.key", data: tls(good.CertPEM, nil, good.CertPEM), reason: "tls.key: missing"},
		{name: "an empty tls.crt", data: tls(nil, good.KeyPEM, good.CertPEM), reason: "tls.crt: missing"},
		{name: "oversized data", data: tls(huge, good.KeyPEM, good.CertPEM), reason: "more than the limit"},
		{name: "an ECDSA root with an RSA key", data: tls(good.CertPEM, rsaRoot.KeyPEM, good.CertPEM), reason: "tls.key: private key is RSA but the certificate's public key is ECDSA"},
		{name: "an RSA root with an Ed25519 key", data: tls(rsaRoot.CertPEM, edRoot.KeyPEM, rsaRoot.CertPEM), reason: "tls.key: private key is Ed25519 but the certificate's public key is RSA"},
		{name: "an Ed25519 root with the key of another Ed25519 root", data: tls(edRoot.CertPEM, certs.MustNew(t, "ed-2", now.Add(-time.Hour), now.Add(time.Hour), certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil).KeyPEM, edRoot.CertPEM), reason: "tls.key: Ed25519 private key does not match the certificate"},
		{name: "a certificate in tls.key", data: tls(good.CertPEM, good.CertPEM, good.CertPEM), reason: "tls.key: is a CERTIFICATE"},
		{name: "a private key before the root in tls.crt", data: tls(append(bytes.Clone(good.KeyPEM), good.CertPEM...), good.KeyPEM, good.CertPEM), reason: "tls.crt: block 1 is"},
		{name: "garbage in tls.key", data: tls(good.CertPEM, []byte("not a key"), good.CertPEM), reason: "tls.key: has data before the first PEM block"},
		{name: "1 MiB of binary junk in tls.key", data: tls(good.CertPEM, megabyte, good.CertPEM), reason: "tls.key: is 1032192 bytes, more than the limit"},
		{name: "two keys in tls.key", data: tls(good.CertPEM, append(bytes.Clone(good.KeyPEM), good.KeyPEM...), good.CertPEM), reason: "tls.key: has 2 PEM blocks, expected a single private key"},
		{name: "a CERTIFICATE block that is no certificate", data: tls(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}), good.KeyPEM, good.CertPEM), reason: "tls.crt: block 1 is not a valid x509 certificate"},
		{name: "a missing Secret", delete: true, reason: "not found"},
		// After the missing one: replacing the type means deleting the Secret,
		// which would already say "not found" in passing.
		{name: "a Secret of the wrong type", typ: "example.com/not-tls", data: tls(good.CertPEM, good.KeyPEM, good.CertPEM), reason: "root secret has type"},
		{name: "an Opaque Secret", typ: corev1.SecretTypeOpaque, data: tls(good.CertPEM, good.KeyPEM, good.CertPEM), reason: `root secret has type "Opaque"`},
	}
}

func TestABadRootNeverReachesTheGateway(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	d, r1 := s.startOnFirstRoot(s.options().Syncer())
	before := s.gatewaySecret()
	writesBefore := d.writes()

	cases := badRoots(t, r1)
	seen, err := s.events()
	s.g.Expect(err).NotTo(HaveOccurred())
	for _, bad := range cases {
		switch {
		case bad.delete:
			s.deleteRoot()
		default:
			typ := bad.typ
			if typ == "" {
				typ = corev1.SecretTypeTLS
			}
			s.putRootData(typ, bad.data)
		}
		// The reason reaches the operator as a new Warning event...
		s.g.Eventually(s.events).Should(ContainElement(And(
			HavePrefix(bundle.ReasonRootInvalid+": "),
			ContainSubstring(bad.reason),
			Not(BeElementOf(seen)))), bad.name)
		seen, _ = s.events()
		// ...and in the log (JSON), as the error of the reconcile.
		quoted, _ := json.Marshal(bad.reason)
		s.g.Eventually(d.Log).Should(ContainSubstring(string(quoted[1:len(quoted)-1])), bad.name)
		// ...and the gateway is exactly as it was: not one write.
		after := s.gatewaySecret()
		s.g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), bad.name)
		s.g.Expect(after.Data).To(Equal(before.Data), bad.name)
	}
	// No event quotes key or certificate material.
	for _, e := range seen {
		s.g.Expect(e).NotTo(ContainSubstring("BEGIN"))
		s.g.Expect(e).NotTo(ContainSubstring(strings.Split(string(r1.KeyPEM), "\n")[1]))
	}
	// Not one request that writes a Secret, over all of them.
	s.g.Expect(d.writes()).To(Equal(writesBefore))
	t.Logf("%d bad roots rejected, each with its own event; gateway untouched, 0 writes", len(cases))
	s.g.Expect(len(cases)).To(BeNumerically(">=", 20))

	// Fixed by a new valid root: the gateway recovers by itself.
	s.putRoot(s.newRoot("root-2"))
	s.g.Eventually(s.view).Should(HaveField("Roots", []string{"root-2", "root-1"}))
}
