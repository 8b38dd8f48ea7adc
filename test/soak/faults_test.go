package soak

import (
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/dualca/dualca/test/lib/certs"
)

// The faults, by the name the timeline and the report give them.
const (
	killLeader       = "kill leader"
	killStandby      = "kill standby"
	restartAPIServer = "restart kube-apiserver"
	restartCM        = "restart cert-manager"
	deleteGateway    = "delete gateway"
	conflictStorm    = "conflict storm"
	breakIssuer      = "break issuer"
	healIssuer       = "heal issuer"
	invalidRoot      = "invalid root"
	replicaExited    = "replica exited"
	killSkipped      = "kill skipped" // the replica had not lived minLife
)

// faultKinds are the faults drawn from; a heal follows each break on its own.
var faultKinds = []string{killLeader, killStandby, restartAPIServer, restartCM, deleteGateway, conflictStorm, breakIssuer, invalidRoot}

const (
	brokenIssuer   = "broken-ca"
	stormKey       = "example.com/storm"
	stormFor       = 5 * time.Second
	stormEvery     = 10 * time.Millisecond
	apiServerDown  = 3 * time.Second
	invalidFor     = 3 * time.Second
	leaseAcquired  = `"msg":"Successfully acquired lease"`
	leadershipLost = "leader election lost"
)

// drawnFaults are the kinds drawn from: every kind, or, in the run for
// leaks (no kills), every kind that leaves the leader's process alive: no
// kill, and no kube-apiserver restart, which on a busy machine outlasts
// the lease's renew deadline and ends the leader.
func drawnFaults() []string {
	if *kills {
		return slices.Clone(faultKinds)
	}
	return slices.DeleteFunc(slices.Clone(faultKinds), func(k string) bool {
		return k == killLeader || k == killStandby || k == restartAPIServer
	})
}

// faults injects a fault at random moments until the end, from a shuffled
// deck so that every kind comes before any comes twice. It runs in the
// test's goroutine.
func (s *soak) faults() {
	var deck []string
	var healAt time.Time
	for {
		wait := faults.draw()
		if !healAt.IsZero() && time.Until(healAt) < wait {
			wait = max(time.Until(healAt), 0)
		}
		if !s.pause(wait) {
			return
		}
		s.reapReplicas()
		if !healAt.IsZero() && !time.Now().Before(healAt) {
			s.heal()
			healAt = time.Time{}
			continue
		}
		if len(deck) == 0 {
			deck = drawnFaults()
			mrand.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		kind := deck[0]
		deck = deck[1:]
		if kind == breakIssuer && !healAt.IsZero() {
			continue // still broken
		}
		s.inject(kind)
		if kind == breakIssuer {
			// Sometimes longer than the grace period, so that a rotation
			// meanwhile ends in a forced switch the broken client fails.
			healAt = time.Now().Add(span{switchGrace / 2, switchGrace * 3 / 2}.draw())
		}
	}
}

// inject runs one fault and records it; a kill of a replica that has not
// lived minLife is recorded as skipped instead.
func (s *soak) inject(kind string) {
	var detail string
	var err error
	switch kind {
	case killLeader, killStandby:
		// The replica judged old enough is the one killed: chosen once, so
		// a lease handover in between cannot swap them.
		i, what := s.killTarget(kind == killLeader)
		if age := s.age(i); age < minLife() {
			s.record(killSkipped, fmt.Sprintf("%s up %v, under %v", what, age.Round(time.Second), minLife()))
			return
		}
		detail = s.kill(i, what)
	case restartAPIServer:
		at := time.Now()
		err = s.c.RestartAPIServer(s.ctx, apiServerDown)
		detail = fmt.Sprintf("down %v", time.Since(at).Round(100*time.Millisecond))
	case restartCM:
		at := time.Now()
		err = s.c.StopCertManager()
		if err == nil {
			err = s.c.StartCertManager(s.ctx)
		}
		detail = fmt.Sprintf("back in %v", time.Since(at).Round(100*time.Millisecond))
	case deleteGateway:
		detail, err = s.deleteGateway()
	case conflictStorm:
		detail = s.storm()
	case breakIssuer:
		err = s.setIssuer(brokenIssuer)
		detail = s.broken + " now issued by " + brokenIssuer + ", whose key does not match its certificate"
	case invalidRoot:
		detail, err = s.invalidateRoot()
	}
	if err != nil {
		s.t.Errorf("fault %s: %v", kind, err)
		detail += " (failed: " + err.Error() + ")"
	}
	s.record(kind, detail)
}

// minLife is how long a replica lives before a fault may kill it, in runs
// that judge leaks: its warm-up, then a sixth of the run (ten minutes of
// an hour) to fit its growth over. Killed at every fault's whim, replicas
// lived two to twelve minutes, and what was left after the warm-up was
// too short to tell a leak from a heap still reaching its size.
func minLife() time.Duration {
	if !judgesLeaks() {
		return 0
	}
	return warmUp() + *duration/6
}

// killTarget is the replica a kill of the leader (or the standby) would
// take, and what it is.
func (s *soak) killTarget(leader bool) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.replicas[:], func(r *replica) bool { return strings.Contains(r.Log(), leaseAcquired) })
	switch {
	case i < 0:
		return mrand.N(2), "a replica (no leader yet)"
	case !leader:
		return 1 - i, "standby"
	}
	return i, "leader"
}

