package soak

import (
	"flag"
	"fmt"
	"path/filepath"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
	"github.com/dualca/dualca/test/lib/run"
)

// profilesTo, when set, is where the leader's heap profiles go: each
// replica serves Go's profiling endpoints (DUALCA_PPROF_ADDRESS, on
// 127.0.0.1), and every profileEvery the leader's in-use heap, after a
// GC, is written there as heap-<pid>-<minute of the run>.pb.gz. Diffed
// with `go tool pprof -base`, two of them say what grew between them, by
// allocation site: the leak judge says only how much. GODEBUG's
// memprofilerate, passed through, sets how finely the heap is sampled.
// A profile that could not be fetched from a replica that lived on is
// counted with the scrapes that failed.
var profilesTo = flag.String("soak.profiles", "", "write the leader's heap profile into this folder every minute (for what a leak is made of)")

const profileEvery = time.Minute

// profileEnv is the environment that starts a replica with its profiling
// endpoints, and their address; nothing without -soak.profiles.
func profileEnv() (env []string, addr string, err error) {
	if *profilesTo == "" {
		return nil, "", nil
	}
	if addr, err = controlplane.FreeAddress(); err != nil {
		return nil, "", err
	}
	return []string{"DUALCA_PPROF_ADDRESS=" + addr}, addr, nil
}

// profileLeaders writes the heap profile of each replica leading now.
func (s *soak) profileLeaders() {
	s.mu.Lock()
	replicas := s.replicas
	s.mu.Unlock()
	for _, r := range replicas {
		if r == nil || r.pprof == "" || r.Exited() || !r.leads() {
			continue
		}
		name := fmt.Sprintf("heap-%d-%03.0f.pb.gz", r.Pid, time.Since(s.begin).Minutes())
		if err := run.FetchTo(s.ctx, filepath.Join(*profilesTo, name), "http://"+r.pprof+"/debug/pprof/heap?gc=1"); err != nil && !r.ExitsWithin(scrapeGrace) {
			s.mu.Lock()
			s.scrapeFailures = append(s.scrapeFailures, fmt.Sprintf("pid %d: heap profile: %v", r.Pid, err))
			s.mu.Unlock()
		}
	}
}
