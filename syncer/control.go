package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dualca/dualca/bundle"
)

// The operator's controls: `dualca pause`, `dualca resume` and `dualca
// promote` patch one annotation of the gateway Secret, which the running
// dualca obeys at its next reconcile (the Secret's own watch event starts
// it). They patch metadata only, so they never race dualca's writes of the
// Secret's data: the API server applies the patch to whatever version is
// current, and dualca's next update, made from a read, carries it along.

// ErrNothingToPromote is returned by Promote when the server already
// presents the current root, or dualca has not recorded one.
var ErrNothingToPromote = errors.New("nothing to promote")

// Pause sets (paused) or removes the pause annotation of the gateway
// Secret at key, and returns the Secret as patched.
func Pause(ctx context.Context, c typedcorev1.SecretsGetter, key types.NamespacedName, paused bool) (*corev1.Secret, error) {
	var value any // nil: a JSON merge patch removes the annotation
	if paused {
		value = bundle.PausedTrue
	}
	return patchAnnotations(ctx, c, key, "", map[string]any{bundle.AnnotationPaused: value})
}

// Promote asks dualca to switch the server to the current root now. It
// names the root by the fingerprint the gateway Secret records, and the
// patch carries the resourceVersion it was read at: if the Secret changed
// meanwhile (a newer root), the patch fails with a conflict instead of
// promoting a root the operator did not see. It returns the fingerprint.
func Promote(ctx context.Context, c typedcorev1.SecretsGetter, key types.NamespacedName) (string, error) {
	gw, err := c.Secrets(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading gateway secret %s: %w", key, err)
	}
	st := bundle.ParseState(gw.Annotations)
	switch {
	case st.Strategy != bundle.StrategyZeroDowntime:
		return "", fmt.Errorf("%w: gateway secret %s is not run by the zero-downtime strategy (strategy %q)", ErrNothingToPromote, key, st.Strategy)
	case st.Root == "":
		return "", fmt.Errorf("%w: gateway secret %s records no current root", ErrNothingToPromote, key)
	case st.Server == st.Root:
		return "", fmt.Errorf("%w: the server already presents the current root %s", ErrNothingToPromote, bundle.Short(st.Root))
	}
	if _, err := patchAnnotations(ctx, c, key, gw.ResourceVersion, map[string]any{bundle.AnnotationPromote: st.Root}); err != nil {
		return "", err
	}
	return st.Root, nil
}

// patchAnnotations applies a JSON merge patch of annotations to the
// Secret at key, at resourceVersion rv when rv is not "".
func patchAnnotations(ctx context.Context, c typedcorev1.SecretsGetter, key types.NamespacedName, rv string, annotations map[string]any) (*corev1.Secret, error) {
	meta := map[string]any{"annotations": annotations}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("encoding the patch: %w", err)
	}
	s, err := c.Secrets(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		if apierrors.IsConflict(err) {
			return nil, fmt.Errorf("gateway secret %s changed while it was read (a new root?): run the command again: %w", key, err)
		}
		return nil, fmt.Errorf("patching gateway secret %s: %w", key, err)
	}
	return s, nil
}