func (s *soak) age(i int) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.replicas[i].started)
}

// kill sends SIGKILL to replica i (what it is: leader or standby) and
// starts it again after a random moment of up to two seconds.
func (s *soak) kill(i int, what string) string {
	s.mu.Lock()
	r := s.replicas[i]
	s.mu.Unlock()
	r.Kill()
	restart := mrand.N(2 * time.Second)
	<-time.After(restart)
	s.startReplica(i)
	return fmt.Sprintf("%s (pid %d, up %v) killed, replaced after %v", what, r.Pid, time.Since(r.started).Round(time.Second), restart.Round(time.Millisecond))
}

// reapReplicas replaces a replica that exited by itself, as a pod's
// restart would: a leader exits when it cannot renew its lease (kube-
// apiserver away longer than the renew deadline). Any other exit fails
// the run.
func (s *soak) reapReplicas() {
	for i := range s.replicas {
		s.mu.Lock()
		r := s.replicas[i]
		s.mu.Unlock()
		if !r.Exited() {
			continue
		}
		if !strings.Contains(r.Log(), leadershipLost) {
			s.t.Errorf("dualca (pid %d) exited by itself, not for a lost lease", r.Pid)
			continue
		}
		r.Reap("exited: leader election lost")
		s.startReplica(i)
		s.record(replicaExited, fmt.Sprintf("pid %d lost its lease (kube-apiserver away) and exited; restarted", r.Pid))
	}
}

// deleteGateway deletes the gateway Secret and waits until dualca has
// written it again.
func (s *soak) deleteGateway() (string, error) {
	at := time.Now()
	if err := s.kube.CoreV1().Secrets(namespace).Delete(s.ctx, gatewayName, metav1.DeleteOptions{}); err != nil {
		return "", err
	}
	s.mu.Lock()
	s.deletions++
	s.mu.Unlock()
	for time.Since(at) < time.Minute {
		if _, err := s.get(gatewayName); err == nil {
			return fmt.Sprintf("restored by dualca %v later", time.Since(at).Round(time.Millisecond)), nil
		}
		<-time.After(10 * time.Millisecond)
	}
	return "", fmt.Errorf("the gateway Secret was not restored within a minute")
}

