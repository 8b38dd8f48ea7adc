package flags

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cert-manager/cert-manager/pkg/apis/certmanager"
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/dualca/dualca/syncer"
)

// Objects names what dualca looks at: the root Secret, the gateway Secret
// and the client Certificates. Both commands take these flags, parsed and
// validated by the same code.
type Objects struct {
	// RootSecret is the cert-manager CA Secret that dualca follows (read only).
	RootSecret types.NamespacedName
	// GatewaySecret is the Secret dualca owns and the gateway reads.
	GatewaySecret types.NamespacedName
	// ClientSelector selects the client Certificates whose renewal dualca
	// tracks and triggers by their own labels, ClientSecretSelector by the
	// labels of the Secret cert-manager writes (spec.secretTemplate.labels),
	// ClientIssuer by the issuer they name (spec.issuerRef). Every one set
	// must match; none set means clients are not tracked.
	ClientSelector       labels.Selector
	ClientSecretSelector labels.Selector
	ClientIssuer         *syncer.IssuerRef
	// ClientNamespaces are where the client Certificates live (default: the
	// gateway Secret's namespace).
	ClientNamespaces []string
	// StateSecret is dualca's record: the gateway Secret as dualca means it
	// and the roots it read from the root Secret. Only dualca's account may
	// write it (default: DefaultStateSecret of the gateway Secret).
	StateSecret types.NamespacedName
	// StatusConfigMap is the public, key-free status dualca publishes and
	// the operator's controls (pause, promote) it obeys (default:
	// DefaultStatusConfigMap of the gateway and the record).
	StatusConfigMap types.NamespacedName

	// The flags as given, which parse turns into the fields above.
	rootSecret, gatewaySecret, clientSelector, clientNamespaces, stateSecret, statusConfigMap string
	clientSecretSelector, clientIssuer                                                        string
	// gatewayOptional: the rotation is written to bundle targets, so the
	// gateway Secret may be left out.
	gatewayOptional bool
}

// Clients is the client selection the flags make.
func (o *Objects) Clients() syncer.ClientSelection {
	return syncer.ClientSelection{Labels: o.ClientSelector, SecretLabels: o.ClientSecretSelector, Issuer: o.ClientIssuer}
}

// DefaultStateSecret is the record's key when --state-secret is not
// given: beside the gateway Secret, named after it. The chart puts it in
// dualca's own namespace instead, where only dualca's account writes.
func DefaultStateSecret(gateway types.NamespacedName) types.NamespacedName {
	return syncer.DefaultStateSecret(gateway)
}

// DefaultStatusConfigMap is the status ConfigMap's key when
// --status-configmap is not given: in the record's namespace, named after
// the gateway Secret.
func DefaultStatusConfigMap(gateway, state types.NamespacedName) types.NamespacedName {
	return syncer.DefaultStatusConfigMap(gateway, state)
}

// addStateFlags registers --state-secret and --status-configmap.
func (o *Objects) addStateFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.stateSecret, "state-secret", o.stateSecret,
		"dualca's record, as NAMESPACE/NAME: the gateway Secret as dualca means it and the roots it read from the root Secret. "+
			"Put it where only dualca's account can write (default: GATEWAY_NAMESPACE/GATEWAY_NAME-dualca-state).")
	o.addStatusFlag(fs)
}

// addStatusFlag registers --status-configmap.
func (o *Objects) addStatusFlag(fs *flag.FlagSet) {
	fs.StringVar(&o.statusConfigMap, "status-configmap", o.statusConfigMap,
		"The public status and operator controls, a ConfigMap, as NAMESPACE/NAME (default: the record's namespace, GATEWAY_NAME-dualca-status).")
}

func (o *Objects) addSecretFlags(fs *flag.FlagSet, rootHelp, gatewayHelp string) {
	fs.StringVar(&o.rootSecret, "root-secret", o.rootSecret, rootHelp)
	fs.StringVar(&o.gatewaySecret, "gateway-secret", o.gatewaySecret, gatewayHelp)
}

func (o *Objects) addClientFlags(fs *flag.FlagSet, selectorHelp string) {
	fs.StringVar(&o.clientSelector, "client-selector", o.clientSelector, selectorHelp)
	fs.StringVar(&o.clientSecretSelector, "client-secret-selector", o.clientSecretSelector,
		"Label selector of the Secrets cert-manager writes for the client Certificates, matched against each Certificate's spec.secretTemplate.labels "+
			"(no Secret is read). With other client flags, all must match.")
	fs.StringVar(&o.clientIssuer, "client-issuer", o.clientIssuer,
		"The issuer of the client Certificates, ClusterIssuer/NAME or Issuer/NAME (an Issuer in the root Secret's namespace), or KIND.GROUP/NAME: "+
			"every Certificate whose spec.issuerRef names it is a client. It must be the CA issuer of the root Secret, or of --issuing-secret (checked at start). "+
			"With other client flags, all must match.")
	fs.StringVar(&o.clientNamespaces, "client-namespaces", o.clientNamespaces,
		"Comma-separated namespaces of the client Certificates (default: the gateway Secret's namespace).")
}

