package bundle_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// fuzzSeeds generates the certificates of the seed corpus at run time (no
// key material is checked in), with lifetimes around testNow so that the
// validity checks pass for the valid seeds.
func fuzzSeeds(f *testing.F) (ec, rsa, ed, leaf *certs.CA) {
	f.Helper()
	mk := func(cn string, opts certs.Options, parent *certs.CA) *certs.CA {
		c, err := certs.New(cn, testNow.Add(-time.Hour), testNow.Add(time.Hour), opts, parent)
		if err != nil {
			f.Fatal(err)
		}
		return c
	}
	ec = mk("ecdsa root", certs.Options{IsCA: true}, nil)
	rsa = mk("rsa root", certs.Options{IsCA: true, KeyType: certs.KeyRSA, KeyEncoding: certs.EncodingPKCS8}, nil)
	ed = mk("ed25519 root", certs.Options{IsCA: true, KeyType: certs.KeyEd25519}, nil)
	leaf = mk("leaf.example.com", certs.Options{KeyType: certs.KeyEd25519}, ec)
	return ec, rsa, ed, leaf
}

// truncations returns data cut at a few interesting places.
func truncations(data []byte) [][]byte {
	n := len(data)
	return [][]byte{data[:n/3], data[:n/2], data[:n-1], data[:n-10], data[1:]}
}

