// Package soak is dualca's long run: root rotations and faults at random
// moments, for as long as it is given, against a gateway and clients that
// reload their Secrets seconds late, as real ones do.
//
// Everything is real and local (127.0.0.1): kube-apiserver and etcd,
// cert-manager's controller issuing the root and the clients, two replicas
// of the dualca binary electing a leader with --issuing-secret, a TLS
// gateway (package mtls) and one client per client Certificate handshaking
// all the time, each loading every version of its Secret after a random
// lag. The clients are first issued by a CA Issuer on the root Secret;
// once dualca has created its issuing Secret the run makes the operator's
// one-line change (the Issuer's spec.ca.secretName to the issuing Secret)
// and waits until cert-manager has the Issuer Ready on it, so from then on
// every client is issued from a root the gateway has had the propagation
// delay to trust. cert-manager re-issues the root at uniformly random
// moments, so rotations land in every phase of the one before, during
// client issuances and on top of each other, and faults come at random
// moments too: a replica (the leader or the standby) killed with SIGKILL,
// kube-apiserver or cert-manager restarted, the gateway Secret deleted, a
// burst of writes conflicting with dualca's, a client whose issuer breaks
// and later heals, a root that is invalid for a few seconds. Every
// rotation and fault is logged with its moment.
//
// It asserts that no healthy client failed one handshake: every failed
// handshake fails the run, none is excused (the broken client's failures
// are counted apart), and the gateway rejected only the broken client's.
// It logs the first failed attempts, with the root each leaf chains to and
// when the gateway loaded it. It asserts too that the monitor
// (package monitor) found no violation in any gateway version and no race
// (a client issued from a root the gateway Secret does not bundle yet: the
// issuing Secret waits for the gateway, also while no replica leads), that
// the gateway and clients could load every version, that each rotation
// converged (Steady, on its root or on a later one that overtook it)
// before the root it replaced expired, and that the issuing Secret ends on
// the last root, and that every scrape of a replica that lived on
// succeeded. A run of 10 minutes or more (`make soak`) asserts too that
// the leader leaks nothing: its heap goal (the live heap grown by the
// GC's percentage in force, the heap the GC lets grow before collecting),
// goroutines and open file descriptors are
// sampled every 10 s, and their slope over the last three quarters of the
// run, while it led and past its warm-up, must not reach the chart's
// memory limit (or the process's open-files limit) from its highest
// resident set within 30 days (the resident set's own slope is reported:
// unreturned pages and the binary's pages move it too). The standby holds no controller and is
// not judged. In such runs a replica is killed only once it has lived
// through its warm-up and a sixth of the run more (minLife), so that each
// leaves a stretch long enough to fit its growth over; with
// -soak.kills=false (`make soak-leaks`) no replica is killed and
// kube-apiserver is not restarted (on a busy machine a restart outlasts
// the lease's renew deadline), so the leader lives the whole run. A shorter run reports the slopes and judges
// none. It reports API requests per minute and can write docs/soak.md,
// and the series of its timeline plot, which make soak draws into
// docs/soak.png with test/programs/figures.
//
// `make test` runs it for 3 minutes with 20 clients (TestSoak's defaults,
// rotations every 30 s-2 min as in `make soak`), leaks not judged;
// `make soak DURATION=60m CLIENTS=100` runs it longer and writes
// docs/soak.md, `make soak-leaks` the run without kills, docs/soak-leaks.md.
// The test's flags: -soak.duration, -soak.clients, -soak.lag, -soak.rotate,
// -soak.faults, -soak.kills, -soak.report, -soak.plot, -soak.series.
package soak
