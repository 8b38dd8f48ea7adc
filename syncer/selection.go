package syncer

import (
	"context"
	"errors"
	"fmt"

	"github.com/cert-manager/cert-manager/pkg/apis/certmanager"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Client selection.
//
// An operator names its clients the way it labels them: by the
// Certificate's own labels (--client-selector), by the labels cert-manager
// puts on the Secret it writes, which are the Certificate's
// spec.secretTemplate.labels (--client-secret-selector: dualca reads the
// template, never the Secret), or by the issuer that signs them
// (--client-issuer). Each works alone; given together, a Certificate is a
// client only if all of them match.
//
// Selection decides only which Certificates dualca follows and triggers.
// A writer of a client namespace controls all three (labels, template,
// issuerRef), so it can always make its Certificate a client, or stop
// being one: what that buys it is the delay a client can always cause (a
// root kept, a switch held until the grace period). Trust does not depend
// on it: a root enters the bundle only if dualca read it from the root
// Secret (bundle/provenance.go), whatever a client's request carries.

// IssuerRef names the issuer that selects clients (--client-issuer), with
// cert-manager's defaulting applied: Kind and Group are never empty.
type IssuerRef struct {
	Group, Kind, Name string
	// Namespace is the only namespace whose Certificates can name the
	// issuer: the root Secret's for a cert-manager Issuer (an Issuer is
	// namespaced, and a CA Issuer reads its Secret from its own namespace,
	// so an Issuer of that name elsewhere signs with another Secret); ""
	// for a ClusterIssuer, or an issuer of another group, which is matched
	// in every client namespace.
	Namespace string
}

// String is the issuer as --client-issuer takes it.
func (r IssuerRef) String() string {
	if r.Group == certmanager.GroupName {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "." + r.Group + "/" + r.Name
}

// certManagers reports whether r is one of cert-manager's own kinds,
// whose shape dualca knows and checks.
func (r IssuerRef) certManagers() bool {
	return r.Group == certmanager.GroupName && (r.Kind == cmapi.IssuerKind || r.Kind == cmapi.ClusterIssuerKind)
}

// names reports whether ref, as written in an object of namespace ns,
// names r, defaulted as cert-manager defaults it: an empty kind is an
// Issuer, an empty group cert-manager.io.
func (r IssuerRef) names(ns string, ref cmmeta.IssuerReference) bool {
	kind, group := ref.Kind, ref.Group
	if kind == "" {
		kind = cmapi.IssuerKind
	}
	if group == "" {
		group = certmanager.GroupName
	}
	return ref.Name == r.Name && kind == r.Kind && group == r.Group && (r.Namespace == "" || ns == r.Namespace)
}

// ClientSelection says which Certificates of the client namespaces are
// dualca's clients. Every part given must match; none given: clients are
// not tracked.
type ClientSelection struct {
	// Labels matches the Certificate's labels (--client-selector). The
	// caches filter by it on the API server: cert-manager copies a
	// Certificate's labels onto its requests.
	Labels labels.Selector
	// SecretLabels matches spec.secretTemplate.labels, the labels of the
	// Secret cert-manager writes (--client-secret-selector).
	SecretLabels labels.Selector
	// Issuer matches spec.issuerRef (--client-issuer).
	Issuer *IssuerRef
}

// Tracked reports whether clients are tracked at all.
func (s ClientSelection) Tracked() bool {
	return s.Labels != nil || s.SecretLabels != nil || s.Issuer != nil
}

// selects reports whether crt is a client.
func (s ClientSelection) selects(crt *cmapi.Certificate) bool {
	if !s.Tracked() {
		return false
	}
	if s.Labels != nil && !s.Labels.Matches(labels.Set(crt.Labels)) {
		return false
	}
	if s.SecretLabels != nil {
		var l map[string]string
		if crt.Spec.SecretTemplate != nil {
			l = crt.Spec.SecretTemplate.Labels
		}
		if !s.SecretLabels.Matches(labels.Set(l)) {
			return false
		}
	}
	return s.Issuer == nil || s.Issuer.names(crt.Namespace, crt.Spec.IssuerRef)
}

// String describes the selection for logs.
func (s ClientSelection) String() string {
	out := ""
	add := func(k, v string) {
		if out != "" {
			out += ", "
		}
		out += k + "=" + v
	}
	if s.Labels != nil {
		add("labels", s.Labels.String())
	}
	if s.SecretLabels != nil {
		add("secretLabels", s.SecretLabels.String())
	}
	if s.Issuer != nil {
		add("issuer", s.Issuer.String())
	}
	return out
}

// ErrIssuerNotOfTheRoot says the issuer that selects clients does not sign
// with the root Secret: its clients would never move to dualca's roots.
var ErrIssuerNotOfTheRoot = errors.New("the client issuer does not sign with the root secret")

// checkIssuer reads the issuer that selects clients and refuses one that
// is not a CA issuer of the root Secret's name, or of the issuing Secret's
// (issuingSecret, beside the root; its zero value when there is none): every
// rotation would then wait for clients that never come to the new root,
// and the switch for the grace period. An issuer not found yet (created after dualca) is only
// logged, and so is one of another group, whose shape dualca cannot tell.
// A ClusterIssuer reads its Secret from cert-manager's cluster resource
// namespace, which dualca cannot see: the name is checked, the namespace
// is the operator's to keep the root Secret's.
func checkIssuer(ctx context.Context, api client.Reader, issuer IssuerRef, root, issuingSecret types.NamespacedName, log logr.Logger) error {
	if !issuer.certManagers() {
		log.Info("the client issuer is not cert-manager's own: dualca cannot check that it signs with the root secret", "issuer", issuer.String())
		return nil
	}
	var spec cmapi.IssuerSpec
	var err error
	if issuer.Kind == cmapi.ClusterIssuerKind {
		ci := &cmapi.ClusterIssuer{}
		err = api.Get(ctx, types.NamespacedName{Name: issuer.Name}, ci)
		spec = ci.Spec
	} else {
		is := &cmapi.Issuer{}
		err = api.Get(ctx, types.NamespacedName{Namespace: issuer.Namespace, Name: issuer.Name}, is)
		spec = is.Spec
	}
	where := issuer.String()
	if issuer.Namespace != "" {
		where += " in namespace " + issuer.Namespace
	}
	switch {
	case apierrors.IsNotFound(err):
		log.Info("the client issuer does not exist (yet): its Certificates cannot be issued until it does", "issuer", where)
		return nil
	case err != nil:
		return fmt.Errorf("reading the client issuer %s (dualca needs get on it): %w", where, err)
	}
	want := fmt.Sprintf("the root secret %q", root.Name)
	if issuingSecret.Name != "" {
		want += fmt.Sprintf(" or the issuing secret %q", issuingSecret.Name)
	}
	switch {
	case spec.CA == nil:
		return fmt.Errorf("%w: %s is not a CA issuer; name the issuer whose spec.ca.secretName is %s", ErrIssuerNotOfTheRoot, where, want)
	case spec.CA.SecretName != root.Name && (issuingSecret.Name == "" || spec.CA.SecretName != issuingSecret.Name):
		return fmt.Errorf("%w: %s signs with secret %q, not %s", ErrIssuerNotOfTheRoot, where, spec.CA.SecretName, want)
	}
	return nil
}