func FuzzParseCertificates(f *testing.F) {
	// The seeds are small on purpose: the fuzzer minimizes every new
	// interesting input, which costs time quadratic in its length, so large
	// seeds (an RSA bundle is kilobytes) stall the search for minutes. For
	// the same reason there is no seed over MaxPEMBytes: the size check is
	// the first thing decodePEM does, and pem_test.go and root_test.go pin
	// it down at the limit.
	ec, rsa, ed, _ := fuzzSeeds(f)
	for _, seed := range [][]byte{
		ec.CertPEM,
		ed.CertPEM,
		rsa.CertPEM,
		certs.Bundle(ed, ed),
		[]byte("\r\n" + strings.ReplaceAll(string(ed.CertPEM), "\n", "\r\n") + "\n\t "),
		append(bytes.Clone(ed.CertPEM), ed.KeyPEM...),
		append(bytes.Clone(ed.CertPEM), "junk"...),
		[]byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n"),
		[]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"),
		[]byte("-----BEGIN CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\n"),
		[]byte("-----BEGIN \n-----END \n"),
		[]byte("junk"),
		{},
	} {
		f.Add(seed)
	}
	for _, seed := range truncations(ec.CertPEM) {
		f.Add(seed)
	}
	// A key before the certificate; the malformed forms that need no key
	// material are the files in testdata/fuzz/FuzzParseCertificates.
	f.Add(append(bytes.Clone(ed.KeyPEM), ed.CertPEM...))

	f.Fuzz(func(t *testing.T, data []byte) {
		input := bytes.Clone(data)
		got, err := bundle.ParseCertificates("ca.crt", data)
		if !bytes.Equal(input, data) {
			t.Fatal("ParseCertificates modified its input")
		}
		// ParseBundle is ParseCertificates plus CheckCA of every block.
		inBundle, bundleErr := bundle.ParseBundle("ca.crt", data, testNow)
		if err != nil {
			checkFuzzError(t, err, "ca.crt")
			checkNoEcho(t, err, data)
			if got != nil {
				t.Fatal("certificates returned together with an error")
			}
			if bundleErr == nil || bundleErr.Error() != err.Error() {
				t.Fatalf("ParseBundle says %v where ParseCertificates says %v", bundleErr, err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("success without certificates")
		}
		// Strict means nothing was skipped: every block of the input is one
		// of the certificates returned, so no private key or other block can
		// ride along into what is republished.
		checkOnlyCertificates(t, data, len(got))
		allCAs := !slices.ContainsFunc(got, func(c *x509.Certificate) bool { return bundle.CheckCA("ca.crt", c, testNow) != nil })
		if allCAs != (bundleErr == nil) {
			t.Fatalf("ParseBundle error %v, but every certificate a valid CA: %v", bundleErr, allCAs)
		}
		if bundleErr != nil {
			checkFuzzError(t, bundleErr, "ca.crt")
			checkNoEcho(t, bundleErr, data)
		} else if !slices.Equal(fingerprints(inBundle), fingerprints(got)) {
			t.Fatal("ParseBundle returned other certificates than ParseCertificates")
		}
		// What we accept we can publish, and what we publish reads back as
		// the same certificates.
		again, err := bundle.ParseCertificates("ca.crt", bundle.Encode(got))
		if err != nil {
			t.Fatalf("the encoding of accepted certificates does not parse: %v", err)
		}
		if !slices.Equal(fingerprints(got), fingerprints(again)) {
			t.Fatal("round trip changed the certificates")
		}
		if !bytes.Equal(bundle.Encode(again), bundle.Encode(got)) {
			t.Fatal("the encoding is not canonical: encoding what it parsed changed it")
		}
		// Normalize must not panic on anything we parsed and must keep a
		// subset of it.
		for _, c := range bundle.Normalize(got, testNow) {
			if !bundle.Contains(got, c) {
				t.Fatal("Normalize invented a certificate")
			}
		}
	})
}

func FuzzValidateRoot(f *testing.F) {
	ec, rsa, ed, leaf := fuzzSeeds(f)
	f.Add(ec.CertPEM, ec.KeyPEM, ec.CertPEM)
	f.Add(ed.CertPEM, ed.KeyPEM, []byte{})
	f.Add(rsa.CertPEM, rsa.KeyPEM, ed.CertPEM)
	f.Add(leaf.CertPEM, leaf.KeyPEM, ec.CertPEM)
	f.Add(ec.CertPEM, ed.KeyPEM, ec.KeyPEM)
	f.Add(ed.CertPEM, append(bytes.Clone(ed.KeyPEM), ed.KeyPEM...), []byte("junk"))
	for _, k := range truncations(ec.KeyPEM) {
		f.Add(ed.CertPEM, k, []byte{})
	}
	for _, c := range truncations(ed.CertPEM) {
		f.Add(c, ed.KeyPEM, c)
	}
	f.Add([]byte{}, []byte{}, []byte{})
	// Malformed tls.key and ca.crt next to a valid root, so that the fuzzer
	// starts from inputs that get past tls.crt.
	for _, k := range []string{
		"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
		"-----BEGIN EC PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00000000000000000000000000000000\n\nAAAA\n-----END EC PRIVATE KEY-----\n",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----\n",
		"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
		"-----BEGIN PRIVATE KEY-----\n\x00\xff\x30\x82\n-----END PRIVATE KEY-----\n",
	} {
		f.Add(ec.CertPEM, []byte(k), []byte{})
	}
	f.Add(ec.CertPEM, ec.KeyPEM, append(bytes.Clone(ec.CertPEM), ec.KeyPEM...)) // the key in ca.crt
	f.Add(ec.CertPEM, ec.KeyPEM, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add(append(bytes.Clone(ec.CertPEM), ec.KeyPEM...), ec.KeyPEM, []byte{}) // the key in tls.crt

	f.Fuzz(func(t *testing.T, certPEM, keyPEM, caPEM []byte) {
		inputs := [][]byte{bytes.Clone(certPEM), bytes.Clone(keyPEM), bytes.Clone(caPEM)}
		root, err := bundle.ValidateRoot(certPEM, keyPEM, caPEM, testNow)
		if !slices.EqualFunc(inputs, [][]byte{certPEM, keyPEM, caPEM}, bytes.Equal) {
			t.Fatal("ValidateRoot modified its input")
		}
		if err != nil {
			checkFuzzError(t, err, "tls.crt", "tls.key", "ca.crt")
			// Above all, nothing of tls.key is quoted.
			checkNoEcho(t, err, certPEM, keyPEM, caPEM)
			if root != nil {
				t.Fatal("root returned together with an error")
			}
			return
		}
		if root.Cert == nil || root.Fingerprint != bundle.Fingerprint(root.Cert) {
			t.Fatal("root without certificate or with a wrong fingerprint")
		}
		if !bytes.Equal(root.CertPEM, certPEM) || !bytes.Equal(root.KeyPEM, keyPEM) || !bytes.Equal(root.CAPEM, caPEM) {
			t.Fatal("root does not hold its input exactly")
		}
		// The root keeps copies: the caller's buffers are reused.
		for _, b := range [][]byte{certPEM, keyPEM, caPEM} {
			if len(b) > 0 {
				b[0] ^= 0xff
			}
		}
		if !bytes.Equal(root.CertPEM, inputs[0]) || !bytes.Equal(root.KeyPEM, inputs[1]) || !bytes.Equal(root.CAPEM, inputs[2]) {
			t.Fatal("root shares memory with its input")
		}
		certPEM, keyPEM, caPEM = inputs[0], inputs[1], inputs[2]

		// A CA, checked here by hand rather than through CheckCA, which
		// shares its code with ValidateRoot.
		c := root.Cert
		if !c.BasicConstraintsValid || !c.IsCA || c.KeyUsage != 0 && c.KeyUsage&x509.KeyUsageCertSign == 0 ||
			testNow.After(c.NotAfter) || testNow.Before(c.NotBefore.Add(-bundle.ClockSkew)) {
			t.Fatalf("accepted a root that is not a usable CA at %s: CA %v/%v, key usage %b, valid %s to %s",
				testNow, c.BasicConstraintsValid, c.IsCA, c.KeyUsage, c.NotBefore, c.NotAfter)
		}
		// The key matches by crypto/tls, which does not share our parser.
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatalf("accepted a pair that crypto/tls rejects: %v", err)
		}
		if !bytes.Equal(pair.Certificate[0], c.Raw) {
			t.Fatal("the root is not the first certificate of tls.crt")
		}
		if !bundle.KeyMatches(certPEM, keyPEM) {
			t.Fatal("accepted root's key does not match by KeyMatches")
		}
		// tls.key is a single block; tls.crt and ca.crt hold certificates
		// and nothing else (no key can travel in ca.crt to the clients).
		if n := bytes.Count(keyPEM, []byte("-----BEGIN ")); n != 1 {
			t.Fatalf("accepted a tls.key with %d PEM blocks", n)
		}
		inCert, err := bundle.ParseCertificates("tls.crt", certPEM)
		if err != nil {
			t.Fatalf("tls.crt accepted by ValidateRoot but not by ParseCertificates: %v", err)
		}
		checkOnlyCertificates(t, certPEM, len(inCert))
		if len(root.CA) > 0 {
			checkOnlyCertificates(t, caPEM, len(root.CA))
		} else if len(bytes.Trim(caPEM, " \t\r\n")) > 0 {
			t.Fatal("ca.crt not blank, yet no certificates read from it")
		}
		if !bundle.ChainsTo(root.Cert, root.Cert) {
			t.Fatal("root does not chain to itself")
		}
	})
}

// checkOnlyCertificates checks that data, which was accepted with n
// certificates, has exactly n PEM blocks and that all of them are
// certificates.
func checkOnlyCertificates(t *testing.T, data []byte, n int) {
	t.Helper()
	if blocks, certs := bytes.Count(data, []byte("-----BEGIN ")), bytes.Count(data, []byte("-----BEGIN CERTIFICATE-----")); blocks != n || certs != n {
		t.Fatalf("accepted %d certificates from input with %d PEM blocks, %d of them certificates", n, blocks, certs)
	}
}

// base64Run is what key material looks like in a message: a long run of
// base64. Block types, the one thing echoed from the input, are at most 32
// characters.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/]{33,}`)

// checkNoEcho checks that the message of err quotes nothing from the
// contents of the PEM inputs: no 16 characters of any base64 body line.
func checkNoEcho(t *testing.T, err error, inputs ...[]byte) {
	t.Helper()
	msg := err.Error()
	if base64Run.MatchString(msg) {
		t.Fatalf("error %q holds a run of base64", msg)
	}
	var bodies [][]byte
	for _, in := range inputs {
		for line := range bytes.Lines(in) {
			if !bytes.Contains(line, []byte("-----")) {
				bodies = append(bodies, line)
			}
		}
	}
	body := bytes.Join(bodies, nil)
	const window = 16
	for i := 0; i+window <= len(msg); i++ {
		w := msg[i : i+window]
		if strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") == "" && bytes.Contains(body, []byte(w)) {
			t.Fatalf("error %q quotes %q from the input", msg, w)
		}
	}
}

// checkFuzzError checks that err is an *InvalidError for one of fields whose
// message does not echo the input.
func checkFuzzError(t *testing.T, err error, fields ...string) {
	t.Helper()
	var ie *bundle.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("error %v is not an *InvalidError", err)
	}
	if !slices.Contains(fields, ie.Field) {
		t.Fatalf("error names field %q", ie.Field)
	}
	if ie.Reason == "" || len(ie.Reason) > 160 || strings.Contains(ie.Reason, "-----") {
		t.Fatalf("unfit reason %q", ie.Reason)
	}
}

