package gateways

import (
	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// Source is one key of one object: where a file of a gateway comes from.
type Source struct {
	Kind Kind
	Name string
	Key  string
}

// Item is the projected-volume item that writes s as path.
func (s Source) Item(path string) Item {
	return Item{Kind: s.Kind, Name: s.Name, Key: s.Key, Path: path}
}

// Shape is a target shape of dualca: which object and key a gateway reads
// its server certificate, its key and its trust bundle from, given the
// gateway Secret's name, and the flags that make dualca write that shape.
// The server credential and the bundle may live in different objects, even
// of different kinds: adding a shape is adding a value here.
type Shape struct {
	// Name is the shape's name in the report.
	Name string
	// Cert, Key and Bundle locate the server chain, its key and the CA
	// bundle for the gateway Secret called gateway.
	Cert, Key, Bundle func(gateway string) Source
	// Configure sets dualca's flags for the shape on o, whose GatewaySecret
	// is already set; nil sets nothing.
	Configure func(o *flags.Options)
	// Algorithms are the root key algorithms the shape is run with; nil:
	// every one. The shapes after the first differ in where dualca writes,
	// not in what it signs: one algorithm shows them.
	Algorithms []Algorithm
}

// secretKey is a Source function for key of the Secret named by suffixing
// the gateway's name.
func secretKey(suffix, key string) func(string) Source {
	return func(gateway string) Source { return Source{Kind: KindSecret, Name: gateway + suffix, Key: key} }
}

// Combined is Istio's combined credential, the one shape dualca wrote
// first: one kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt.
var Combined = Shape{
	Name:   "combined Secret (tls.crt, tls.key, ca.crt)",
	Cert:   secretKey("", "tls.crt"),
	Key:    secretKey("", "tls.key"),
	Bundle: secretKey("", "ca.crt"),
}

// Split is Istio's split credential: tls.crt and tls.key in the gateway
// Secret, the bundle in "<name>-cacert" beside it.
var Split = Shape{
	Name:       "split Secrets (<name>: tls.crt, tls.key; <name>-cacert: ca.crt)",
	Cert:       secretKey("", "tls.crt"),
	Key:        secretKey("", "tls.key"),
	Bundle:     secretKey("-cacert", "ca.crt"),
	Configure:  func(o *flags.Options) { o.GatewayForm = syncer.FormSplit },
	Algorithms: Algorithms[:1],
}

// bundleTargetName is the name of a shape's bundle target, beside the
// gateway Secret.
const bundleTargetName = "client-ca"

// bundleTarget is a shape whose bundle lives in a bundle target of kind
// (a ConfigMap, or a Secret of type typ) under key: the gateway reads it
// there, as the Gateway API's frontend validation, Envoy Gateway, NGINX
// Gateway Fabric or F5 NGINX Ingress do, and its server credential from
// the combined gateway Secret.
func bundleTarget(name string, kind Kind, typ, key string) Shape {
	return Shape{
		Name:   name,
		Cert:   secretKey("", "tls.crt"),
		Key:    secretKey("", "tls.key"),
		Bundle: func(string) Source { return Source{Kind: kind, Name: bundleTargetName, Key: key} },
		Configure: func(o *flags.Options) {
			k := syncer.KindConfigMap
			if kind == KindSecret {
				k = syncer.KindSecret
			}
			o.BundleTargets = []syncer.BundleTarget{{Kind: k, Key: types.NamespacedName{Namespace: o.GatewaySecret.Namespace, Name: bundleTargetName}}}
			o.BundleKey = key
			if typ != "" {
				o.BundleSecretType = corev1.SecretType(typ)
			}
		},
		Algorithms: Algorithms[:1],
	}
}

// BundleConfigMap has the bundle in a ConfigMap's ca.crt.
var BundleConfigMap = bundleTarget("bundle-ConfigMap (ca.crt alone)", KindConfigMap, "", "ca.crt")

// BundleNginxCA has the bundle in a Secret of type nginx.org/ca, as F5 NGINX
// Ingress wants it.
var BundleNginxCA = bundleTarget("bundle-Secret of type nginx.org/ca (ca.crt alone)", KindSecret, "nginx.org/ca", "ca.crt")

// Shapes are the shapes the suite runs, each through every gateway that
// can read it (Traefik reads client CAs only from Secrets: on a ConfigMap
// bundle it is left out and its rows say n/a). A shape of dualca's is one
// more value here.
var Shapes = []Shape{Combined, Split, BundleConfigMap, BundleNginxCA}

// Algorithm is a root key algorithm cert-manager can make.
type Algorithm struct {
	Name string
	Key  cmapi.PrivateKeyAlgorithm
	Size int
}

// Algorithms are the root keys every scenario is run with.
var Algorithms = []Algorithm{
	{"ECDSA P-256", cmapi.ECDSAKeyAlgorithm, 256},
	{"RSA 2048", cmapi.RSAKeyAlgorithm, 2048},
	{"Ed25519", cmapi.Ed25519KeyAlgorithm, 0},
}
