package flags

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dualca/dualca/syncer"
)

// Targets say where, besides or instead of the gateway Secret, the
// rotation is written, and in which shape (see syncer/targets.go).
type Targets struct {
	// GatewayForm is syncer.FormCombined or syncer.FormSplit.
	GatewayForm string
	// BundleTargets hold the trust bundle alone, under BundleKey; those
	// that are Secrets have the type BundleSecretType.
	BundleTargets    []syncer.BundleTarget
	BundleKey        string
	BundleSecretType corev1.SecretType
	// IssuingSecret, when set, is a Secret dualca keeps for the clients'
	// CA Issuer to sign with instead of the root Secret: the root's own
	// credential, moved to a new root only once the gateway trusts it. It
	// must be in the root Secret's namespace, where the root's key already is.
	IssuingSecret types.NamespacedName

	// The flags as given, which parse turns into the fields above.
	bundleTargets, bundleSecretType, issuingSecret string
}

// defaultTargets are the Targets when no flag says otherwise: the combined
// gateway Secret alone.
func defaultTargets() Targets {
	return Targets{GatewayForm: syncer.FormCombined, BundleKey: "ca.crt", BundleSecretType: corev1.SecretTypeOpaque,
		bundleSecretType: string(corev1.SecretTypeOpaque)}
}

// addTargetFlags registers the target flags.
func (t *Targets) addTargetFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.GatewayForm, "gateway-form", t.GatewayForm,
		`How the gateway Secret holds the rotation: "combined" (tls.crt, tls.key and ca.crt in one Secret, Istio's credentialName) or "split" `+
			`(tls.crt and tls.key in it, ca.crt in GATEWAY_NAME-cacert, Istio's other form).`)
	fs.StringVar(&t.bundleTargets, "bundle-targets", t.bundleTargets,
		"Comma-separated objects that hold the trust bundle alone, each secret:NAMESPACE/NAME or configmap:NAMESPACE/NAME, for gateways that serve "+
			"a certificate of their own and check clients against dualca's roots. With them --gateway-secret may be left out: no server credential is written.")
	fs.StringVar(&t.BundleKey, "bundle-key", t.BundleKey, "The key of the bundle in the bundle targets.")
	fs.StringVar(&t.bundleSecretType, "bundle-secret-type", t.bundleSecretType,
		"The type of the bundle targets that are Secrets (e.g. nginx.org/ca for F5 NGINX Ingress).")
	fs.StringVar(&t.issuingSecret, "issuing-secret", t.issuingSecret,
		"A Secret, as NAMESPACE/NAME in the root Secret's namespace, that dualca keeps for the clients' CA Issuer to sign with instead of the root Secret "+
			"(point the Issuer's spec.ca.secretName at it): the root's credential, moved to a new root only once the gateway has had --trust-propagation-delay "+
			"to trust it, so that no client is ever issued a certificate the gateway does not trust yet.")
}

// parse turns the flags as given into the typed fields; the flags it
// could not parse go into malformed.
func (t *Targets) parse(malformed map[string]bool) error {
	var errs []error
	t.BundleTargets = nil
	for raw := range strings.SplitSeq(t.bundleTargets, ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		b, err := ParseBundleTarget(raw)
		if err != nil {
			malformed["bundle-targets"] = true
			errs = append(errs, err)
			continue
		}
		if slices.Contains(t.BundleTargets, b) {
			errs = append(errs, fmt.Errorf("--bundle-targets names %s twice", b))
			continue
		}
		t.BundleTargets = append(t.BundleTargets, b)
	}
	t.BundleSecretType = corev1.SecretType(t.bundleSecretType)
	t.IssuingSecret = types.NamespacedName{}
	if t.issuingSecret != "" {
		key, err := ParseKey("issuing-secret", t.issuingSecret)
		if err != nil {
			malformed["issuing-secret"] = true
			errs = append(errs, err)
		}
		t.IssuingSecret = key
	}
	return errors.Join(errs...)
}

// ParseBundleTarget turns KIND:NAMESPACE/NAME into a bundle target.
func ParseBundleTarget(s string) (syncer.BundleTarget, error) {
	kind, key, ok := strings.Cut(s, ":")
	kind = strings.ToLower(kind)
	if !ok || (kind != syncer.KindSecret && kind != syncer.KindConfigMap) {
		return syncer.BundleTarget{}, fmt.Errorf("--bundle-targets: %q: want secret:NAMESPACE/NAME or configmap:NAMESPACE/NAME", s)
	}
	k, err := ParseKey("bundle-targets", key)
	if err != nil {
		return syncer.BundleTarget{}, err
	}
	return syncer.BundleTarget{Kind: kind, Key: k}, nil
}