// FuzzPlan feeds Plan the gateway Secret as anyone allowed to edit it might
// leave it: tls.crt, tls.key and ca.crt with blocks added, dropped, swapped,
// truncated or mixed with junk (read by the lenient certsIn and readServer),
// and annotations with any value (read by ParseState), with clients and a
// time drawn from world and minutes, and clients whose credential dualca
// cannot see drawn from hidden. Whatever it finds, the decision must be
// consistent (expectConsistent: the bundle holds the server root and the
// current root, the pair matches, both populations verify the server), must
// be a fixed point (deciding again on what it wrote changes nothing), and an
// edited ca.crt must not gain a CA dualca did not record. With an unknown
// client selected, no root of a ca.crt nobody edited leaves it unexpired,
// the unknown client is never counted renewed, and it is due whenever any
// client is.
//
// Certificates and keys are generated at run time, so the inputs name them
// by token instead of holding their bytes: "{r1}" is root-1's certificate
// PEM, "{r1.key}" its key, "{fp:r1}" its fingerprint, "{hash}" the Hash of
// ca.crt as expanded (see planFuzzWorld). The corpus in testdata then holds
// no key material and replays against fresh keys.
func FuzzPlan(f *testing.F) {
	w := newPlanFuzzWorld(f)
	for _, s := range w.seeds {
		f.Add(s.certPEM, s.keyPEM, s.caPEM, s.annotations, s.world, s.minutes, s.hidden)
	}

	f.Fuzz(func(t *testing.T, certPEM, keyPEM, caPEM []byte, annotations string, world uint8, minutes int16, hidden uint8) {
		gw, root, clients, now, ok := w.expand(certPEM, keyPEM, caPEM, annotations, world, minutes)
		clients = w.hide(clients, hidden)
		if !ok {
			return // the syncer decides only with a root valid now
		}
		// With a profile: whatever leaf the Secret held, one on the
		// current root leaves the decision matching it.
		timings := withProfile(testProfile)
		d := bundle.Plan(gw, root, clients, timings, now)

		expectConsistent(t, d, root, now)
		expectProfile(t, d, root, now)
		for _, e := range d.Events {
			if base64Run.MatchString(e.Message) {
				t.Fatalf("event message %q holds a run of base64", e.Message)
			}
		}
		again := bundle.Plan(gw, root, clients, timings, now)
		if !sameDecision(d, again) {
			t.Fatalf("the decision is not deterministic: %v then %v", d.State.Annotations(), again.State.Annotations())
		}

		// An edited ca.crt keeps only roots dualca recorded (and the current
		// and server roots), whatever else it holds.
		if gw.Exists && gw.State.Strategy == bundle.StrategyZeroDowntime && bundle.Hash(gw.CAPEM) != gw.State.BundleHash {
			for _, fp := range d.State.BundleRoots {
				if fp != root.Fingerprint && fp != gw.State.Server && !slices.Contains(gw.State.BundleRoots, fp) {
					t.Fatalf("an edited ca.crt gained root %s, which dualca never recorded", w.name(fp))
				}
			}
		}

		// Whatever the Secret held, dualca trusts and signs for only roots
		// it read from the root Secret (Gateway.Known and the current root).
		expectProvenance(t, gw, d, root)

		expectUnknownFailSafe(t, w, gw, d, root, clients, now)

		// What was written is a fixed point: deciding again on it at the
		// same moment writes nothing and says nothing.
		next := bundle.Plan(written(d), root, clients, timings, now)
		if !bytes.Equal(next.CertPEM, d.CertPEM) || !bytes.Equal(next.KeyPEM, d.KeyPEM) || !bytes.Equal(next.CAPEM, d.CAPEM) {
			t.Fatalf("deciding again on what was written changes the data: tls.crt %v then %v, ca.crt %v then %v",
				credentialShape(d.CertPEM), credentialShape(next.CertPEM), w.names(d.CAPEM), w.names(next.CAPEM))
		}
		if a, b := d.State.Annotations(), next.State.Annotations(); !maps.Equal(a, b) {
			t.Fatalf("deciding again on what was written changes the annotations: %v then %v", a, b)
		}
		if len(next.Events) > 0 {
			t.Fatalf("deciding again on what was written emits events: %v", next.Events)
		}
	})
}

