package mtls

import (
	"context"
	"slices"
	"sync"
)

// Fleet is a group of Clients of one gateway, one per Secret, run and
// counted together.
type Fleet struct {
	clients []*Client
	wg      sync.WaitGroup
}

// FleetStats is a snapshot of a Fleet.
type FleetStats struct {
	// Total sums the clients' counters (see ClientStats for the consecutive
	// counts). LastError and LastLoadError are left empty.
	Total ClientStats
	// Clients are the clients' own snapshots by Secret name.
	Clients map[string]ClientStats
}

// NewFleet returns one client of the gateway at addr per Secret name, all
// reading their Secrets through secrets (a SharedWatch keeps that to one
// watch). Start runs them.
func NewFleet(secrets Secrets, names []string, addr string, opts ClientOptions) *Fleet {
	f := &Fleet{}
	for _, name := range names {
		f.clients = append(f.clients, NewClient(secrets, name, addr, opts))
	}
	return f
}

// Start runs every client until ctx is done; Wait waits for them to return.
func (f *Fleet) Start(ctx context.Context) {
	for _, c := range f.clients {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			c.Run(ctx)
		}()
	}
}

// Wait blocks until every client started by Start has returned.
func (f *Fleet) Wait() { f.wg.Wait() }

// Clients are the fleet's clients, in the order of the names given.
func (f *Fleet) Clients() []*Client { return slices.Clone(f.clients) }

// Stats returns a snapshot of every client and their sum.
func (f *Fleet) Stats() FleetStats {
	s := FleetStats{Total: ClientStats{Errors: map[string]int{}}, Clients: map[string]ClientStats{}}
	for i, c := range f.clients {
		cs := c.Stats()
		s.Clients[c.Name()] = cs
		t := &s.Total
		t.Attempts += cs.Attempts
		t.Successes += cs.Successes
		t.Failures += cs.Failures
		t.NotReady += cs.NotReady
		t.Reloads += cs.Reloads
		t.LoadErrors += cs.LoadErrors
		t.Deletions += cs.Deletions
		addCounts(t.Errors, cs.Errors)
		// "Every client has succeeded n times in a row" reads as
		// Total.ConsecutiveSuccesses >= n.
		if i == 0 || cs.ConsecutiveSuccesses < t.ConsecutiveSuccesses {
			t.ConsecutiveSuccesses = cs.ConsecutiveSuccesses
		}
		t.ConsecutiveFailures = max(t.ConsecutiveFailures, cs.ConsecutiveFailures)
	}
	return s
}

// Failing names the clients whose last attempt failed, sorted.
func (s FleetStats) Failing() []string {
	var names []string
	for name, cs := range s.Clients {
		if cs.ConsecutiveFailures > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// Failed names the clients that failed at least once, sorted.
func (s FleetStats) Failed() []string {
	var names []string
	for name, cs := range s.Clients {
		if cs.Failures > 0 {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}
