package integration

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/dualca/dualca/syncer"
)

// What the supported Kubernetes versions could do differently, pinned where
// it shows (docs/compatibility.md, "Where the versions differ"). make
// test-compat runs this suite against each of them.

// TestEveryCacheFillsThroughAStreamingList: client-go fills each of
// dualca's caches (the root, the gateway, the status ConfigMap, the client
// Certificates and their CertificateRequests) with a watch that sends the current objects first,
// which every supported API server serves, so dualca sends no list at all.
// On an API server without streaming lists client-go would fall back to
// lists, which the chart's Roles also grant; this test would then fail and
// say which version stopped streaming.
func TestEveryCacheFillsThroughAStreamingList(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.ClientSelector, o.ClientNamespaces = labels.SelectorFromSet(clientLabel), []string{s.ns}
	d, _ := s.startOnFirstRoot(o.Syncer())

	s.g.Eventually(func(g Gomega) {
		streamed := map[string]bool{}
		var lists []string
		for _, r := range d.Requests() {
			switch {
			case r.Verb == "list":
				lists = append(lists, r.String())
			case r.InitialEvents:
				streamed[r.Resource+" "+r.Name] = true
			}
		}
		g.Expect(lists).To(BeEmpty(), "no cache fell back to a list")
		g.Expect(streamed).To(Equal(map[string]bool{
			"secrets " + s.root.Name:                true,
			"secrets " + s.gateway.Name:             true,
			"secrets " + s.gateway.Name + "-cacert": true, // would shadow the gateway's bundle in Istio
			"certificates ":                         true, // by label
			"certificaterequests ":                  true, // the clients' requests, by label
			"configmaps " + syncer.DefaultStatusConfigMap(s.gateway, syncer.DefaultStateSecret(s.gateway)).Name: true, // the status

		}), "each cache streamed its initial list")
	}).Should(Succeed())
}
