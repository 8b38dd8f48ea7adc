package syncer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/test/lib/certs"
)

// countingReader counts the lists made through it, by the type listed.
// With transforms, what it lists goes through them, as the client cache
// transforms what it holds.
type countingReader struct {
	client.Reader
	lists      atomic.Int32
	mu         sync.Mutex
	types      map[string]int
	transforms map[client.Object]cache.ByObject
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists.Add(1)
	r.mu.Lock()
	if r.types == nil {
		r.types = map[string]int{}
	}
	r.types[fmt.Sprintf("%T", list)]++
	r.mu.Unlock()
	if err := r.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	for obj, by := range r.transforms {
		switch l := list.(type) {
		case *cmapi.CertificateList:
			if _, ok := obj.(*cmapi.Certificate); ok {
				for i := range l.Items {
					if _, err := by.Transform(&l.Items[i]); err != nil {
						return err
					}
				}
			}
		case *cmapi.CertificateRequestList:
			if _, ok := obj.(*cmapi.CertificateRequest); ok {
				for i := range l.Items {
					if _, err := by.Transform(&l.Items[i]); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

var agentLabels = map[string]string{"app": "agent"}

// agentsIssuer is the issuer of the clients of these tests, as a
// Certificate names it (kind and group left to cert-manager's defaults).
var agentsIssuer = cmmeta.IssuerReference{Name: "agents-ca"}

// clientCert is a Certificate at revision (nil: never issued) that every
// way of selecting clients selects: agentLabels on it and on its Secret,
// issued by agentsIssuer.
func clientCert(name string, revision *int) *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: name, UID: types.UID("uid-" + name), Labels: agentLabels},
		Spec: cmapi.CertificateSpec{SecretName: name + "-tls", IssuerRef: agentsIssuer,
			SecretTemplate: &cmapi.CertificateSecretTemplate{Labels: agentLabels}},
		Status: cmapi.CertificateStatus{Revision: revision},
	}
}

// request is a CertificateRequest as cert-manager makes it for crt at
// revision, controlled by owner (crt's UID unless another is given),
// issued with leaf and ca (PEM; nil: not issued yet).
func request(crt *cmapi.Certificate, revision int, owner types.UID, leaf, ca []byte) *cmapi.CertificateRequest {
	if owner == "" {
		owner = crt.UID
	}
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: crt.Namespace, Name: fmt.Sprintf("%s-%d-%s", crt.Name, revision, owner), Labels: crt.Labels,
			UID:         types.UID(fmt.Sprintf("uid-%s-%s-%d-%s", crt.Namespace, crt.Name, revision, owner)),
			Annotations: map[string]string{cmapi.CertificateNameKey: crt.Name, cmapi.CertificateRequestRevisionAnnotationKey: fmt.Sprint(revision)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cert-manager.io/v1", Kind: "Certificate", Name: crt.Name, UID: owner,
				Controller: ptr.To(true)}}},
		Spec:   cmapi.CertificateRequestSpec{IssuerRef: crt.Spec.IssuerRef},
		Status: cmapi.CertificateRequestStatus{Certificate: leaf, CA: ca},
	}
}

func newTracker(g Gomega, objs ...client.Object) (*clientTracker, *countingReader, client.Client) {
	return newTrackerOf(g, ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}, objs...)
}

// newTrackerOf is a tracker of the clients sel selects in namespace
// agents, reading objs as the client cache holds them: through its
// transforms, the requests' certificates read into the tracker's leaves.
func newTrackerOf(g Gomega, sel ClientSelection, objs ...client.Object) (*clientTracker, *countingReader, client.Client) {
	t, reader, store := newPlainTrackerOf(g, sel, objs...)
	t.leaves = &requestLeaves{}
	reader.transforms = clientCacheOptions(Options{ClientSelector: sel.Labels, ClientSecretSelector: sel.SecretLabels, ClientIssuer: sel.Issuer}, t.leaves).ByObject
	return t, reader, store
}

