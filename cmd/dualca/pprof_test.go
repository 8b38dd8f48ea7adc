package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

// TestProfilingIsOffByDefaultAndLoopbackOnly: without DUALCA_PPROF_ADDRESS
// nothing listens; an address beyond the host is refused before anything
// listens; a loopback one serves the profiles until the context ends.
func TestProfilingIsOffByDefaultAndLoopbackOnly(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	t.Setenv(pprofEnv, "")
	g.Expect(servePprof(ctx)).To(Succeed(), "off: nothing to do")

	for _, addr := range []string{"0.0.0.0:6060", ":6060", "10.0.0.1:6060", "localhost:6060", "[::]:6060", "127.0.0.1"} {
		t.Setenv(pprofEnv, addr)
		g.Expect(servePprof(ctx)).To(MatchError(ContainSubstring(pprofEnv)), addr)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := l.Addr().String()
	g.Expect(l.Close()).To(Succeed())
	t.Setenv(pprofEnv, addr)
	g.Expect(servePprof(ctx)).To(Succeed())
	g.Eventually(func() (string, error) {
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}).Should(ContainSubstring("dualca"))
	cancel()
	g.Eventually(func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err
	}).Should(HaveOccurred(), "closed with its context")
}