// expectProfile checks the server leaf of a decision: valid now, and when
// it is on the current root (whose key dualca holds), matching the profile
// and short of its re-issue margin unless it ends with its root.
func expectProfile(t *testing.T, d bundle.Decision, root *bundle.Root, now time.Time) {
	t.Helper()
	if d.Leaf == nil || d.Leaf.IsCA || d.State.Server != root.Fingerprint {
		return
	}
	if why := testProfile.Mismatch(d.Leaf, root.Cert); why != "" {
		t.Fatalf("the leaf on the current root does not match the profile: %s", why)
	}
	if now.Before(d.Leaf.NotBefore) || now.After(d.Leaf.NotAfter) {
		t.Fatalf("the leaf on the current root is not valid now (%s): %s to %s", now, d.Leaf.NotBefore, d.Leaf.NotAfter)
	}
	if d.Leaf.NotAfter.Before(root.Cert.NotAfter) && !now.Before(d.Leaf.NotAfter.Add(-testProfile.ReissueMargin())) {
		t.Fatalf("the leaf on the current root is within its re-issue margin: it expires at %s", d.Leaf.NotAfter)
	}
}

// expectUnknownFailSafe checks a decision made with unknown clients
// selected: they may use any root, so every root of a ca.crt nobody edited
// (dualca's own, or one adopted) that dualca read from the root Secret stays
// until it expires; they are on no root, so never counted renewed, and due
// whenever any client is.
func expectUnknownFailSafe(t *testing.T, w *planFuzzWorld, gw bundle.Gateway, d bundle.Decision, root *bundle.Root, clients bundle.Clients, now time.Time) {
	t.Helper()
	var unknown []string
	for _, c := range clients.Items {
		if c.Unknown {
			unknown = append(unknown, c.Name)
		}
	}
	if !clients.Tracked || len(unknown) == 0 {
		return
	}
	if d.State.Clients == nil || d.State.Clients.Renewed > len(clients.Items)-len(unknown) {
		t.Fatalf("%d of %d clients unknown, yet progress %+v", len(unknown), len(clients.Items), d.State.Clients)
	}
	for _, name := range unknown {
		if len(d.Renew) > 0 && !slices.Contains(d.Renew, name) {
			t.Fatalf("unknown client %s is not due while %v are", name, d.Renew)
		}
	}
	edited := gw.State.Strategy == bundle.StrategyZeroDowntime && bundle.Hash(gw.CAPEM) != gw.State.BundleHash
	if !gw.Exists || edited {
		return
	}
	known := append(slices.Clone(gw.Known), root.Cert)
	kept := certsOf(d.CAPEM)
	for _, r := range certsOf(gw.CAPEM) {
		if r.BasicConstraintsValid && r.IsCA && bundle.Contains(known, r) && !now.After(r.NotAfter) && !bundle.Contains(kept, r) {
			t.Fatalf("root %s left ca.crt unexpired while clients %v were unknown: %v", w.name(bundle.Fingerprint(r)), unknown, w.names(d.CAPEM))
		}
	}
}

