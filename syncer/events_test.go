package syncer

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

func TestSameReasonTogether(t *testing.T) {
	t.Parallel()
	retired := func(msg string) bundle.Event { return bundle.Event{Reason: bundle.ReasonRootRetired, Message: msg} }
	tests := map[string]struct {
		in, want []bundle.Event
	}{
		"two roots retired at once make one event that names both": {
			in:   []bundle.Event{retired("root R1 retired"), {Reason: bundle.ReasonBundleUpdated, Message: "holds 1 root"}, retired("root R2 retired")},
			want: []bundle.Event{retired("root R1 retired; root R2 retired"), {Reason: bundle.ReasonBundleUpdated, Message: "holds 1 root"}},
		},
		"a Warning and a Normal event of one reason stay apart": {
			in:   []bundle.Event{{Reason: bundle.ReasonBundleUpdated, Message: "a"}, {Warning: true, Reason: bundle.ReasonBundleUpdated, Message: "b"}},
			want: []bundle.Event{{Reason: bundle.ReasonBundleUpdated, Message: "a"}, {Warning: true, Reason: bundle.ReasonBundleUpdated, Message: "b"}},
		},
		"no events, none": {},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			NewWithT(t).Expect(sameReasonTogether(tt.in)).To(Equal(tt.want))
		})
	}
}

// TestALongEventIsCutToWhatTheEventsAPIAccepts: roots retired by the
// dozen make one event whose note would be refused (and the event lost);
// it is cut within the limit, at a character boundary, and a short one
// is left whole.
func TestALongEventIsCutToWhatTheEventsAPIAccepts(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	var many []bundle.Event
	for i := range 40 {
		many = append(many, bundle.Event{Reason: bundle.ReasonRootRetired,
			Message: fmt.Sprintf(`root "bench-root-ca" (%012d) retired: the server and every selected client have moved on — é`, i)})
	}
	joined := sameReasonTogether(many)
	g.Expect(joined).To(HaveLen(1))
	g.Expect(len(joined[0].Message)).To(BeNumerically(">", maxEventNote), "the case that was refused")

	rec := &recordedEvents{}
	r := &reporter{recorder: rec}
	r.event(&corev1.Secret{}, joined[0])
	r.event(&corev1.Secret{}, many[0])
	g.Expect(rec.events).To(HaveLen(2))
	cut := rec.events[0].note
	g.Expect(len(cut)).To(BeNumerically("<=", maxEventNote))
	g.Expect(utf8.ValidString(cut)).To(BeTrue(), "cut at a character boundary")
	g.Expect(cut).To(HaveSuffix(eventCut))
	g.Expect(joined[0].Message).To(HavePrefix(strings.TrimSuffix(cut, eventCut)))
	g.Expect(rec.events[1].note).To(Equal(many[0].Message), "a short note is whole")
}

// TestAMissingRootIsToldOnTheGatewayOnceOneExists: a missing root is told
// on the root Secret when there is one, else on the gateway Secret; with
// neither (a first install whose root is not issued yet) there is nothing
// to tell it on, and it is told once the gateway exists, not forgotten.
// The recorder is handed an object that is there: a nil *Secret is not a
// nil runtime.Object, and client-go's recorder panics on it.
func TestAMissingRootIsToldOnTheGatewayOnceOneExists(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	missing := &bundle.InvalidError{Reason: "root secret ns/root-ca not found"}
	rec := &recordedEvents{}
	var gateway client.Object
	r := &reporter{recorder: rec, gateway: func(context.Context) client.Object { return gateway }}

	g.Expect(r.invalidRoot(ctx, nil, missing)).To(MatchError(missing))
	g.Expect(rec.events).To(BeEmpty(), "neither the root nor the gateway exists: nothing to tell it on")

	gateway = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gateway"}}
	g.Expect(r.invalidRoot(ctx, nil, missing)).To(MatchError(missing))
	g.Expect(rec.events).To(HaveLen(1), "told once the gateway exists")
	g.Expect(rec.events[0].regarding).To(BeIdenticalTo(gateway))
	g.Expect(rec.events[0].reason).To(Equal(bundle.ReasonRootInvalid))
	g.Expect(rec.events[0].note).To(ContainSubstring("not found"))

	g.Expect(r.invalidRoot(ctx, nil, missing)).To(MatchError(missing))
	g.Expect(rec.events).To(HaveLen(1), "the same reason is told once")

	root := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "root-ca"}}
	wrongType := &bundle.InvalidError{Reason: `root secret has type "Opaque", want "kubernetes.io/tls"`}
	g.Expect(r.invalidRoot(ctx, root, wrongType)).To(MatchError(wrongType))
	g.Expect(rec.events).To(HaveLen(2))
	g.Expect(rec.events[1].regarding).To(BeIdenticalTo(root), "a root that exists is what the event is about")
	for _, e := range rec.events {
		g.Expect(e.regarding).NotTo(BeNil())
		g.Expect(reflect.ValueOf(e.regarding).IsNil()).To(BeFalse(), "no event about a nil object")
	}
}
