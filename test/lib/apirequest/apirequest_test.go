package apirequest

import (
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
)

// A request writes when its method creates, replaces, patches or deletes;
// reads, lists and watches do not.
func TestWritesAreTheRequestsThatChangeObjects(t *testing.T) {
	g := NewWithT(t)
	for method, url := range map[string]string{
		"POST":   "/api/v1/namespaces/ns/secrets",
		"PUT":    "/apis/cert-manager.io/v1/namespaces/ns/certificates/a/status",
		"PATCH":  "/api/v1/namespaces/ns/configmaps/c",
		"DELETE": "/api/v1/namespaces/ns/secrets/s",
	} {
		r, ok := Parse(httptest.NewRequest(method, url, nil))
		g.Expect(ok).To(BeTrue())
		g.Expect(r.Writes()).To(BeTrue(), "%s %s", method, url)
	}
	for _, url := range []string{
		"/api/v1/namespaces/ns/secrets/s",
		"/api/v1/namespaces/ns/secrets",
		"/api/v1/namespaces/ns/secrets?watch=true",
	} {
		r, ok := Parse(httptest.NewRequest("GET", url, nil))
		g.Expect(ok).To(BeTrue())
		g.Expect(r.Writes()).To(BeFalse(), "%s: %s", url, r)
	}
}
