package legacy

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// Phase is the phase label of the legacy strategy in dualca's metrics: it
// has no rotation phases.
const Phase = "Legacy"

// Strategy is the legacy strategy as the syncer runs it: Plan, and the
// deletion of the Secrets of clients due for renewal.
type Strategy struct {
	// Reader reads a client's Certificate before its Secret is deleted;
	// uncached, so the check is as fresh as it can be.
	Reader client.Reader
	// Writer deletes client Secrets.
	Writer client.Writer
}

// Name is the strategy's name in annotations, metrics and logs.
func (Strategy) Name() string { return bundle.StrategyLegacy }

// Plan is the package's Plan.
func (Strategy) Plan(gw bundle.Gateway, root *bundle.Root, clients bundle.Clients, now time.Time) bundle.Decision {
	return Plan(gw, root, clients, now)
}

// Phase is the metrics' phase label of every decision: Phase.
func (Strategy) Phase(bundle.Decision) string { return Phase }

// RenewalMethod is the renewals metric's method label.
func (Strategy) RenewalMethod() string { return "secret-deletion" }

// RenewalMessage is the event message telling that clients (say, "3
// clients") were queued for renewal from root, paced at qps.
func (Strategy) RenewalMessage(clients, root string, qps float64) string {
	return fmt.Sprintf("legacy strategy: deleting the secrets of %s not issued by root %s, so cert-manager re-issues them (%.3g/s)",
		clients, root, qps)
}

// Renew deletes the client's Secret, so cert-manager re-issues it; it
// reports whether it deleted it. dualca reads no client Secret: the
// Certificate, read fresh, says whether the Secret still holds the
// credential the decision saw (the same revision, no issuance under way).
// Otherwise cert-manager has replaced it or is replacing it, and deleting
// it would only cost a second re-issuance. A client that held no
// credential has nothing to delete.
func (s Strategy) Renew(ctx context.Context, key types.NamespacedName, revision *int) (bool, error) {
	if revision == nil {
		return false, nil
	}
	crt := &cmapi.Certificate{}
	if err := s.Reader.Get(ctx, key, crt); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading certificate %s: %w", key, err)
	}
	if crt.Status.Revision == nil || *crt.Status.Revision != *revision || issuing(crt) {
		return false, nil
	}
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: crt.Spec.SecretName}}
	err := s.Writer.Delete(ctx, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("deleting client secret %s/%s: %w", key.Namespace, crt.Spec.SecretName, err)
}

// issuing reports whether cert-manager is issuing crt now.
func issuing(crt *cmapi.Certificate) bool {
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing {
			return c.Status == cmmeta.ConditionTrue
		}
	}
	return false
}