// newPlainTrackerOf is newTrackerOf reading objs as the API server holds
// them, as `dualca status` does: the requests carry their certificates.
func newPlainTrackerOf(g Gomega, sel ClientSelection, objs ...client.Object) (*clientTracker, *countingReader, client.Client) {
	scheme, err := Scheme()
	g.Expect(err).NotTo(HaveOccurred())
	store := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	reader := &countingReader{Reader: store}
	return &clientTracker{reader: reader, selection: sel, namespaces: []string{"agents"}}, reader, store
}

// requestTransform is the client cache's transform of the
// CertificateRequests of the clients sel selects, reading them into leaves.
func requestTransform(sel ClientSelection, leaves *requestLeaves) func(any) (any, error) {
	for obj, by := range clientCacheOptions(Options{ClientSelector: sel.Labels}, leaves).ByObject {
		if _, ok := obj.(*cmapi.CertificateRequest); ok {
			return by.Transform
		}
	}
	panic("the client cache has no transform of CertificateRequests")
}

// selections are the ways to select the clients of these tests, each
// alone and all together.
func selections() map[string]ClientSelection {
	by := labels.SelectorFromSet(agentLabels)
	issuer := &IssuerRef{Group: "cert-manager.io", Kind: "Issuer", Name: "agents-ca", Namespace: "agents"}
	return map[string]ClientSelection{
		"by label": {Labels: by}, "by Secret label": {SecretLabels: by}, "by issuer": {Issuer: issuer},
		"by all three": {Labels: by, SecretLabels: by, Issuer: issuer},
	}
}

// TestAWatchedTrackerReadsWhatItWasToldAndOnlyAfterAChange: a watched
// tracker never lists the cache: it reads the objects the cache's event
// handlers told it of, and between events returns the last read's result
// (a reconcile at rest costs nothing per client). A tracker nothing tells
// of changes (dualca status) lists at every read.
func TestAWatchedTrackerReadsWhatItWasToldAndOnlyAfterAChange(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	ca := certs.MustCA(t, "root", 48*time.Hour)
	_, leaf1, _, err := ca.Leaf("agent-1", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	leaf2, leaf2PEM, _, err := ca.Leaf("agent-1", now.Add(-time.Minute), now.Add(2*time.Hour))
	g.Expect(err).NotTo(HaveOccurred())

	crt := clientCert("agent-1", ptr.To(1))
	req1 := request(crt, 1, "", leaf1, ca.CertPEM)
	tracker, reader, _ := newTracker(g, crt, req1)
	tracker.watched()
	tracker.changed(crt.DeepCopy(), false)
	tracker.changed(req1.DeepCopy(), false)

	first, views, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(first.Items).To(HaveLen(1))
	g.Expect(views).To(HaveKey("agents/agent-1"))
	g.Expect(reader.lists.Load()).To(BeZero(), "a watched tracker never lists the cache")
	for range 3 {
		again, _, err := tracker.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(&again.Items[0]).To(BeIdenticalTo(&first.Items[0]), "no event, the last read's result")
	}

	// cert-manager issues revision 2: its request, then the revision, then
	// it deletes the request of revision 1.
	crt2 := crt.DeepCopy()
	crt2.Status.Revision = ptr.To(2)
	tracker.changed(request(crt, 2, "", leaf2PEM, ca.CertPEM), false)
	tracker.changed(crt2, false)
	tracker.changed(req1.DeepCopy(), true)
	renewed, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renewed.Items).To(HaveLen(1))
	g.Expect(renewed.Items[0].Leaf.Is(leaf2)).To(BeTrue(), "the read after the events sees the renewed leaf")

	// The Certificate is deleted: no client, nothing remembered of it.
	tracker.changed(crt2, true)
	gone, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gone.Items).To(BeEmpty())
	g.Expect(tracker.held).To(BeEmpty())
	g.Expect(tracker.cas).To(BeEmpty())
	g.Expect(reader.lists.Load()).To(BeZero())

	unwatched := &clientTracker{reader: reader, selection: tracker.selection, namespaces: tracker.namespaces, leaves: tracker.leaves}
	for range 2 {
		cs, _, err := unwatched.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cs.Items).To(HaveLen(1), "the reader still holds revision 1")
	}
	g.Expect(reader.lists.Load()).To(BeEquivalentTo(4), "a tracker told of no change lists at every read")
	g.Expect(reader.types).NotTo(HaveKey("*v1.SecretList"), "no Secret is ever listed")
}