// expectProvenance checks the trust invariant of a decision made on gw:
// every root of ca.crt and every CA certificate of tls.crt (by its key) is
// one dualca read from the root Secret, every certificate of tls.crt is
// signed by one, and the roots remembered as read grow only by the current
// root.
func expectProvenance(t *testing.T, gw bundle.Gateway, d bundle.Decision, root *bundle.Root) {
	t.Helper()
	known := append(slices.Clone(gw.Known), root.Cert)
	keyRead := func(c *x509.Certificate) bool {
		return slices.ContainsFunc(known, func(k *x509.Certificate) bool {
			return bytes.Equal(k.RawSubjectPublicKeyInfo, c.RawSubjectPublicKeyInfo)
		})
	}
	for _, r := range certsOf(d.CAPEM) {
		if !bundle.Contains(known, r) {
			t.Fatalf("ca.crt holds %q, which dualca never read from the root Secret", r.Subject.CommonName)
		}
	}
	for i, c := range certsOf(d.CertPEM) {
		if c.IsCA && !keyRead(c) {
			t.Fatalf("tls.crt certificate %d is a CA for %q's key, which dualca never read from the root Secret", i, c.Subject.CommonName)
		}
		if !slices.ContainsFunc(known, func(k *x509.Certificate) bool { return c.CheckSignatureFrom(k) == nil }) {
			t.Fatalf("tls.crt certificate %d (%q) is signed by no root dualca read from the root Secret", i, c.Subject.CommonName)
		}
	}
	for _, k := range d.Known {
		if !bundle.Contains(known, k) {
			t.Fatalf("%q is remembered as read from the root Secret, but was not", k.Subject.CommonName)
		}
	}
}

