package bundle

import (
	"crypto/x509"
	"fmt"
)

// ReasonClientInvalid is the event reason for a selected client whose
// Secret dualca cannot read: it counts as on no root until cert-manager
// writes it again.
const ReasonClientInvalid = "ClientInvalid"

// ParseClient reads a client Secret's tls.crt and ca.crt as cert-manager
// writes them: a leaf (and maybe its chain), and the root it trusts the
// server with. leaf is nil when tls.crt is unusable and ca nil when ca.crt
// is; problem says what is wrong, for an event, or is "" when nothing is.
// A client with a problem is never a reason to trust anything: the leaf
// and roots returned are only what parsed cleanly.
func ParseClient(tlsCrt, caCrt []byte) (leaf *x509.Certificate, ca []*x509.Certificate, problem string) {
	report := func(p string) {
		if problem == "" {
			problem = p
		}
	}
	if certs, err := ParseCertificates("tls.crt", tlsCrt); err != nil {
		report(err.Error())
	} else if certs[0].IsCA {
		report("tls.crt: holds a CA certificate, not a client certificate")
	} else {
		leaf = certs[0]
	}
	if certs, err := ParseCertificates("ca.crt", caCrt); err != nil {
		report(err.Error())
	} else {
		ca = certs
		for i, c := range certs {
			if !c.BasicConstraintsValid || !c.IsCA {
				report(fmt.Sprintf("ca.crt: block %d is not a CA certificate", i+1))
			}
		}
	}
	if leaf != nil && ca != nil && !signedByAny(leaf, ca) {
		report("tls.crt: not issued by any certificate of ca.crt")
	}
	return leaf, ca, problem
}

func signedByAny(leaf *x509.Certificate, cas []*x509.Certificate) bool {
	for _, c := range cas {
		if ChainsTo(leaf, c) {
			return true
		}
	}
	return false
}
