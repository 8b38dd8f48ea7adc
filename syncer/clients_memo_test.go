package syncer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dualca/dualca/test/lib/certs"
)

// TestAWatchedTrackerReadsAsAFreshOneWould: a watched tracker reads again
// only the clients whose Certificate or claim changed since its last read
// and keeps what it made of the others. Through random renewals, requests
// written beside a client's own (the second claim makes neither believed),
// rewritten to claim another client, their removal, status updates of the same request, Issuing flips,
// failures, and Certificates deleted and made again, every read of the
// tracker told of each change equals the read of a fresh tracker told of
// every object as it is then.
func TestAWatchedTrackerReadsAsAFreshOneWould(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	roots := []*certs.CA{certs.MustCA(t, "root", 48*time.Hour), certs.MustCA(t, "root", 48*time.Hour)}
	sel := ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}
	newWatched := func() (*clientTracker, func(*cmapi.CertificateRequest) *cmapi.CertificateRequest) {
		leaves := &requestLeaves{}
		transform := requestTransform(sel, leaves)
		cache := func(cr *cmapi.CertificateRequest) *cmapi.CertificateRequest {
			out, err := transform(cr.DeepCopy())
			g.Expect(err).NotTo(HaveOccurred())
			return out.(*cmapi.CertificateRequest)
		}
		return (&clientTracker{selection: sel, namespaces: []string{"agents"}, leaves: leaves}).watched(), cache
	}
	tracker, cache := newWatched()

	// The objects as the API server holds them, by name.
	crts := map[string]*cmapi.Certificate{}
	requests := map[string]*cmapi.CertificateRequest{}
	version := 0
	next := func() string { version++; return fmt.Sprint(version) }
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	leaf := func(name string) []byte {
		_, pem, _, err := roots[rng.IntN(len(roots))].Leaf(name, now.Add(-time.Hour), now.Add(time.Hour))
		g.Expect(err).NotTo(HaveOccurred())
		return pem
	}
	putCert := func(crt *cmapi.Certificate) {
		crt.ResourceVersion = next()
		crts[crt.Name] = crt
		tracker.changed(crt.DeepCopy(), false)
	}
	putRequest := func(cr *cmapi.CertificateRequest) {
		cr.ResourceVersion = next()
		requests[cr.Name] = cr
		tracker.changed(cache(cr), false)
	}
	deleteRequest := func(name string) {
		tracker.changed(cache(requests[name]), true)
		delete(requests, name)
	}
	ownRequest := func(crt *cmapi.Certificate) string {
		return fmt.Sprintf("%s-%d-%s", crt.Name, *crt.Status.Revision, crt.UID)
	}
	const clients = 12
	for i := range clients {
		crt := clientCert(fmt.Sprintf("agent-%02d", i), ptr.To(1))
		putRequest(request(crt, 1, "", leaf(crt.Name), roots[0].CertPEM))
		putCert(crt)
	}

	summary := func(tr *clientTracker) []string {
		cs, views, err := tr.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, c := range cs.Items {
			v := views[c.Name]
			fp, verified, req := "", false, ""
			if c.Leaf != nil {
				fp, verified = c.Leaf.Fingerprint(), c.Leaf.Verified()
			}
			if v.request != nil {
				req = v.request.Name + "@" + v.request.ResourceVersion
			}
			out = append(out, fmt.Sprintf("%s unknown=%t failed=%t leaf=%s verified=%t ca=%d inFlight=%t problem=%q request=%s",
				c.Name, c.Unknown, c.Failed, fp, verified, len(c.CA), v.inFlight, v.problem, req))
		}
		slices.Sort(out)
		return out
	}
	fresh := func() []string {
		tr, cache := newWatched()
		for _, cr := range requests {
			tr.changed(cache(cr), false)
		}
		for _, crt := range crts {
			tr.changed(crt.DeepCopy(), false)
		}
		return summary(tr)
	}
	check := func(step int, what string) {
		g.Expect(summary(tracker)).To(Equal(fresh()), "step %d: %s", step, what)
	}
	check(0, "the first read")

	names := func() []string {
		var ns []string
		for n := range crts {
			ns = append(ns, n)
		}
		slices.Sort(ns)
		return ns
	}
	gone := 0
	for step := 1; step <= 150; step++ {
		ns := names()
		crt := crts[ns[rng.IntN(len(ns))]].DeepCopy()
		switch op := rng.IntN(8); op {
		case 0: // cert-manager renews it: the next request, the revision, the old request deleted
			old := ownRequest(crt)
			renewed := crt.DeepCopy()
			renewed.Status.Revision = ptr.To(*crt.Status.Revision + 1)
			putRequest(request(crt, *renewed.Status.Revision, "", leaf(crt.Name), roots[rng.IntN(len(roots))].CertPEM))
			check(step, "renewal: the next request made")
			putCert(renewed)
			check(step, "renewal: the revision moved")
			if _, ok := requests[old]; ok {
				deleteRequest(old)
			}
			check(step, "renewal: the old request deleted")
		case 1: // someone else writes a request that claims its current revision
			cr := request(crt, *crt.Status.Revision, "", leaf(crt.Name), roots[0].CertPEM)
			cr.Name, cr.UID = cr.Name+"-forged", cr.UID+"-forged"
			putRequest(cr)
			check(step, "a second request claims its revision")
		case 2: // the forged requests are deleted
			for name := range requests {
				if strings.HasSuffix(name, "-forged") {
					deleteRequest(name)
				}
			}
			check(step, "the forged requests deleted")
		case 3: // cert-manager updates its request's status, the same certificate
			if cr, ok := requests[ownRequest(crt)]; ok {
				cr = cr.DeepCopy()
				cr.Status.Conditions = append(cr.Status.Conditions, cmapi.CertificateRequestCondition{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue})
				putRequest(cr)
			}
			check(step, "its request updated, the same certificate")
		case 4: // Issuing flips
			if issuing(crt) {
				crt.Status.Conditions = nil
			} else {
				crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue}}
			}
			putCert(crt)
			check(step, "Issuing flipped")
		case 5: // an issuance failed, or the failure is over
			if crt.Status.LastFailureTime == nil {
				crt.Status.LastFailureTime = &metav1.Time{Time: now}
			} else {
				crt.Status.LastFailureTime = nil
			}
			putCert(crt)
			check(step, "a failure")
		case 7: // a forged request is rewritten to claim this client's revision instead
			for name, forged := range requests {
				if !strings.HasSuffix(name, "-forged") {
					continue
				}
				moved := request(crt, *crt.Status.Revision, "", forged.Status.Certificate, forged.Status.CA)
				moved.Name, moved.UID = forged.Name, forged.UID
				putRequest(moved)
				break
			}
			check(step, "a forged request's claim moved")
		case 6: // the Certificate is deleted, and made again under a new UID
			tracker.changed(crts[crt.Name], true)
			delete(crts, crt.Name)
			check(step, "the Certificate deleted")
			gone++
			again := clientCert(crt.Name, ptr.To(1))
			again.UID = types.UID(fmt.Sprintf("uid-%s-%d", crt.Name, gone))
			putRequest(request(again, 1, "", leaf(again.Name), roots[0].CertPEM))
			putCert(again)
			check(step, "the Certificate made again")
		}
	}
	g.Expect(len(tracker.memo)).To(Equal(clients), "one entry per client, none of the deleted")
	live := map[types.UID]bool{}
	for _, crt := range crts {
		live[crt.UID] = true
	}
	for uid := range tracker.held {
		g.Expect(live).To(HaveKey(uid), "nothing held of a deleted Certificate")
	}
}
