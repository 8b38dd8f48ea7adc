package syncer

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/bundle"
)

// The issuing Secret (--issuing-secret).
//
// A CA Issuer pointed at the root Secret signs with a new root the moment
// cert-manager rotates it, so a client issued right then gets a leaf the
// gateway does not trust yet. Pointed at the issuing Secret, it signs with
// the root the issuing rule (bundle.Issuing) allows: the current one only
// once the gateway has had the propagation delay to trust it. Its writer
// is dualca's account; it holds the root Secret's own tls.crt, tls.key and
// ca.crt, copied in the reconcile that read and validated them, and lives
// in the root Secret's namespace, so the root's key goes nowhere it was
// not. Nothing read from it reaches a target, a decision or a log line: it
// is only compared with what dualca would write there.

// ReasonIssuingSecretMoved is the event of the issuing Secret moving to
// another root (or being created).
const ReasonIssuingSecretMoved = "IssuingSecretMoved"

// ReasonIssuingSecretTampered is the Warning event of an issuing Secret
// found holding what dualca never writes there, and written over.
const ReasonIssuingSecretTampered = "IssuingSecretTampered"

// issued is what the issuing rule decided and the store did of it; its
// zero value when no issuing Secret is kept.
type issued struct {
	// key names the issuing Secret; "" when there is none.
	key    string
	action bundle.IssuingAction
	// wrote: the issuing Secret was created or updated.
	wrote bool
	// object is the issuing Secret as found (nil when absent), the object
	// its events relate to.
	object client.Object
}

// current reports whether, after the action, it holds the root rootFP.
func (is issued) current(rootFP string) bool { return is.action.Holds == rootFP }

// issuingTarget is the target the issuing Secret is, for the store's
// reads and writes.
func issuingTarget(key types.NamespacedName) target {
	return target{kind: KindSecret, key: key, secretType: corev1.SecretTypeTLS}
}

// syncIssuing applies the issuing rule after d is written to the targets:
// the gateway trusts a root before the issuing Secret signs with it.
func (s *gatewayStore) syncIssuing(ctx context.Context, how reading, d bundle.Decision, root *bundle.Root) (issued, error) {
	if s.issuing == nil {
		return issued{}, nil
	}
	found, err := s.readTarget(ctx, s.issuing, how == retrying)
	if err != nil {
		return issued{}, err
	}
	now := s.clock.Now()
	a := bundle.Issuing(s.issuingFound(found, now), d, root, now)
	out := issued{key: s.issuing.key.String(), action: a, object: found}
	if !a.Write {
		return out, nil
	}
	if out.wrote, err = s.writeTarget(ctx, s.issuing, found, issuingSecretOf(found, s.issuing.key, root)); err != nil {
		return issued{}, err
	}
	return out, nil
}

// issuingFound is the issuing Secret obj (nil: absent) as the rule reads
// it. What ReadIssuing makes of a version does not depend on the time (it
// validates a root within its own dates), so it is read once per
// resourceVersion: the reconciles of a rotation, and the polls, find the
// version dualca wrote or last read, and parse and check no key again.
func (s *gatewayStore) issuingFound(obj client.Object, now time.Time) bundle.IssuingFound {
	if obj == nil {
		return bundle.IssuingFound{}
	}
	if rv := obj.GetResourceVersion(); rv != "" && rv == s.issuingRead.rv {
		return s.issuingRead.found
	}
	data := dataOf(obj)
	found := bundle.ReadIssuing(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey], data[caKey], now)
	s.issuingRead.rv, s.issuingRead.found = obj.GetResourceVersion(), found
	return found
}

// issuingSecretOf is found (nil: absent) made to hold root's credential as
// the root Secret holds it, and nothing else; its labels and annotations
// are kept, they are not dualca's.
func issuingSecretOf(found client.Object, key types.NamespacedName, root *bundle.Root) client.Object {
	out := &corev1.Secret{Type: corev1.SecretTypeTLS}
	if s, ok := found.(*corev1.Secret); ok && s != nil {
		out = s.DeepCopy()
	}
	out.Namespace, out.Name = key.Namespace, key.Name
	out.Data = map[string][]byte{
		corev1.TLSCertKey:       root.CertPEM,
		corev1.TLSPrivateKeyKey: root.KeyPEM,
		caKey:                   root.CAPEM,
	}
	if len(root.CAPEM) == 0 {
		out.Data[caKey] = root.CertPEM
	}
	out.StringData = nil
	out.Labels, out.Annotations = maps.Clone(out.Labels), maps.Clone(out.Annotations)
	return out
}

// issuing tells what the issuing rule did: a Warning when it wrote over
// what dualca never put there, an event when the Secret moved to another
// root, the gauge, and a debug line while it waits.
func (r *reporter) issuing(ctx context.Context, gateway client.Object, is issued, rootFP string) {
	if is.key == "" {
		return
	}
	r.metrics.issuingCurrent.WithLabelValues(is.key).Set(boolGauge(is.current(rootFP)))
	log := logf.FromContext(ctx)
	if !is.wrote {
		if !is.current(rootFP) {
			log.V(1).Info("issuing secret waits", "reason", is.action.Reason)
		}
		return
	}
	if is.action.Tampered {
		r.metrics.tampered.Inc()
	}
	if gateway == nil {
		return
	}
	related := runtime.Object(is.object) // nil when it was created
	if is.action.Tampered {
		r.recorder.Eventf(gateway, related, corev1.EventTypeWarning, ReasonIssuingSecretTampered, "Sync",
			"issuing secret was changed outside dualca: %s", is.action.Reason)
	} else {
		r.recorder.Eventf(gateway, related, corev1.EventTypeNormal, ReasonIssuingSecretMoved, "Sync",
			"issuing secret now signs with root %s: %s", bundle.Short(rootFP), is.action.Reason)
	}
	log.Info("issuing secret written", "root", bundle.Short(is.action.Holds), "tampered", is.action.Tampered, "reason", is.action.Reason)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