// TestTheTrackerBelievesOnlyTheCertificatesOwnRequest: a client's
// certificates are those of the request of its Certificate's current
// revision that the Certificate controls. What someone who may create
// requests (or Secrets) in a client namespace adds never becomes a
// client's credential, and no Secret is read at all.
func TestTheTrackerBelievesOnlyTheCertificatesOwnRequest(t *testing.T) {
	t.Parallel()
	now := time.Now()
	root := certs.MustCA(t, "root", 48*time.Hour)
	forged := certs.MustCA(t, "root", 48*time.Hour) // the root's subject, another key
	leaf, leafPEM, _, err := root.Leaf("agent", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, forgedPEM, _, err := forged.Leaf("agent", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		leaf    bool // the root's leaf is the client's
		unknown bool
		problem string
	}
	tests := map[string]struct {
		objs func(crt *cmapi.Certificate) []client.Object
		want want
	}{
		"the request of the current revision that the Certificate controls is the client's credential": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{request(crt, 3, "", leafPEM, root.CertPEM)}
			},
			want: want{leaf: true},
		},
		"a request of an older revision says nothing of the current one": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{request(crt, 2, "", leafPEM, root.CertPEM)}
			},
			want: want{unknown: true},
		},
		"a request claiming the revision that the Certificate does not control is not believed": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{request(crt, 3, "uid-someone-else", forgedPEM, forged.CertPEM)}
			},
			want: want{unknown: true},
		},
		"a second request claiming the revision with the Certificate as owner makes the client unknown, with a reason": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				copied := request(crt, 3, "", forgedPEM, forged.CertPEM)
				copied.Name += "-copy"
				return []client.Object{request(crt, 3, "", leafPEM, root.CertPEM), copied}
			},
			want: want{unknown: true, problem: "2 certificate requests claim its revision 3"},
		},
		"a request not issued yet tells nothing": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{request(crt, 3, "", nil, nil)}
			},
			want: want{unknown: true},
		},
		"damaged certificates are a problem and no leaf": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{request(crt, 3, "", []byte("garbage"), root.CertPEM)}
			},
			want: want{problem: "tls.crt: has data before the first PEM block"},
		},
		"a Secret under the client's name, of cert-manager's shape, is never read": {
			objs: func(crt *cmapi.Certificate) []client.Object {
				return []client.Object{&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: crt.Spec.SecretName,
					Labels:      map[string]string{cmapi.PartOfCertManagerControllerLabelKey: "true"},
					Annotations: map[string]string{cmapi.CertificateNameKey: crt.Name}},
					Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": leafPEM, "ca.crt": root.CertPEM}}}
			},
			want: want{unknown: true},
		},
	}
	// Through the client cache (the requests' certificates read as they
	// enter it), and as `dualca status` reads them from the API server.
	trackers := map[string]func(Gomega, ClientSelection, ...client.Object) (*clientTracker, *countingReader, client.Client){
		"cached": newTrackerOf, "plain": newPlainTrackerOf}
	for mode, sel := range selections() {
		for name, tc := range tests {
			for how, newTracker := range trackers {
				t.Run(mode+"/"+how+"/"+name, func(t *testing.T) {
					t.Parallel()
					g := NewWithT(t)
					crt := clientCert("agent", ptr.To(3))
					tracker, reader, _ := newTracker(g, sel, append(tc.objs(crt), crt)...)
					cs, views, err := tracker.read(context.Background())
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(cs.Items).To(HaveLen(1))
					c := cs.Items[0]
					g.Expect(c.Unknown).To(Equal(tc.want.unknown), "unknown")
					if tc.want.leaf {
						g.Expect(c.Leaf).NotTo(BeNil())
						g.Expect(c.Leaf.Is(leaf)).To(BeTrue())
						g.Expect(c.CA).To(HaveLen(1))
						g.Expect(c.CA[0].Equal(root.Cert)).To(BeTrue())
					} else {
						g.Expect(c.Leaf).To(BeNil(), "no leaf believed")
					}
					if tc.want.problem == "" {
						g.Expect(views["agents/agent"].problem).To(BeEmpty())
					} else {
						g.Expect(views["agents/agent"].problem).To(ContainSubstring(tc.want.problem))
					}
					g.Expect(reader.types).To(HaveLen(2))
					g.Expect(reader.types).NotTo(HaveKey("*v1.SecretList"), "no Secret is ever listed")
				})
			}
		}
	}
}

