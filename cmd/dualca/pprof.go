package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// pprofEnv names the environment variable that turns on Go's profiling
// endpoints (/debug/pprof/) at the address it holds, for a maintainer
// measuring where dualca's time goes (docs/benchmarks.md). Off when unset.
// Only a loopback address is accepted: the profiles show the process's
// memory, so they are never served beyond the host. It is an environment
// variable rather than a flag so that the chart and the flags stay as
// they are: nothing a user configures turns it on.
const pprofEnv = "DUALCA_PPROF_ADDRESS"

// servePprof serves the profiling endpoints at the address in pprofEnv
// until ctx ends; nothing when the variable is unset.
func servePprof(ctx context.Context) error {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return nil
	}
	if err := loopback(addr); err != nil {
		return fmt.Errorf("%s=%q: %w", pprofEnv, addr, err)
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("%s: %w", pprofEnv, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(l) }()
	return nil
}

// loopback fails unless addr is HOST:PORT with HOST a loopback IP.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("want a loopback address such as 127.0.0.1:6060")
	}
	return nil
}
