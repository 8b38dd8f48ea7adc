package bundle

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// TestAnExpiredLeafOnAnOlderRootIsAWarning: the alarm no history of Plan
// reaches (the switch rule moves the server before its leaf expires), so
// it is called here directly: an expired leaf whose key dualca cannot
// re-issue is a Warning, a valid one or the legacy form is not.
func TestAnExpiredLeafOnAnOlderRootIsAWarning(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "old root"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(der)
	for _, tc := range []struct {
		name  string
		s     *serverCredential
		warns bool
	}{
		{"expired", &serverCredential{root: root, leaf: &x509.Certificate{NotAfter: now.Add(-time.Second)}}, true},
		{"valid", &serverCredential{root: root, leaf: &x509.Certificate{NotAfter: now.Add(time.Second)}}, false},
		{"legacy form", &serverCredential{root: root, leaf: root, selfSigned: true}, false},
		{"none", &serverCredential{root: root}, false},
	} {
		p := &planning{now: now}
		p.warnExpiring(tc.s)
		if warned := len(p.events) == 1 && p.events[0].Warning && p.events[0].Reason == ReasonServerLeafExpiring; warned != tc.warns || len(p.events) > 1 {
			t.Errorf("%s: events %v, want a ServerLeafExpiring Warning: %v", tc.name, p.events, tc.warns)
		}
	}
}