// validate checks the targets against each other and against the objects
// dualca reads or keeps, which it must never overwrite.
func (t *Targets) validate(o Objects) error {
	var errs []error
	if t.GatewayForm != syncer.FormCombined && t.GatewayForm != syncer.FormSplit {
		errs = append(errs, fmt.Errorf(`--gateway-form=%q: want "combined" or "split"`, t.GatewayForm))
	}
	if msgs := validation.IsConfigMapKey(t.BundleKey); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--bundle-key=%q: %s", t.BundleKey, strings.Join(msgs, "; ")))
	}
	if err := bundleSecretType(t.BundleSecretType); err != nil {
		errs = append(errs, err)
	}
	secrets := map[types.NamespacedName]string{o.RootSecret: "--root-secret", o.StateSecret: "--state-secret"}
	if o.GatewaySecret.Name != "" {
		secrets[o.GatewaySecret] = "--gateway-secret"
		cacert := types.NamespacedName{Namespace: o.GatewaySecret.Namespace, Name: o.GatewaySecret.Name + "-cacert"}
		if t.GatewayForm == syncer.FormSplit {
			if len(cacert.Name) > validation.DNS1123SubdomainMaxLength {
				errs = append(errs, fmt.Errorf("--gateway-form=split: %s is too long a name for a Secret", cacert))
			}
			if what, taken := secrets[cacert]; taken {
				errs = append(errs, fmt.Errorf("--gateway-form=split writes the bundle to %s, which is %s", cacert, what))
			}
			secrets[cacert] = "the split form's -cacert Secret"
		} else {
			// dualca watches it as a shadow of its own bundle, and tells of it.
			secrets[cacert] = "the Secret Istio would prefer to the combined gateway Secret's bundle (for Istio's split form give --gateway-form=split)"
		}
	}
	if is := t.IssuingSecret; is.Name != "" {
		if what, taken := secrets[is]; taken {
			errs = append(errs, fmt.Errorf("--issuing-secret=%s is %s: the issuing Secret holds the root's credential and nothing else", is, what))
		}
		if o.RootSecret.Name != "" && is.Namespace != o.RootSecret.Namespace {
			errs = append(errs, fmt.Errorf("--issuing-secret=%s must be in the root Secret's namespace %q: it holds the root's private key, which must go nowhere it was not",
				is, o.RootSecret.Namespace))
		}
		secrets[is] = "--issuing-secret"
	}
	for _, b := range t.BundleTargets {
		what, taken := secrets[b.Key]
		if b.Kind == syncer.KindConfigMap {
			what, taken = "--status-configmap", b.Key == o.StatusConfigMap
		}
		if taken {
			errs = append(errs, fmt.Errorf("--bundle-targets: %s is %s: dualca writes only the bundle there", b, what))
		}
	}
	return errors.Join(errs...)
}

// bundleSecretType refuses the types the API server gives required keys
// (kubernetes.io/tls wants tls.crt and tls.key, a bundle target has none).
func bundleSecretType(typ corev1.SecretType) error {
	if typ == corev1.SecretTypeOpaque {
		return nil
	}
	if strings.HasPrefix(string(typ), "kubernetes.io/") {
		return fmt.Errorf("--bundle-secret-type=%q: the API server requires keys of that type that a bundle target does not hold; use Opaque or a gateway's own type", typ)
	}
	if msgs := validation.IsQualifiedName(string(typ)); len(msgs) > 0 {
		return fmt.Errorf("--bundle-secret-type=%q: %s", typ, strings.Join(msgs, "; "))
	}
	return nil
}

// syncRaw sets the string flags from the typed fields.
func (t *Targets) syncRaw() {
	raw := make([]string, len(t.BundleTargets))
	for i, b := range t.BundleTargets {
		raw[i] = b.String()
	}
	t.bundleTargets, t.bundleSecretType = strings.Join(raw, ","), string(t.BundleSecretType)
	t.issuingSecret = ""
	if t.IssuingSecret.Name != "" {
		t.issuingSecret = t.IssuingSecret.String()
	}
}

// anchor is what names the rotation: the gateway Secret, else the first
// bundle target (see syncer.Options.Anchor).
func (o *Options) anchor() types.NamespacedName {
	return syncer.Options{GatewaySecret: o.GatewaySecret, BundleTargets: o.BundleTargets}.Anchor()
}