// storm merge-patches an annotation of another writer's on the gateway
// Secret every 10 ms for a few seconds, so that dualca's writes conflict.
func (s *soak) storm() string {
	patches, errs := 0, 0
	for n := 1; n <= int(stormFor/stormEvery); n++ {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, stormKey, strconv.Itoa(n))
		if _, err := s.kube.CoreV1().Secrets(namespace).Patch(s.ctx, gatewayName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			errs++
		} else {
			patches++
		}
		<-time.After(stormEvery)
	}
	return fmt.Sprintf("%d patches in %v (%d refused)", patches, stormFor, errs)
}

// createBrokenIssuer creates the CA Issuer the broken client moves to: its
// Secret's key belongs to another certificate, so it never signs. It is
// not Ready, and nothing waits for it to be.
func (s *soak) createBrokenIssuer() error {
	a, err := certs.NewCA("broken", time.Now().Add(-time.Minute), time.Now().Add(90*24*time.Hour))
	if err != nil {
		return err
	}
	b, err := certs.NewCA("broken", time.Now().Add(-time.Minute), time.Now().Add(90*24*time.Hour))
	if err != nil {
		return err
	}
	if err := s.c.Client.Create(s.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: brokenIssuer},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: a.CertPEM, corev1.TLSPrivateKeyKey: b.KeyPEM},
	}); err != nil {
		return err
	}
	return s.c.Client.Create(s.ctx, &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: brokenIssuer},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: brokenIssuer}}},
	})
}

// setIssuer points the broken client's Certificate at issuer; cert-manager
// issues it again from there.
func (s *soak) setIssuer(issuer string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt := &cmapi.Certificate{}
		if err := s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: namespace, Name: s.broken}, crt); err != nil {
			return err
		}
		crt.Spec.IssuerRef = cmmeta.IssuerReference{Name: issuer, Kind: cmapi.IssuerKind, Group: "cert-manager.io"}
		return s.c.Client.Update(s.ctx, crt)
	})
}

// heal points the broken client back at the good issuer, if it is broken.
func (s *soak) heal() {
	crt := &cmapi.Certificate{}
	if err := s.c.Client.Get(s.ctx, types.NamespacedName{Namespace: namespace, Name: s.broken}, crt); err != nil {
		s.t.Errorf("reading %s: %v", s.broken, err)
		return
	}
	if crt.Spec.IssuerRef.Name != brokenIssuer {
		return
	}
	if err := s.setIssuer(issuerName); err != nil {
		s.t.Errorf("healing %s: %v", s.broken, err)
		return
	}
	s.record(healIssuer, s.broken+" issued by "+issuerName+" again")
}

// invalidateRoot appends a block that is no certificate to the root
// Secret's ca.crt, which makes the root invalid for dualca (cert-manager
// does not look at it), and restores it a few seconds later unless
// cert-manager has rewritten the Secret meanwhile.
func (s *soak) invalidateRoot() (string, error) {
	junk := []byte("-----BEGIN JUNK-----\nAAAA\n-----END JUNK-----\n")
	var before []byte
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		root, err := s.get(rootName)
		if err != nil {
			return err
		}
		before = root.Data["ca.crt"]
		root.Data["ca.crt"] = append(slices.Clone(before), junk...)
		_, err = s.kube.CoreV1().Secrets(namespace).Update(s.ctx, root, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return "", err
	}
	<-time.After(invalidFor)
	restored := false
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		root, err := s.get(rootName)
		if err != nil {
			return err
		}
		ca, found := strings.CutSuffix(string(root.Data["ca.crt"]), string(junk))
		if !found {
			return nil // cert-manager wrote it again
		}
		root.Data["ca.crt"] = []byte(ca)
		_, err = s.kube.CoreV1().Secrets(namespace).Update(s.ctx, root, metav1.UpdateOptions{})
		restored = err == nil
		return err
	})
	if !restored {
		return fmt.Sprintf("ca.crt invalid, rewritten by cert-manager within %v", invalidFor), err
	}
	return fmt.Sprintf("ca.crt invalid for %v, then restored", invalidFor), err
}
