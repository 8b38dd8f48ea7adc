// Package soak is dualca's long run: root rotations and faults at random
// moments, for as long as it is given, against a gateway and clients that
// reload their Secrets seconds late, as real ones do.
//
// Everything is real and local (127.0.0.1): kube-apiserver and etcd,
// cert-manager's controller issuing the root and the clients, two replicas
// of the dualca binary electing a leader, a TLS gateway (package mtls) and
// one client per client Certificate handshaking all the time, each loading
// every version of its Secret after a random lag. cert-manager re-issues
// the root at uniformly random moments, so rotations land in every phase of
// the one before, during client issuances and on top of each other, and
// faults come at random moments too: a replica (the leader or the standby)
// killed with SIGKILL, kube-apiserver or cert-manager restarted, the gateway
// Secret deleted, a burst of writes conflicting with dualca's, a client
// whose issuer breaks and later heals, a root that is invalid for a few
// seconds. Every rotation and fault is logged with its moment.
//
// It asserts that no healthy client failed one handshake (the broken
// client's failures are counted apart) outside a cut-off: a client whose
// issuance was in flight when the root rotated, signed by the new root and
// loaded before the lagging gateway loaded that root, a window dualca
// cannot close (docs/rotation.md, "What dualca cannot prevent"). Cut-offs
// are defined strictly (cutoff_test.go), counted, timed and bounded by the
// longest reload lag plus a margin. It asserts too that the monitor
// (package monitor) found no violation in any gateway version, that the
// gateway and clients could load every version, that each rotation
// converged (Steady, on its root or on a later one that overtook it)
// before the root it replaced expired. A run of 10 minutes or more (`make
// soak`) asserts too that dualca leaks nothing: its resident memory,
// goroutines and open file descriptors are sampled every 10 s and their
// slope over the last three quarters of the run is bounded; in such runs a
// replica is killed only once it has lived through its warm-up and a sixth
// of the run more (minLife), so that each leaves a stretch long enough to
// fit its growth over. A shorter run reports the slopes and judges none.
// It reports API requests per minute and can write docs/soak.md with a
// timeline plot.
//
// `make test` runs it for 3 minutes with 20 clients (TestSoak's defaults,
// rotations every 30 s-2 min as in `make soak`), leaks not judged;
// `make soak DURATION=60m CLIENTS=100` runs it longer and writes the report.
// The test's flags: -soak.duration, -soak.clients, -soak.lag, -soak.rotate,
// -soak.faults, -soak.report, -soak.plot.
package soak