// TestTheTrackerRemembersACredentialWhoseRequestWasCollected: cert-manager
// deletes the request of the current revision once the next is under way
// (revisionHistoryLimit 1); the client still loads that revision's
// certificates until the next is issued, and the tracker says so. Once the
// revision moves on without a request to tell it, the client is unknown;
// a tracker that never saw the request (a restart) knows nothing either.
func TestTheTrackerRemembersACredentialWhoseRequestWasCollected(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	r1 := certs.MustCA(t, "root", 48*time.Hour)
	leaf, leafPEM, _, err := r1.Leaf("agent", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	crt := clientCert("agent", ptr.To(1))
	current := request(crt, 1, "", leafPEM, r1.CertPEM)
	tracker, _, store := newTracker(g, crt, current)

	cs, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items[0].Leaf.Is(leaf)).To(BeTrue())

	// The renewal is under way: revision 2's request exists, unissued,
	// and revision 1's is collected.
	g.Expect(store.Create(ctx, request(crt, 2, "", nil, nil))).To(Succeed())
	g.Expect(store.Delete(ctx, current)).To(Succeed())
	cs, views, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items[0].Unknown).To(BeFalse())
	g.Expect(cs.Items[0].Leaf).NotTo(BeNil(), "revision 1 is still what the client loads")
	g.Expect(cs.Items[0].Leaf.Is(leaf)).To(BeTrue())
	g.Expect(views["agents/agent"].request).To(BeNil())

	restarted := &clientTracker{reader: tracker.reader, selection: tracker.selection, namespaces: tracker.namespaces, leaves: tracker.leaves}
	cs, _, err = restarted.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items[0].Unknown).To(BeTrue(), "a tracker that never saw revision 1's request cannot tell its root")
	g.Expect(cs.Items[0].Leaf).To(BeNil())

	crt.Status.Revision = ptr.To(2)
	g.Expect(store.Update(ctx, crt)).To(Succeed())
	cs, _, err = tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items[0].Unknown).To(BeTrue(), "revision 2 is issued but its request does not show it yet: nothing remembered applies")
}

// TestClientsOfOneCAShareItsParse: the clients of one ca.crt hold the same
// parsed roots, parsed once; a ca.crt no client carries any more is
// forgotten at the next read.
func TestClientsOfOneCAShareItsParse(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	r1, r2 := certs.MustCA(t, "root", 48*time.Hour), certs.MustCA(t, "root", 48*time.Hour)
	var objs []client.Object
	for i := range 3 {
		_, leaf, _, err := r1.Leaf(fmt.Sprint("agent-", i), now.Add(-time.Hour), now.Add(time.Hour))
		g.Expect(err).NotTo(HaveOccurred())
		crt := clientCert(fmt.Sprint("agent-", i), ptr.To(1))
		objs = append(objs, crt, request(crt, 1, "", leaf, bytes.Clone(r1.CertPEM)))
	}
	tracker, _, store := newTracker(g, objs...)
	cs, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items).To(HaveLen(3))
	for _, c := range cs.Items {
		g.Expect(c.CA).To(HaveLen(1))
		g.Expect(c.CA[0]).To(BeIdenticalTo(cs.Items[0].CA[0]), "one parse of the one ca.crt")
		g.Expect(c.Leaf).NotTo(BeNil())
		g.Expect(c.On(r1.Cert, now)).To(BeTrue())
	}
	g.Expect(tracker.cas).To(HaveLen(1))

	// Every client moves to r2's ca.crt: r1's is forgotten.
	for i := range 3 {
		crt := objs[2*i].(*cmapi.Certificate)
		g.Expect(store.Get(ctx, client.ObjectKeyFromObject(crt), crt)).To(Succeed())
		_, leaf, _, err := r2.Leaf(crt.Name, now.Add(-time.Hour), now.Add(time.Hour))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(store.Create(ctx, request(crt, 2, "", leaf, r2.CertPEM))).To(Succeed())
		crt.Status.Revision = ptr.To(2)
		g.Expect(store.Update(ctx, crt)).To(Succeed())
	}
	cs, _, err = tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range cs.Items {
		g.Expect(c.On(r2.Cert, now)).To(BeTrue())
	}
	g.Expect(tracker.cas).To(HaveLen(1), "r1's ca.crt is carried by no client now")
	g.Expect(tracker.cas).To(HaveKey(sha256.Sum256(r2.CertPEM)))
}

