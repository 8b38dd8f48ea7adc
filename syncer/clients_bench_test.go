package syncer

import (
	"context"
	"fmt"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/dualca/dualca/test/lib/certs"
)

// BenchmarkAReadAfterOneChange is what a reconcile pays to read its
// clients during a renewal fan-out: a watched tracker of n clients, each
// issued through the client cache's transforms, is told of one changed
// Certificate and read again. The figure is per read.
func BenchmarkAReadAfterOneChange(b *testing.B) {
	for _, n := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			ctx := context.Background()
			now := time.Now()
			root := certs.MustCA(b, "root", 48*time.Hour)
			_, leaf, _, err := root.Leaf("agent", now.Add(-time.Hour), now.Add(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			sel := ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}
			leaves := &requestLeaves{}
			transform := requestTransform(sel, leaves)
			tracker := (&clientTracker{selection: sel, namespaces: []string{"agents"}, leaves: leaves}).watched()
			crts := make([]*cmapi.Certificate, n)
			for i := range n {
				crts[i] = clientCert(fmt.Sprintf("agent-%05d", i), ptr.To(1))
				crts[i].ResourceVersion = "1"
				cr := request(crts[i], 1, "", leaf, root.CertPEM)
				cr.ResourceVersion = "1"
				kept, err := transform(cr)
				if err != nil {
					b.Fatal(err)
				}
				tracker.changed(crts[i], false)
				tracker.changed(kept.(*cmapi.CertificateRequest), false)
			}
			if cs, _, err := tracker.read(ctx); err != nil || len(cs.Items) != n {
				b.Fatalf("read %d clients (%v), want %d", len(cs.Items), err, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// cert-manager marks one client Issuing: a new version of
				// its Certificate, as a fan-out's triggers make them.
				changed := crts[i%n].DeepCopy()
				changed.ResourceVersion = fmt.Sprint(i + 2)
				changed.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: "True"}}
				tracker.changed(changed, false)
				cs, views, err := tracker.read(ctx)
				if err != nil || len(cs.Items) != n || !views[changed.Namespace+"/"+changed.Name].inFlight {
					b.Fatalf("read %d clients (%v), want %d with the change seen", len(cs.Items), err, n)
				}
			}
		})
	}
}
