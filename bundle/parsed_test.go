package bundle_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// A Parsed only spares work: a decision made with one, cold or warm, is the
// decision made without.
func TestParsedDecidesTheSame(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		roots int
		edit  func(gw *bundle.Gateway)
	}{
		"a gateway at rest with one root":                     {roots: 1},
		"a gateway at rest with ten roots piled up":           {roots: 10},
		"a gateway whose ca.crt was edited by hand":           {roots: 3, edit: func(gw *bundle.Gateway) { gw.CAPEM = append([]byte("\n"), gw.CAPEM...) }},
		"a gateway whose tls.crt lost its cross-certificates": {roots: 3, edit: func(gw *bundle.Gateway) { gw.CertPEM = gw.CertPEM[:len(gw.CertPEM)/3] }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			gw, cas, cl, _ := pileUp(t, tc.roots, 5, 1000*time.Hour)
			if tc.edit != nil {
				tc.edit(&gw)
			}
			last := validRoot(t, cas[len(cas)-1], testNow)
			want := bundle.Plan(gw, last, cl, pileUpTimings, testNow)
			memo := gw
			memo.Parsed = bundle.NewParsed()
			for range 2 { // cold, then warm
				got := bundle.Plan(memo, last, cl, pileUpTimings, testNow)
				g.Expect(got.CAPEM).To(Equal(want.CAPEM))
				g.Expect(got.State).To(Equal(want.State))
				g.Expect(got.Events).To(Equal(want.Events))
				if string(want.CertPEM) == string(gw.CertPEM) {
					g.Expect(got.CertPEM).To(Equal(want.CertPEM), "the credential found is kept")
				}
			}
			next := certs.MustNew(t, "agents-root-ca", testNow, testNow.Add(1000*time.Hour), certs.Options{IsCA: true}, nil)
			rotated := bundle.Plan(memo, validRoot(t, next, testNow), cl, pileUpTimings, testNow)
			g.Expect(rotated.State.Root).To(Equal(bundle.Fingerprint(next.Cert)))
			g.Expect(rotated.CAPEM).NotTo(Equal(want.CAPEM), "a new root changes the bundle")
			// The next reconcile reads back what the rotation wrote, which
			// the memo took from the decision instead of parsing it.
			after, plain := written(rotated), written(rotated)
			after.Parsed = memo.Parsed
			nextRoot := validRoot(t, next, testNow)
			for _, at := range []time.Time{testNow, testNow.Add(2 * time.Minute)} {
				got, want := bundle.Plan(after, nextRoot, cl, pileUpTimings, at), bundle.Plan(plain, nextRoot, cl, pileUpTimings, at)
				g.Expect(got.CAPEM).To(Equal(want.CAPEM))
				g.Expect(got.CertPEM).To(Equal(want.CertPEM))
				g.Expect(got.State).To(Equal(want.State))
				g.Expect(got.Events).To(Equal(want.Events))
			}
		})
	}
}