// TestManyNewClientsAreParsedAsOneAtATime: past parseAheadAtLeast new
// leaves, a read parses them on every core; what it holds is what a read
// of one client at a time holds: each leaf, each problem, one parse of
// the shared ca.crt, and a later read keeps the same leaves.
func TestManyNewClientsAreParsedAsOneAtATime(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	r1, r2 := certs.MustCA(t, "root", 48*time.Hour), certs.MustCA(t, "root", 48*time.Hour)
	n := parseAheadAtLeast + 6
	var objs []client.Object
	for i := range n {
		name := fmt.Sprintf("agent-%03d", i)
		_, leaf, _, err := r1.Leaf(name, now.Add(-time.Hour), now.Add(time.Hour))
		g.Expect(err).NotTo(HaveOccurred())
		ca := r1.CertPEM
		switch i {
		case 3:
			ca = r2.CertPEM // a leaf its ca.crt did not issue
		case 5:
			leaf = []byte("junk")
		}
		crt := clientCert(name, ptr.To(1))
		objs = append(objs, crt, request(crt, 1, "", leaf, ca))
	}
	read := func(sel *clientTracker) bundle.Clients {
		cs, _, err := sel.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		return cs
	}
	many, _, _ := newTracker(g, objs...)
	all := read(many)
	g.Expect(all.Items).To(HaveLen(n))
	byName := map[string]bundle.Client{}
	for _, c := range all.Items {
		byName[c.Name] = c
	}
	for i := range n {
		c := byName[fmt.Sprintf("agents/agent-%03d", i)]
		switch i {
		case 3:
			g.Expect(c.On(r1.Cert, now)).To(BeFalse(), "its ca.crt does not trust r1")
			g.Expect(c.Uses(r1.Cert, now)).To(BeTrue())
			g.Expect(c.Leaf.Verified()).To(BeFalse(), "no root of its ca.crt verified it: its signature is kept")
		case 5:
			g.Expect(c.Leaf).To(BeNil())
		default:
			g.Expect(c.On(r1.Cert, now)).To(BeTrue(), c.Name)
			g.Expect(c.Leaf.Verified()).To(BeTrue(), "verified by its ca.crt as it was read: no signed bytes kept")
			g.Expect(c.Uses(r2.Cert, now)).To(BeFalse(), "a root of its name and another key")
		}
	}
	g.Expect(many.cas).To(HaveLen(2), "r1's ca.crt parsed once, r2's once")
	problems := map[string]string{}
	for uid, h := range many.held {
		if h.problem != "" {
			problems[string(uid)] = h.problem
		}
	}
	g.Expect(problems).To(Equal(map[string]string{
		"uid-agent-003": "tls.crt: not issued by any certificate of ca.crt",
		"uid-agent-005": "tls.crt: has data before the first PEM block",
	}))

	// One at a time, the same.
	for i := range n {
		one, _, _ := newTracker(g, objs[2*i], objs[2*i+1])
		cs := read(one)
		g.Expect(cs.Items).To(HaveLen(1))
		want := byName[cs.Items[0].Name]
		g.Expect(cs.Items[0].Leaf == nil).To(Equal(want.Leaf == nil))
		if want.Leaf != nil {
			g.Expect(*cs.Items[0].Leaf).To(Equal(*want.Leaf), "the same as read in many")
		}
		for uid, h := range one.held {
			g.Expect(h.problem).To(Equal(problems[string(uid)]), cs.Items[0].Name)
		}
	}

	again := read(many)
	for _, c := range again.Items {
		g.Expect(c.Leaf).To(BeIdenticalTo(byName[c.Name].Leaf), "held leaves are not parsed again")
	}

	// The cache kept no certificate; what it read of them is the leaves
	// as verified, but that of the leaf its ca.crt did not issue.
	g.Expect(many.leaves.byUID).To(HaveLen(n))
	verified := 0
	for _, e := range many.leaves.byUID {
		if e.leaf != nil && e.leaf.Verified() {
			verified++
		}
	}
	g.Expect(verified).To(Equal(n-2), "all but the junk and the leaf of another root")

	// Read from the API server, as `dualca status` reads them: the same.
	plain, _, _ := newPlainTrackerOf(g, many.selection, objs...)
	for _, c := range read(plain).Items {
		want := byName[c.Name]
		g.Expect(c.Leaf == nil).To(Equal(want.Leaf == nil), c.Name)
		if want.Leaf != nil {
			g.Expect(*c.Leaf).To(Equal(*want.Leaf), c.Name)
		}
	}
}

