package cluster

import (
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// Interrupting a test run (^C, or SIGTERM from CI) ends the test binary
// without running any cleanup, and envtest starts kube-apiserver and etcd in
// process groups of their own, so they would outlive it. (cert-manager stops
// by itself: its standard input closes.) Once a cluster has started, those
// signals stop the running clusters first and are then delivered again with
// their default effect.
var (
	runningMu sync.Mutex
	running   = map[*Cluster]struct{}{}
	watchOnce sync.Once
)

// track registers a starting cluster, to be stopped on a signal.
func track(c *Cluster) {
	watchOnce.Do(func() {
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
		go func() {
			sig := <-signals
			runningMu.Lock()
			clusters := slices.Collect(maps.Keys(running))
			runningMu.Unlock()
			for _, c := range clusters {
				_ = c.Stop()
			}
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			if self, err := os.FindProcess(os.Getpid()); err == nil {
				_ = self.Signal(sig)
			}
		}()
	})
	runningMu.Lock()
	defer runningMu.Unlock()
	running[c] = struct{}{}
}

// untrack forgets a stopped cluster.
func untrack(c *Cluster) {
	runningMu.Lock()
	defer runningMu.Unlock()
	delete(running, c)
}