// certsOf parses every certificate of a decision's PEM (dualca writes
// only well-formed PEM).
func certsOf(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for len(data) > 0 {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			break
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// planFuzzWorld is the world of FuzzPlan: a rotation from root-1 to root-2
// as dualca lived it, a foreign CA, two clients and the tokens that stand for
// their PEM and fingerprints in the fuzz inputs.
type planFuzzWorld struct {
	r1, r2     *certs.CA
	roots      map[bool]*bundle.Root // by "the current root is root-1"
	onR1, onR2 *bundle.ClientLeaf    // client leaves, issued by root-1 and root-2, verified as read
	// failedOnR1 is onR1 as read against no ca.crt: with its signature
	// still to check, against each root asked about.
	failedOnR1   *bundle.ClientLeaf
	tokens       []planFuzzToken
	fingerprints map[string]string // fingerprint to token name, for messages
	seeds        []planFuzzSeed
}

type planFuzzToken struct {
	name  string // without braces: "r1", "r1.key"
	value []byte
	cert  *x509.Certificate // nil for a key
}

type planFuzzSeed struct {
	certPEM, keyPEM, caPEM []byte
	annotations            string
	world                  uint8
	minutes                int16
	hidden                 uint8
}

// The bits of FuzzPlan's world argument.
const (
	planExists  = 1 << 0 // the gateway Secret exists
	planTracked = 1 << 1 // clients are tracked
	// bits 2-3: client a: absent, on root-1, on root-2, failed on root-1
	// bits 4-5: client b: absent, on root-1, on root-2, its Secret missing
	planRootIsR1 = 1 << 6 // root-1 is the current root, not root-2
	// dualca's record is lost: it knows only the current root as read from
	// the root Secret; else root-1 and root-2 (never the foreign CA).
	planNoRecord = 1 << 7
)

// The bits of FuzzPlan's hidden argument: which clients dualca cannot see
// (bundle.Client.Unknown: the CertificateRequest of their revision is gone
// and dualca has no memory of it), and whether their view still carries a
// stale leaf and ca.crt, which the decisions must not believe.
const (
	planHideA     = 1 << 0
	planHideB     = 1 << 1
	planHideStale = 1 << 2
)

// planFuzzMinutes maps FuzzPlan's minutes argument to the minutes from testNow
// it stands for: itself from -60 to 1200, root-2's lifetime, and the rest
// folded into that range, so that most inputs are moments the syncer would
// decide at.
func planFuzzMinutes(m int16) int { return ((int(m)+60)%1261+1261)%1261 - 60 }

func newPlanFuzzWorld(f *testing.F) *planFuzzWorld {
	f.Helper()
	ca := func(cn string, notBefore, notAfter time.Duration) *certs.CA {
		return certs.MustNew(f, cn, testNow.Add(notBefore), testNow.Add(notAfter), certs.Options{IsCA: true}, nil)
	}
	w := &planFuzzWorld{r1: ca("root-1", -2*time.Hour, 10*time.Hour), r2: ca("root-2", -time.Hour, 20*time.Hour)}
	foreign := ca("foreign", -3*time.Hour, 30*time.Hour)
	w.roots = map[bool]*bundle.Root{true: validRoot(f, w.r1, testNow), false: validRoot(f, w.r2, testNow)}
	leaf := func(issuer *certs.CA) *x509.Certificate {
		return certs.MustNew(f, "ns/client", testNow.Add(-time.Hour), testNow.Add(2*time.Hour), certs.Options{}, issuer).Cert
	}
	onR1 := leaf(w.r1)
	w.onR1, w.onR2 = bundle.NewClientLeaf(onR1, []*x509.Certificate{w.r1.Cert}), bundle.NewClientLeaf(leaf(w.r2), []*x509.Certificate{w.r2.Cert})
	w.failedOnR1 = bundle.NewClientLeaf(onR1, nil)

	// The rotation, step by step, as the syncer would write it.
	const (
		allOnR1 = planExists | planTracked | 1<<2 | 1<<4
		allOnR2 = planExists | planTracked | 2<<2 | 2<<4
		mixed   = planExists | planTracked | 1<<2 | 2<<4
	)
	steps := []struct {
		world   uint8
		minutes int16 // from testNow
	}{
		{allOnR1 | planRootIsR1, -55}, // adopts the legacy copy of root-1
		{allOnR1, -50},                // root-2 arrives: Bundle
		{mixed, -45},                  // Renewing
		{allOnR2, -44},                // every client on root-2
		{allOnR2, -42},                // the server switches: Retiring
		{allOnR2, -40},                // root-1 retired: Steady
	}
	gw := legacyCopy(f, w.r1)
	history := []bundle.Gateway{gw}
	for _, s := range steps {
		_, root, clients, now, _ := w.expand(nil, nil, nil, "", s.world, s.minutes)
		gw = written(bundle.Plan(gw, root, clients, testTimings, now))
		history = append(history, gw)
	}

	// Tokens for every certificate and key that appeared, longest first
	// does not matter: each is a whole PEM block.
	add := func(name string, value []byte, cert *x509.Certificate) {
		for _, tk := range w.tokens {
			if bytes.Equal(tk.value, value) {
				return
			}
		}
		w.tokens = append(w.tokens, planFuzzToken{name, value, cert})
	}
	for _, c := range []struct {
		name string
		ca   *certs.CA
	}{{"r1", w.r1}, {"r2", w.r2}, {"foreign", foreign}} {
		add(c.name, c.ca.CertPEM, c.ca.Cert)
		add(c.name+".key", c.ca.KeyPEM, nil)
	}
	for _, h := range history {
		for i, c := range parsed(f, h.CertPEM) {
			if !c.IsCA {
				add(fmt.Sprintf("leaf%d", len(w.tokens)), pemOf(c), c)
				add(fmt.Sprintf("leaf%d.key", len(w.tokens)-1), h.KeyPEM, nil)
			} else if i > 0 {
				add(fmt.Sprintf("cross%d", len(w.tokens)), pemOf(c), c)
			}
		}
	}
	w.fingerprints = map[string]string{}
	for _, tk := range w.tokens {
		if tk.cert != nil {
			w.fingerprints[bundle.Fingerprint(tk.cert)] = tk.name
		}
	}

	// Seeds: each step of the history at the moment of the next one and
	// past the grace period, then hand edits of the Secret in mid-rotation.
	for i, h := range history {
		world, at := uint8(allOnR2), int16(-38)
		if i < len(steps) {
			world, at = steps[i].world, steps[i].minutes
		}
		w.seeds = append(w.seeds, w.seed(h, world, at), w.seed(h, world, 10))
	}
	// A client unknown where a root would be retired (the propagation delay
	// after the switch over), once retired, in mid-rotation and past the
	// grace period, with and without a stale view.
	for _, s := range []planFuzzSeed{
		w.seed(history[5], allOnR2, -40), w.seed(history[5], allOnR2, -38), w.seed(history[6], allOnR2, -38),
		w.seed(history[3], mixed, -44), w.seed(history[3], mixed, 10),
	} {
		for _, hidden := range []uint8{planHideA, planHideB | planHideStale, planHideA | planHideB} {
			s.hidden = hidden
			w.seeds = append(w.seeds, s)
		}
	}
	mid := w.seed(history[2], mixed, -30)
	edit := func(e func(s *planFuzzSeed)) {
		s := mid
		s.certPEM, s.keyPEM, s.caPEM = bytes.Clone(s.certPEM), bytes.Clone(s.keyPEM), bytes.Clone(s.caPEM)
		e(&s)
		w.seeds = append(w.seeds, s)
	}
	// By hand, so the recorded hash no longer matches; "{hash}" would make
	// the edit look like dualca's own.
	byHand := func(s *planFuzzSeed) {
		s.annotations = strings.ReplaceAll(s.annotations, "{hash}", bundle.Hash([]byte("by hand")))
	}
	edit(func(s *planFuzzSeed) { s.caPEM = append(s.caPEM, "{foreign}"...); byHand(s) })
	edit(func(s *planFuzzSeed) { s.caPEM = []byte("{foreign}"); byHand(s) })
	edit(func(s *planFuzzSeed) { s.caPEM = []byte("{r1}"); byHand(s) })
	edit(func(s *planFuzzSeed) { s.caPEM = append([]byte("junk\n{r1.key}"), s.caPEM...) })
	edit(func(s *planFuzzSeed) { s.certPEM, s.keyPEM = []byte("{foreign}"), []byte("{foreign.key}") })
	edit(func(s *planFuzzSeed) { s.certPEM, s.keyPEM = []byte("{r2}"), []byte("{r2.key}") })
	edit(func(s *planFuzzSeed) {
		s.certPEM = []byte("-----BEGIN CERTIFICATE-----\nProc-Type: 4,ENCRYPTED\n\nAAAA\n-----END CERTIFICATE-----\n" + string(s.certPEM))
	})
	edit(func(s *planFuzzSeed) { s.certPEM = s.certPEM[:len(s.certPEM)/2] })
	edit(func(s *planFuzzSeed) { s.keyPEM = []byte("{r1.key}") })
	edit(func(s *planFuzzSeed) { s.annotations = "strategy=zero-downtime" })
	edit(func(s *planFuzzSeed) { s.annotations = "" })
	edit(func(s *planFuzzSeed) {
		byHand(s)
		s.annotations = strings.ReplaceAll(s.annotations, "phase=Bundle", "phase=Nope")
	})
	edit(func(s *planFuzzSeed) {
		s.annotations += "\nroot-added-at=2026-01-02T02:30:00.999Z\nclients=renewed=-1 pending=x failed=2\nbundle-roots=,{fp:foreign},,"
	})
	edit(func(s *planFuzzSeed) {
		s.annotations += "\nserver-switched-at=9999-12-31T23:59:59Z\nserver-fingerprint={fp:foreign}"
	})
	edit(func(s *planFuzzSeed) { s.world &^= planTracked })
	edit(func(s *planFuzzSeed) { s.world &^= planExists })
	edit(func(s *planFuzzSeed) { s.world |= planRootIsR1 }) // a root Secret restored from a backup
	return w
}

// seed tokenizes a gateway Secret into FuzzPlan's arguments.
func (w *planFuzzWorld) seed(gw bundle.Gateway, world uint8, minutes int16) planFuzzSeed {
	tokenize := func(b []byte) []byte {
		for _, tk := range w.tokens {
			b = bytes.ReplaceAll(b, tk.value, []byte("{"+tk.name+"}"))
		}
		return b
	}
	a := gw.State.Annotations()
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		v := a[k]
		if k == bundle.AnnotationBundleHash && v == bundle.Hash(gw.CAPEM) {
			v = "{hash}"
		}
		for fp, name := range w.fingerprints {
			v = strings.ReplaceAll(v, fp, "{fp:"+name+"}")
		}
		lines = append(lines, strings.TrimPrefix(k, bundle.AnnotationPrefix)+"="+v)
	}
	return planFuzzSeed{tokenize(gw.CertPEM), tokenize(gw.KeyPEM), tokenize(gw.CAPEM), strings.Join(lines, "\n"), world, minutes, 0}
}

// hide marks the clients that hidden names Unknown, as the syncer does when
// it cannot see their credential: without leaf and ca.crt, unless the
// stale bit keeps what they showed before.
func (w *planFuzzWorld) hide(clients bundle.Clients, hidden uint8) bundle.Clients {
	items := slices.Clone(clients.Items)
	for i, c := range items {
		if c.Name == "ns/a" && hidden&planHideA != 0 || c.Name == "ns/b" && hidden&planHideB != 0 {
			if hidden&planHideStale == 0 {
				c.Leaf, c.CA = nil, nil
			}
			c.Unknown = true
			items[i] = c
		}
	}
	clients.Items = items
	return clients
}

// expand turns FuzzPlan's arguments into Plan's. ok is false when the
// current root is not valid at now: the syncer does not decide then.
func (w *planFuzzWorld) expand(certPEM, keyPEM, caPEM []byte, annotations string, world uint8, minutes int16) (gw bundle.Gateway, root *bundle.Root, clients bundle.Clients, now time.Time, ok bool) {
	data := func(b []byte) []byte {
		if !bytes.Contains(b, []byte("{")) {
			return b
		}
		for _, tk := range w.tokens {
			b = bytes.ReplaceAll(b, []byte("{"+tk.name+"}"), tk.value)
		}
		return b
	}
	gw = bundle.Gateway{Exists: world&planExists != 0, CertPEM: data(certPEM), KeyPEM: data(keyPEM), CAPEM: data(caPEM)}
	fps := []string{"{hash}", bundle.Hash(gw.CAPEM)}
	for _, tk := range w.tokens {
		if tk.cert != nil {
			fps = append(fps, "{fp:"+tk.name+"}", bundle.Fingerprint(tk.cert))
		}
	}
	annotations = strings.NewReplacer(fps...).Replace(annotations)
	a := map[string]string{}
	for line := range strings.Lines(annotations) {
		if k, v, found := strings.Cut(strings.TrimSuffix(line, "\n"), "="); found {
			a[bundle.AnnotationPrefix+k] = v
		}
	}
	gw.State = bundle.ParseState(a)

	clients.Tracked = world&planTracked != 0
	client := func(name string, state uint8, fourth bundle.Client) {
		switch state {
		case 1:
			clients.Items = append(clients.Items, bundle.Client{Name: name, Leaf: w.onR1, CA: []*x509.Certificate{w.r1.Cert}})
		case 2:
			clients.Items = append(clients.Items, bundle.Client{Name: name, Leaf: w.onR2, CA: []*x509.Certificate{w.r2.Cert}})
		case 3:
			fourth.Name = name
			clients.Items = append(clients.Items, fourth)
		}
	}
	if clients.Tracked {
		client("ns/a", world>>2&3, bundle.Client{Leaf: w.failedOnR1, CA: []*x509.Certificate{w.r1.Cert}, Failed: true})
		client("ns/b", world>>4&3, bundle.Client{})
	}
	root = w.roots[world&planRootIsR1 != 0]
	if world&planNoRecord == 0 {
		gw.Known = []*x509.Certificate{w.r1.Cert, w.r2.Cert}
	}
	now = testNow.Add(time.Duration(planFuzzMinutes(minutes)) * time.Minute)
	ok = !now.Before(root.Cert.NotBefore) && !now.After(root.Cert.NotAfter)
	return gw, root, clients, now, ok
}

// name is the token name of a fingerprint, for messages.
func (w *planFuzzWorld) name(fp string) string {
	if n, ok := w.fingerprints[fp]; ok {
		return n
	}
	return bundle.Short(fp)
}

// names are the token names of the certificates in PEM.
func (w *planFuzzWorld) names(data []byte) []string {
	var out []string
	for _, c := range certsOfPEM(data) {
		out = append(out, w.name(bundle.Fingerprint(c)))
	}
	return out
}

// FuzzClientLeaf: what dualca keeps of a client's leaf, read from any
// tls.crt against its ca.crt or alone, chains to exactly the roots the
// whole certificate does (roots of its name: the issuer, the issuer
// renewed with its key, another key, the same key not allowed to sign: no
// CA, no certificate signing, no basic constraints),
// remembered or not; a tls.crt that does not read keeps no leaf, and the
// problem reported is the one of the whole certificate.
func FuzzClientLeaf(f *testing.F) {
	root := certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true}, nil)
	roots := []*x509.Certificate{
		root.Cert,
		certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(2*time.Hour), certs.Options{IsCA: true, Key: root.Key}, nil).Cert,
		certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true}, nil).Cert,
		certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{Key: root.Key}, nil).Cert,
		certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true, NoCertSign: true, Key: root.Key}, nil).Cert,
		certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true, NoBasicConstraints: true, Key: root.Key}, nil).Cert,
	}
	other := certs.MustNew(f, "dualca root", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{IsCA: true}, nil)
	leaf := certs.MustNew(f, "agent", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{}, root)
	for _, seed := range [][]byte{
		leaf.CertPEM,
		certs.MustNew(f, "agent", testNow.Add(-time.Hour), testNow.Add(time.Hour), certs.Options{KeyType: certs.KeyEd25519}, other).CertPEM,
		certs.Bundle(leaf, root),
		root.CertPEM,
		[]byte("junk"),
		{},
	} {
		f.Add(seed)
	}
	for _, seed := range truncations(leaf.CertPEM) {
		f.Add(seed)
	}
	sigs := bundle.NewMemory()
	f.Fuzz(func(t *testing.T, tlsCrt []byte) {
		kept, problem := bundle.ParseClientLeaf(tlsCrt, []*x509.Certificate{root.Cert})
		read, readProblem := bundle.ReadClientLeaf(tlsCrt)
		whole, err := bundle.ParseCertificates("tls.crt", tlsCrt)
		if err != nil || whole[0].IsCA {
			if kept != nil || read != nil || problem == "" || problem != readProblem {
				t.Fatalf("a tls.crt that is no client certificate kept a leaf, or its problems differ: %q, %q", problem, readProblem)
			}
			return
		}
		if kept == nil || read == nil || readProblem != "" || !kept.Is(whole[0]) || !kept.NotAfter().Equal(whole[0].NotAfter) || read.Verified() {
			t.Fatalf("a client certificate not kept as itself (problem %q, read %q)", problem, readProblem)
		}
		if issued := bundle.ChainsTo(whole[0], root.Cert); (problem == "") != issued || kept.Verified() && !issued {
			t.Fatalf("issued by ca.crt: %t, problem %q, verified %t", issued, problem, kept.Verified())
		}
		sigs.Advance()
		for i, r := range roots {
			want := bundle.ChainsTo(whole[0], r)
			for _, l := range []*bundle.ClientLeaf{kept, read} {
				for _, s := range []*bundle.Memory{nil, sigs} {
					if got := s.LeafChainsTo(l, r); got != want {
						t.Fatalf("root %d: the leaf kept (verified %t, remembered %t) chains: %t, the certificate: %t", i, l.Verified(), s != nil, got, want)
					}
				}
			}
		}
	})
}