// TestAWriterOfRequestsGainsNothingFromTheClientCache: the client cache
// reads each request's certificate as it enters it (requestLeaves). A
// writer of requests in a client namespace gets nothing read of a request
// that claims no Certificate's revision, nothing kept of one too large or
// damaged but a problem, nothing read again of one rewritten with the same
// certificate, and nothing kept of requests once deleted, even when their
// delete was never seen; the client among them is read as ever.
func TestAWriterOfRequestsGainsNothingFromTheClientCache(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	root := certs.MustCA(t, "root", 48*time.Hour)
	_, leafPEM, _, err := root.Leaf("agent", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	sel := ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}
	leaves := &requestLeaves{}
	transform := requestTransform(sel, leaves)
	clock := now
	tracker := (&clientTracker{selection: sel, namespaces: []string{"agents"}, leaves: leaves, now: func() time.Time { return clock }}).watched()
	cache := func(cr *cmapi.CertificateRequest) *cmapi.CertificateRequest {
		out, err := transform(cr.DeepCopy())
		g.Expect(err).NotTo(HaveOccurred())
		kept := out.(*cmapi.CertificateRequest)
		g.Expect(kept.Status.Certificate).To(BeEmpty(), "the cache keeps no certificate")
		return kept
	}
	agent := clientCert("agent", ptr.To(1))
	own := cache(request(agent, 1, "", leafPEM, root.CertPEM))
	tracker.changed(agent, false)
	tracker.changed(own, false)
	onRoot := func() {
		cs, _, err := tracker.read(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cs.Items).To(HaveLen(1))
		g.Expect(cs.Items[0].On(root.Cert, now)).To(BeTrue(), "the client is read as ever")
	}
	onRoot()

	unclaimed := request(clientCert("x", ptr.To(1)), 1, "", leafPEM, root.CertPEM)
	unclaimed.OwnerReferences = nil
	g.Expect(leaves.of(cache(unclaimed))).To(BeNil(), "a request that claims no revision is not read")

	big := request(clientCert("big", ptr.To(1)), 1, "", bytes.Repeat(leafPEM, bundle.MaxPEMBytes/len(leafPEM)+1), root.CertPEM)
	e := leaves.of(cache(big))
	g.Expect(e).NotTo(BeNil())
	g.Expect(e.leaf).To(BeNil(), "nothing kept of an oversized certificate")
	g.Expect(e.problem).To(ContainSubstring("more than the limit"))

	// Many claimants, rewritten with the same certificate, then deleted.
	const many = 300
	var written []*cmapi.CertificateRequest
	for i := range many {
		cr := request(clientCert(fmt.Sprint("copy-", i), ptr.To(1)), 1, "", leafPEM, root.CertPEM)
		cr.ResourceVersion = "1"
		first := leaves.of(cache(cr))
		g.Expect(first).NotTo(BeNil())
		cr.ResourceVersion = "2"
		g.Expect(leaves.of(cache(cr)).leaf).To(BeIdenticalTo(first.leaf), "the same bytes are not read again")
		written = append(written, cr)
		tracker.changed(cr, false)
	}
	onRoot()
	g.Expect(leaves.byUID).To(HaveLen(many + 2))
	for _, cr := range written {
		tracker.changed(cr, true)
	}
	g.Expect(leaves.byUID).To(HaveLen(2), "deleted requests are forgotten")

	// Deletes never seen (a request deleted while the watch re-listed):
	// what was read of them goes once they have been out of the cache for
	// maxLeafAge; what the cache holds stays.
	for i := range many {
		cache(request(clientCert(fmt.Sprint("lost-", i), ptr.To(1)), 1, "", leafPEM, root.CertPEM))
	}
	onRoot()
	g.Expect(leaves.byUID).To(HaveLen(many+2), "not before maxLeafAge")
	clock = clock.Add(maxLeafAge + time.Second)
	tracker.changed(agent, false) // a read follows a change
	onRoot()
	g.Expect(leaves.byUID).To(HaveLen(1), "the client's own stays")
	g.Expect(leaves.of(own)).NotTo(BeNil())
}

