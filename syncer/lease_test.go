package syncer

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Two gateway Secrets of one name in two namespaces, their dualcas electing
// in one namespace: each must have a Lease of its own.
func TestLeaseNameHoldsTheGatewaysNamespace(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	a := LeaseName(types.NamespacedName{Namespace: "team-a", Name: "gateway-credential"})
	b := LeaseName(types.NamespacedName{Namespace: "team-b", Name: "gateway-credential"})
	g.Expect(a).To(Equal("dualca-team-a-gateway-credential"))
	g.Expect(b).To(Equal("dualca-team-b-gateway-credential"))
	g.Expect(a).NotTo(Equal(b))
}

func TestLeaseNameIsAValidNameOfAnyLength(t *testing.T) {
	t.Parallel()
	label := func(c string, n int) string { return strings.Repeat(c, n) }
	// The longest gateway name: dot-separated labels, 253 characters.
	longest := label("a", 63) + "." + label("b", 63) + "." + label("c", 63) + "." + label("d", 61)
	tests := map[string]struct {
		gateway types.NamespacedName
		cut     bool
	}{
		"short":                                 {gateway: types.NamespacedName{Namespace: "istio-system", Name: "gw"}},
		"exactly 253 characters, not cut":       {gateway: types.NamespacedName{Namespace: "ns", Name: label("x", 253-len("dualca-ns-"))}},
		"254 characters, cut":                   {gateway: types.NamespacedName{Namespace: "ns", Name: label("x", 254-len("dualca-ns-"))}, cut: true},
		"the longest namespace and name":        {gateway: types.NamespacedName{Namespace: label("n", 63), Name: longest}, cut: true},
		"cut right after a dot":                 {gateway: types.NamespacedName{Namespace: "ns", Name: label("x", 242-len("dualca-ns-")-1) + ".y" + label("z", 20)}, cut: true},
		"cut right after a run of dashes":       {gateway: types.NamespacedName{Namespace: "ns", Name: label("x", 230) + "---" + label("z", 30)}, cut: true},
		"cut within the name, past a long ns":   {gateway: types.NamespacedName{Namespace: label("n", 63), Name: label("m", 200)}, cut: true},
		"a name of labels the cut ends within":  {gateway: types.NamespacedName{Namespace: "edge", Name: longest}, cut: true},
		"a one-character name and namespace":    {gateway: types.NamespacedName{Namespace: "a", Name: "b"}},
		"names that differ only past the cut 1": {gateway: types.NamespacedName{Namespace: "ns", Name: label("x", 250) + "1"}, cut: true},
	}
	seen := map[string]string{}
	for name, tc := range tests {
		got := LeaseName(tc.gateway)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("%s: %q is not a DNS-1123 subdomain: %v", name, got, errs)
		}
		full := "dualca-" + tc.gateway.Namespace + "-" + tc.gateway.Name
		if tc.cut {
			if got == full || !strings.HasPrefix(full, strings.TrimRight(got[:len(got)-leaseHashLen-1], "-.")) {
				t.Errorf("%s: %q is not %q cut with a hash", name, got, full)
			}
		} else if got != full {
			t.Errorf("%s: %q, want %q uncut", name, got, full)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s share the Lease %q", name, other, got)
		}
		seen[got] = name
	}
	// Two names that differ only past the cut keep Leases of their own.
	x := LeaseName(types.NamespacedName{Namespace: "ns", Name: label("x", 250) + "1"})
	y := LeaseName(types.NamespacedName{Namespace: "ns", Name: label("x", 250) + "2"})
	if x == y {
		t.Errorf("names that differ past the cut share the Lease %q", x)
	}
}
