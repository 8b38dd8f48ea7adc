package legacy

import (
	"context"
	"fmt"
	"time"

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

// Renew deletes the client's Secret as it was when found due, so
// cert-manager re-issues it; it reports whether it deleted it. The
// preconditions make it a no-op if cert-manager replaced the Secret
// meanwhile. A client without a Secret has nothing to delete.
func (s Strategy) Renew(ctx context.Context, _ types.NamespacedName, secret *metav1.ObjectMeta) (bool, error) {
	if secret == nil {
		return false, nil
	}
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secret.Namespace, Name: secret.Name}}
	err := s.Writer.Delete(ctx, obj, client.Preconditions{UID: &secret.UID, ResourceVersion: &secret.ResourceVersion})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	}
	return false, fmt.Errorf("deleting client secret %s/%s: %w", secret.Namespace, secret.Name, err)
}