// parse turns the flags as given into the typed fields, and gives the
// client namespaces their default. It returns the flags it could not
// parse, whose errors it returns too.
func (o *Objects) parse() (map[string]bool, error) {
	malformed := map[string]bool{}
	var errs []error
	note := func(flagName string, err error) {
		if err != nil {
			malformed[flagName] = true
			errs = append(errs, err)
		}
	}
	for _, k := range []struct {
		flag, raw string
		key       *types.NamespacedName
	}{{"root-secret", o.rootSecret, &o.RootSecret}, {"gateway-secret", o.gatewaySecret, &o.GatewaySecret},
		{"state-secret", o.stateSecret, &o.StateSecret}, {"status-configmap", o.statusConfigMap, &o.StatusConfigMap}} {
		if k.raw != "" {
			key, err := ParseKey(k.flag, k.raw)
			note(k.flag, err)
			*k.key = key
		}
	}
	var err error
	for _, s := range []struct {
		flag, raw string
		sel       *labels.Selector
	}{{"client-selector", o.clientSelector, &o.ClientSelector}, {"client-secret-selector", o.clientSecretSelector, &o.ClientSecretSelector}} {
		if s.raw != "" {
			*s.sel, err = ParseSelector(s.flag, s.raw)
			note(s.flag, err)
		}
	}
	if o.clientIssuer != "" {
		o.ClientIssuer, err = ParseIssuer("client-issuer", o.clientIssuer, o.RootSecret.Namespace)
		note("client-issuer", err)
	}
	if o.clientNamespaces != "" {
		o.ClientNamespaces, err = ParseNamespaces("client-namespaces", o.clientNamespaces)
		note("client-namespaces", err)
		if o.clientSelector == "" && o.clientSecretSelector == "" && o.clientIssuer == "" {
			errs = append(errs, errors.New("--client-namespaces needs a client selection (--client-selector, --client-secret-selector or --client-issuer): without one no client is tracked"))
		}
	}
	if len(o.ClientNamespaces) == 0 && o.GatewaySecret.Namespace != "" {
		o.ClientNamespaces = []string{o.GatewaySecret.Namespace}
	}
	o.defaultState()
	return malformed, errors.Join(errs...)
}

// defaultState gives the record and the status ConfigMap their default
// keys, derived from the gateway Secret's, when they were not given.
func (o *Objects) defaultState() {
	if o.GatewaySecret.Name == "" {
		return
	}
	if o.StateSecret.Name == "" {
		o.StateSecret = DefaultStateSecret(o.GatewaySecret)
	}
	if o.StatusConfigMap.Name == "" {
		o.StatusConfigMap = DefaultStatusConfigMap(o.GatewaySecret, o.StateSecret)
	}
}

