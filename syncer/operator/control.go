package operator

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
	"github.com/dualca/dualca/syncer"
)

// The operator's controls: `dualca pause`, `dualca resume` and `dualca
// promote` patch one annotation of the status ConfigMap (syncer's
// statusmap.go), which the running dualca watches and obeys at once. They need get and
// patch of that one ConfigMap, and nothing on any Secret. They patch
// metadata only, so they never race dualca's publishing, which writes the
// data: the API server applies the patch to whatever version is current.

// ErrNothingToPromote is returned by Promote when the server already
// presents the current root, or dualca has not published one.
var ErrNothingToPromote = errors.New("nothing to promote")

// Pause sets (paused) or removes the pause annotation of the status
// ConfigMap at key, and returns the ConfigMap as patched.
func Pause(ctx context.Context, c typedcorev1.ConfigMapsGetter, key types.NamespacedName, paused bool) (*corev1.ConfigMap, error) {
	var value any // nil: a JSON merge patch removes the annotation
	if paused {
		value = bundle.PausedTrue
	}
	return patchAnnotations(ctx, c, key, "", map[string]any{bundle.AnnotationPaused: value})
}

// Promote asks dualca to switch the server to the current root now. It
// names the root by the fingerprint prefix of the current root in the
// status dualca published, and the patch carries the resourceVersion it
// was read at: if dualca published meanwhile (a newer root, say), the patch
// fails with a conflict instead of promoting a root the operator did not
// see. It returns the prefix.
func Promote(ctx context.Context, c typedcorev1.ConfigMapsGetter, key types.NamespacedName) (string, error) {
	cm, err := c.ConfigMaps(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading status configmap %s: %w", key, err)
	}
	r := syncer.ParseReport(cm.Data[syncer.StatusKey])
	if r == nil {
		return "", fmt.Errorf("%w: configmap %s holds no status dualca published", ErrNothingToPromote, key)
	}
	current, err := promotable(r)
	if err != nil {
		return "", err
	}
	if _, err := patchAnnotations(ctx, c, key, cm.ResourceVersion, map[string]any{bundle.AnnotationPromote: current}); err != nil {
		return "", err
	}
	return current, nil
}

// promotable is the fingerprint prefix of the current root of r, when a
// promote can switch the server to it.
func promotable(r *syncer.Report) (string, error) {
	if r.Strategy != bundle.StrategyZeroDowntime {
		return "", fmt.Errorf("%w: gateway %s is not run by the zero-downtime strategy (strategy %q)", ErrNothingToPromote, r.Gateway, r.Strategy)
	}
	var current *syncer.BundleRoot
	for i, b := range r.Roots {
		if b.Current {
			if current != nil {
				return "", fmt.Errorf("%w: the status names two current roots, %s and %s", ErrNothingToPromote, current.Fingerprint, b.Fingerprint)
			}
			current = &r.Roots[i]
		}
	}
	switch {
	case current == nil:
		return "", fmt.Errorf("%w: the status of gateway %s names no current root", ErrNothingToPromote, r.Gateway)
	case len(current.Fingerprint) != syncer.PromotePrefix || !isHex(current.Fingerprint):
		return "", fmt.Errorf("the status names the current root %q, not a fingerprint prefix", current.Fingerprint)
	case current.Server:
		return "", fmt.Errorf("%w: the server already presents the current root %s", ErrNothingToPromote, current.Fingerprint)
	}
	return current.Fingerprint, nil
}

func isHex(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// patchAnnotations applies a JSON merge patch of annotations to the
// ConfigMap at key, at resourceVersion rv when rv is not "".
func patchAnnotations(ctx context.Context, c typedcorev1.ConfigMapsGetter, key types.NamespacedName, rv string, annotations map[string]any) (*corev1.ConfigMap, error) {
	meta := map[string]any{"annotations": annotations}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, fmt.Errorf("encoding the patch: %w", err)
	}
	cm, err := c.ConfigMaps(key.Namespace).Patch(ctx, key.Name, types.MergePatchType, body, metav1.PatchOptions{})
	switch {
	case apierrors.IsConflict(err):
		return nil, fmt.Errorf("status configmap %s changed while it was read (dualca published a new status): run the command again: %w", key, err)
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("status configmap %s not found: dualca has not published there (is it running, with --status-configmap=%s?): %w", key, key, err)
	case err != nil:
		return nil, fmt.Errorf("patching status configmap %s: %w", key, err)
	}
	return cm, nil
}
