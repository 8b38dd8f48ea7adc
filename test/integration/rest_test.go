package integration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/syncer/operator"
)

// TestAtRestThePollsReadsAreAllItSends: the product's at-rest contract on
// a real API server. Once the gateway is in sync, nothing is due (the
// propagation delay is over: the step that ends it changes what the status
// says comes next, and is published) and the status says so, poll after
// poll brings the poll's two reads, the root and the gateway
// Secret, and nothing else: no other read (the record, the status
// ConfigMap, the Secret that would shadow the bundle come from dualca's
// own writes or its caches) and no write (the status is written when it
// changes, never to show dualca alive). Clients are tracked, none
// selected, as in the chart's default. How often it polls is the
// benchmark's to measure.
func TestAtRestThePollsReadsAreAllItSends(t *testing.T) {
	t.Parallel()
	s := newSetup(t)
	o := s.options()
	o.PollInterval = time.Second
	o.ClientSelector, o.ClientNamespaces = labels.SelectorFromSet(clientLabel), []string{s.ns}
	d, _ := s.startOnFirstRoot(o.Syncer())
	kube := kubernetes.NewForConfigOrDie(restConfig)
	key := syncer.DefaultStatusConfigMap(s.gateway, syncer.DefaultStateSecret(s.gateway))
	s.g.Eventually(func(g Gomega) {
		r, err := operator.ReadStatus(context.Background(), kube.CoreV1(), key, time.Hour, time.Now())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Phase).To(Equal(string(bundle.PhaseSteady)))
		g.Expect(r.Next.Upcoming).NotTo(BeEmpty())
		g.Expect(r.Next.Upcoming[0].At).To(BeTemporally(">", time.Now().Add(time.Hour)), "nothing due soon: at rest (the propagation delay that follows a new root is over)")
	}).Should(Succeed())
	// Settled once dualca has not written the status for longer than a
	// write can wait: a change of the client progress alone waits up to
	// 5 s (progressEvery), so a report made as the rotation settled may
	// land after the status first reads as above.
	last, changed := -1, time.Now()
	s.g.Eventually(func() time.Duration {
		if n := d.configMapWrites(); n != last {
			last, changed = n, time.Now()
		}
		return time.Since(changed)
	}).WithTimeout(time.Minute).WithPolling(200*time.Millisecond).Should(BeNumerically(">", 6*time.Second), "no status write for longer than one can wait")

	// The requests first, then the polls counted: a poll under way as the
	// requests are counted may have sent its first read before; the one
	// after it and those that follow sent all theirs after.
	from, polled := len(d.Requests()), d.polls()
	const polls = 5
	s.g.Eventually(d.polls).WithTimeout(time.Minute).Should(BeNumerically(">=", polled+1+polls))
	var others []string
	reads := 0
	for _, r := range d.Requests()[from:] {
		switch {
		case r.Verb == "watch":
			// A long-lived watch: the API server ends each after minutes,
			// and a reflector opens it again.
		case r.Verb == "get" && r.Resource == "secrets" && (r.Name == s.root.Name || r.Name == s.gateway.Name):
			reads++
		default:
			others = append(others, r.String())
		}
	}
	s.g.Expect(others).To(BeEmpty(), "at rest, no request but the poll's reads (and watches)")
	s.g.Expect(reads).To(BeNumerically(">=", 2*polls), "each poll read the root and the gateway")
	// Nothing came compressed, the watches and their initial lists
	// included: the API server compressed each watch event of a client
	// that accepts gzip, and dualca decompressed it (syncer.uncompressed).
	var compressed []string
	for _, r := range d.Requests() {
		if r.Compressed {
			compressed = append(compressed, r.String())
		}
	}
	s.g.Expect(compressed).To(BeEmpty(), "dualca asks for uncompressed answers")
}