// validate checks the typed fields; rootRequired says whether the command
// needs the root Secret. A flag in malformed was reported by parse already.
func (o *Objects) validate(rootRequired bool, malformed map[string]bool) error {
	var errs []error
	for _, k := range []struct {
		flag     string
		key      types.NamespacedName
		required bool
	}{
		{"root-secret", o.RootSecret, rootRequired},
		{"gateway-secret", o.GatewaySecret, !o.gatewayOptional},
	} {
		switch {
		case malformed[k.flag]:
		case k.key.Name == "" && k.required:
			errs = append(errs, fmt.Errorf("--%s is required, as NAMESPACE/NAME", k.flag))
		case k.key.Name != "":
			if _, err := ParseKey(k.flag, k.key.String()); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if o.RootSecret.Name != "" && o.RootSecret == o.GatewaySecret {
		errs = append(errs, errors.New("--gateway-secret must differ from --root-secret: dualca never writes the root"))
	}
	for _, k := range []struct {
		flag string
		key  types.NamespacedName
	}{{"state-secret", o.StateSecret}, {"status-configmap", o.StatusConfigMap}} {
		if k.key.Name == "" || malformed[k.flag] {
			continue
		}
		if _, err := ParseKey(k.flag, k.key.String()); err != nil {
			errs = append(errs, fmt.Errorf("%w (a default derived from --gateway-secret too long? give --%s)", err, k.flag))
		}
	}
	if o.StateSecret.Name != "" && (o.StateSecret == o.RootSecret || o.StateSecret == o.GatewaySecret) {
		errs = append(errs, errors.New("--state-secret must differ from --root-secret and --gateway-secret: it is dualca's own record"))
	}
	for _, s := range []struct {
		flag, what string
		sel        labels.Selector
	}{{"client-selector", "client Certificates", o.ClientSelector}, {"client-secret-selector", "client Secrets", o.ClientSecretSelector}} {
		if s.sel != nil && s.sel.Empty() && !malformed[s.flag] {
			errs = append(errs, fmt.Errorf("--%s=%q selects everything; name the label of the %s", s.flag, s.sel.String(), s.what))
		}
	}
	errs = append(errs, o.validateIssuer(malformed))
	if !malformed["client-namespaces"] {
		for _, ns := range o.ClientNamespaces {
			if err := namespace("client-namespaces", ns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// validateIssuer refuses an Issuer (namespaced) that no client namespace
// can name: an Issuer is the root Secret's namespace's, and only
// Certificates there can name it.
func (o *Objects) validateIssuer(malformed map[string]bool) error {
	is := o.ClientIssuer
	if is == nil || malformed["client-issuer"] || is.Namespace == "" {
		return nil
	}
	if !slices.Contains(o.ClientNamespaces, is.Namespace) {
		return fmt.Errorf("--client-issuer=%s: an Issuer is namespaced, and dualca takes the one in the root Secret's namespace %q, which is not among --client-namespaces %v: "+
			"no client could name it (add that namespace, or use a ClusterIssuer)", is, is.Namespace, o.ClientNamespaces)
	}
	return nil
}

// ParseKey turns NAMESPACE/NAME into a key, checking both parts the way the
// API server would, so that a typo fails here and not as a 404 later.
func ParseKey(flagName, s string) (types.NamespacedName, error) {
	if s == "" {
		return types.NamespacedName{}, fmt.Errorf("--%s is required, as NAMESPACE/NAME", flagName)
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: want NAMESPACE/NAME", flagName, s)
	}
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: namespace %q: %s", flagName, s, ns, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("--%s=%q: name %q: %s", flagName, s, name, strings.Join(msgs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// ParseSelector parses a label selector of client Certificates. One that
// selects everything parses, and Validate refuses it.
func ParseSelector(flagName, s string) (labels.Selector, error) {
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--%s=%q: %w", flagName, s, err)
	}
	return sel, nil
}

// ParseIssuer parses KIND/NAME (an issuer of cert-manager.io: Issuer or
// ClusterIssuer) or KIND.GROUP/NAME. rootNamespace is the root Secret's:
// the namespace of a cert-manager Issuer, the only one whose Certificates
// can name it (see syncer.IssuerRef).
func ParseIssuer(flagName, s, rootNamespace string) (*syncer.IssuerRef, error) {
	kindGroup, name, ok := strings.Cut(s, "/")
	if !ok || kindGroup == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--%s=%q: want ClusterIssuer/NAME, Issuer/NAME or KIND.GROUP/NAME", flagName, s)
	}
	kind, group, _ := strings.Cut(kindGroup, ".")
	if group == "" {
		group = certmanager.GroupName
	}
	ref := &syncer.IssuerRef{Group: group, Kind: kind, Name: name}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return nil, fmt.Errorf("--%s=%q: name %q: %s", flagName, s, name, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
		return nil, fmt.Errorf("--%s=%q: group %q: %s", flagName, s, group, strings.Join(msgs, "; "))
	}
	if !kindPattern.MatchString(kind) {
		return nil, fmt.Errorf("--%s=%q: kind %q is not a kind (a capital, then letters and digits)", flagName, s, kind)
	}
	if group == certmanager.GroupName {
		switch kind {
		case cmapi.IssuerKind:
			ref.Namespace = rootNamespace
		case cmapi.ClusterIssuerKind:
		default:
			return nil, fmt.Errorf("--%s=%q: cert-manager.io has kinds Issuer and ClusterIssuer, not %q", flagName, s, kind)
		}
	}
	return ref, nil
}

// kindPattern is what a Kubernetes kind looks like.
var kindPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]{0,62}$`)

// ParseNamespaces parses a comma-separated list of namespaces, spaces
// trimmed, each named once in the order first given.
func ParseNamespaces(flagName, s string) ([]string, error) {
	var out []string
	var errs []error
	for ns := range strings.SplitSeq(s, ",") {
		ns = strings.TrimSpace(ns)
		if err := namespace(flagName, ns); err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, errors.Join(errs...)
}

func namespace(flagName, ns string) error {
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("--%s: namespace %q: %s", flagName, ns, strings.Join(msgs, "; "))
	}
	return nil
}

// keyString is a key as its flag takes it; "" for none.
func keyString(k types.NamespacedName) string {
	if k.Name == "" {
		return ""
	}
	return k.String()
}