// TestARequestInAnotherNamespaceClaimsNothing: a controller reference
// names no namespace, so a writer of requests in another client namespace
// can copy a client's UID, name and revision. Such a request is no
// claimant: with the client's own request it does not make the client
// unknown, and without it the client is not given its certificates.
func TestARequestInAnotherNamespaceClaimsNothing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Now()
	r1, foreign := certs.MustCA(t, "root", 48*time.Hour), certs.MustCA(t, "root", 48*time.Hour)
	_, own, _, err := r1.Leaf("a", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	_, forged, _, err := foreign.Leaf("a", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	a := clientCert("a", ptr.To(1))
	mine := request(a, 1, "", own, r1.CertPEM)
	copied := request(a, 1, "", forged, foreign.CertPEM)
	copied.Namespace, copied.UID = "elsewhere", "uid-copied" // the API server's UIDs are its own
	tracker, _, store := newTrackerOf(g, ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}, a, mine, copied)
	tracker.namespaces = []string{"agents", "elsewhere"}

	cs, _, err := tracker.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items).To(HaveLen(1))
	g.Expect(cs.Items[0].Unknown).To(BeFalse(), "the copy elsewhere is no second claimant")
	g.Expect(cs.Items[0].On(r1.Cert, now)).To(BeTrue())

	// The client's request is collected, and it was never held by a fresh tracker.
	g.Expect(store.Delete(ctx, mine)).To(Succeed())
	fresh := &clientTracker{reader: tracker.reader, selection: tracker.selection, namespaces: tracker.namespaces, leaves: tracker.leaves}
	cs, _, err = fresh.read(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cs.Items[0].Unknown).To(BeTrue(), "the copy elsewhere is not believed")
	g.Expect(cs.Items[0].Uses(foreign.Cert, now)).To(BeTrue(), "unknown: fail-safe, on every root")
	g.Expect(cs.Items[0].On(foreign.Cert, now)).To(BeFalse())
}

