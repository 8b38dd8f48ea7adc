package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// A profile asked for is written where -profiles says, or fails the step:
// none is written without -profiles, and an endpoint that answers with an
// error, or a process serving none, is an error, not a missing file.
func TestAProfileAskedForIsWrittenOrFails(t *testing.T) {
	g := NewWithT(t)
	asked := []string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RequestURI())
		if strings.HasPrefix(r.URL.Path, "/debug/pprof/heap") {
			_, _ = w.Write([]byte("heap bytes"))
			return
		}
		http.Error(w, "no such profile", http.StatusNotFound)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "profiles")

	off := &bench{opts: options{}, log: t.Logf}
	g.Expect(off.profile(ctx, &process{name: "dualca", pprof: addr}, "heap", 0, "x")).To(Succeed())
	g.Expect(asked).To(BeEmpty(), "without -profiles nothing is asked")

	b := &bench{opts: options{profiles: dir}, log: t.Logf}
	p := &process{name: "dualca", pprof: addr}
	g.Expect(b.profile(ctx, p, "heap", 0, "scale-10-rest")).To(Succeed())
	got, err := os.ReadFile(filepath.Join(dir, "scale-10-rest.pb.gz"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("heap bytes"))
	g.Expect(asked).To(Equal([]string{"/debug/pprof/heap?gc=1"}))

	g.Expect(b.profile(ctx, p, "profile", 3, "propagation-1-cpu")).To(MatchError(ContainSubstring("404")))
	g.Expect(asked[1]).To(Equal("/debug/pprof/profile?seconds=3"))
	g.Expect(filepath.Join(dir, "propagation-1-cpu.pb.gz")).NotTo(BeAnExistingFile())

	g.Expect(b.profile(ctx, &process{name: "copier"}, "heap", 0, "y")).To(MatchError(ContainSubstring("serves no profile")))
}
