package legacy_test

import (
	"context"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dualca/dualca/legacy"
)

// TestRenewDeletesTheSecretOnlyWhileItHoldsWhatTheDecisionSaw: dualca
// reads no client Secret, so the Certificate, read fresh, says whether the
// Secret still holds the revision the decision saw; a Secret cert-manager
// replaced or is replacing is left alone.
func TestRenewDeletesTheSecretOnlyWhileItHoldsWhatTheDecisionSaw(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		revision *int // the Certificate's current revision
		issuing  bool
		seen     *int // what the decision saw
		deleted  bool
	}{
		"the revision the decision saw, no issuance under way: deleted": {revision: ptr.To(4), seen: ptr.To(4), deleted: true},
		"cert-manager issued a newer revision meanwhile: kept":          {revision: ptr.To(5), seen: ptr.To(4)},
		"cert-manager is issuing it: kept":                              {revision: ptr.To(4), issuing: true, seen: ptr.To(4)},
		"the decision saw no credential: nothing to delete":             {revision: ptr.To(4), seen: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			ctx := context.Background()
			scheme := runtime.NewScheme()
			g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
			g.Expect(cmapi.AddToScheme(scheme)).To(Succeed())
			crt := &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent"},
				Spec: cmapi.CertificateSpec{SecretName: "agent-tls"}, Status: cmapi.CertificateStatus{Revision: tc.revision}}
			if tc.issuing {
				crt.Status.Conditions = []cmapi.CertificateCondition{{Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
					LastTransitionTime: &metav1.Time{Time: time.Now()}}}
			}
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent-tls"}}
			other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: "agent"}}
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(crt, secret, other).Build()
			s := legacy.Strategy{Reader: c, Writer: c}

			acted, err := s.Renew(ctx, types.NamespacedName{Namespace: "agents", Name: "agent"}, tc.seen)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(acted).To(Equal(tc.deleted))
			err = c.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{})
			if tc.deleted {
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the Certificate's secretName is deleted")
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{})).To(Succeed(), "only spec.secretName")
		})
	}
}