// TestOnlySelectedClientsRequestsAreParsedAhead: requests that claim no
// selected client's revision (a writer of the namespace can create any
// number) are never parsed ahead; they would be parsed again at every
// read, since none is ever held.
func TestOnlySelectedClientsRequestsAreParsedAhead(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	now := time.Now()
	r1 := certs.MustCA(t, "root", 48*time.Hour)
	_, leaf, _, err := r1.Leaf("x", now.Add(-time.Hour), now.Add(time.Hour))
	g.Expect(err).NotTo(HaveOccurred())
	var selected []claimed
	for i := range 2 * parseAheadAtLeast {
		crt := clientCert(fmt.Sprintf("agent-%03d", i), ptr.To(1))
		c := claim{request: request(crt, 1, "", leaf, r1.CertPEM), name: crt.Name, n: 1}
		if i%2 == 0 {
			selected = append(selected, claimed{crt, c})
		}
	}
	tracker := &clientTracker{}
	g.Expect(tracker.parseAhead(selected)).To(HaveLen(parseAheadAtLeast), "the selected clients' requests only")
	g.Expect(tracker.parseAhead(nil)).To(BeEmpty(), "no selected client, nothing parsed")
}

// TestTheClientCacheHoldsWhatObjectsShareOnce: the Certificates and
// requests the client cache keeps hold the label sets, namespaces, issuers
// and conditions' words they have alike as one value each, and each as it
// was; a long value is not shared, and however many distinct values a
// writer gives, the sharing holds a bounded number of them.
//
//nolint:gosec // G103: unsafe only reads where two values' bytes live, to show they are one
func TestTheClientCacheHoldsWhatObjectsShareOnce(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	sel := ClientSelection{Labels: labels.SelectorFromSet(agentLabels)}
	shared := newSharing()
	transform := certificateWhatSelectsOnly(sel, shared)
	cached := func(name, message string) *cmapi.Certificate {
		crt := clientCert(name, ptr.To(1))
		crt.Labels = map[string]string{"app": "agent", "app.kubernetes.io/instance": name}
		crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue,
			Reason: "Ready", Message: message}}
		whole := crt.DeepCopy()
		out, err := transform(crt)
		g.Expect(err).NotTo(HaveOccurred())
		kept := out.(*cmapi.Certificate)
		g.Expect(kept.Status).To(Equal(whole.Status), "the status as it was")
		g.Expect(kept.Labels).To(Equal(map[string]string{"app": "agent"}))
		return kept
	}
	// Each decoded apart, as the cache decodes each object.
	upToDate := func() string { return string([]byte("Certificate is up to date and has not expired")) }
	a, b := cached("a", upToDate()), cached("b", upToDate())
	g.Expect(reflect.ValueOf(a.Labels).UnsafePointer()).To(Equal(reflect.ValueOf(b.Labels).UnsafePointer()), "one label set")
	g.Expect(unsafe.StringData(a.Status.Conditions[0].Message)).To(BeIdenticalTo(unsafe.StringData(b.Status.Conditions[0].Message)), "one message")
	g.Expect(unsafe.StringData(a.Spec.IssuerRef.Name)).To(BeIdenticalTo(unsafe.StringData(b.Spec.IssuerRef.Name)), "one issuer name")

	long := strings.Repeat("x", maxSharedLen+1)
	c, d := cached("c", string([]byte(long))), cached("d", string([]byte(long)))
	g.Expect(c.Status.Conditions[0].Message).To(Equal(long))
	g.Expect(unsafe.StringData(c.Status.Conditions[0].Message)).NotTo(BeIdenticalTo(unsafe.StringData(d.Status.Conditions[0].Message)), "a long value is not shared")

	for i := range 3 * maxSharedValues {
		cached(fmt.Sprint("w-", i), fmt.Sprint("message ", i))
	}
	g.Expect(len(shared.strings.values)).To(BeNumerically("<=", maxSharedValues))
	g.Expect(len(shared.sets.values)).To(BeNumerically("<=", maxSharedValues))

	// The requests' ca.crt alike: one copy, not of a long one.
	ca := []byte("-----BEGIN CERTIFICATE-----")
	g.Expect(unsafe.SliceData(shared.cas.share(bytes.Clone(ca)))).To(BeIdenticalTo(unsafe.SliceData(shared.cas.share(bytes.Clone(ca)))))
	huge := bytes.Repeat([]byte("x"), maxSharedBytes+1)
	g.Expect(shared.cas.share(huge)).To(Equal(huge))
	g.Expect(shared.cas.values).NotTo(HaveKey(string(huge)), "a long ca.crt is not held")
}
