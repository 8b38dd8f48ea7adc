package cluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// issuerRef names an Issuer in full: without the webhook, cert-manager
// defaults neither kind nor group.
func issuerRef(name string) cmmeta.IssuerReference {
	return cmmeta.IssuerReference{Name: name, Kind: cmapi.IssuerKind, Group: "cert-manager.io"}
}

// ecdsaP256 is the key of every certificate made here. A new key on every
// issuance is cert-manager's default since 1.18; it is spelled out anyway.
func ecdsaP256() *cmapi.CertificatePrivateKey {
	return &cmapi.CertificatePrivateKey{
		Algorithm:      cmapi.ECDSAKeyAlgorithm,
		Size:           256,
		Encoding:       cmapi.PKCS1,
		RotationPolicy: cmapi.RotationPolicyAlways,
	}
}

// RSAKey is an RSA key of size bits, a new one at every issuance, for a
// root made by CreateRootCAWith.
func RSAKey(size int) *cmapi.CertificatePrivateKey {
	return &cmapi.CertificatePrivateKey{Algorithm: cmapi.RSAKeyAlgorithm, Size: size, Encoding: cmapi.PKCS1, RotationPolicy: cmapi.RotationPolicyAlways}
}

// Ed25519Key is an Ed25519 key (PKCS#8, its only form), a new one at every
// issuance, for a root made by CreateRootCAWith.
func Ed25519Key() *cmapi.CertificatePrivateKey {
	return &cmapi.CertificatePrivateKey{Algorithm: cmapi.Ed25519KeyAlgorithm, Encoding: cmapi.PKCS8, RotationPolicy: cmapi.RotationPolicyAlways}
}

// rootHistory is how many of a root's CertificateRequests cert-manager
// keeps: more than a test's rotations in a row.
const rootHistory = 20

// CreateNamespace creates a namespace.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	return c.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// CreateRootCA creates a SelfSigned Issuer <name>-selfsigned and, issued by
// it, a root CA Certificate <name> (ECDSA P-256, Options.RootDuration) whose
// Secret is <name>. It waits until the Certificate is Ready and returns the
// root.
func (c *Cluster) CreateRootCA(ctx context.Context, ns, name string) (*x509.Certificate, error) {
	return c.CreateRootCAWith(ctx, ns, name, ecdsaP256())
}

// CreateRootCAWith is CreateRootCA with the root's key of key
// (spec.privateKey), which every rotation keeps.
func (c *Cluster) CreateRootCAWith(ctx context.Context, ns, name string, key *cmapi.CertificatePrivateKey) (*x509.Certificate, error) {
	selfSigned := name + "-selfsigned"
	issuer := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: selfSigned},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
	if err := c.Client.Create(ctx, issuer); err != nil {
		return nil, err
	}
	root := &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: cmapi.CertificateSpec{
			CommonName: name,
			SecretName: name,
			IsCA:       true,
			Duration:   &metav1.Duration{Duration: c.opts.RootDuration},
			Usages:     []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature},
			PrivateKey: key,
			IssuerRef:  issuerRef(selfSigned),
			// Kept, so that RotateRootThrough finds every root issued.
			RevisionHistoryLimit: ptr.To(int32(rootHistory)),
		},
	}
	if err := c.Client.Create(ctx, root); err != nil {
		return nil, err
	}
	if err := c.WaitReady(ctx, ns, name); err != nil {
		return nil, err
	}
	return c.leaf(ctx, ns, name)
}

// CreateCAIssuer creates a CA Issuer signing with the Secret caSecretName
// and waits until it is Ready.
func (c *Cluster) CreateCAIssuer(ctx context.Context, ns, name, caSecretName string) error {
	issuer := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: caSecretName}}},
	}
	if err := c.Client.Create(ctx, issuer); err != nil {
		return err
	}
	return c.waitIssuerReady(ctx, ns, name)
}

// ClientCertificate is the Certificate that CreateClients creates: a client
// certificate (client auth, digital signature; ECDSA P-256;
// Options.ClientDuration) for common name name, in Secret name, issued by
// the Issuer issuerName. labels go on the Certificate and, through its
// secretTemplate, on the Secret. Create it yourself when cert-manager is
// not expected to make it Ready.
func (c *Cluster) ClientCertificate(ns, issuerName, name string, labels map[string]string) *cmapi.Certificate {
	return &cmapi.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: cmapi.CertificateSpec{
			CommonName:     name,
			SecretName:     name,
			SecretTemplate: &cmapi.CertificateSecretTemplate{Labels: labels},
			Duration:       &metav1.Duration{Duration: c.opts.ClientDuration},
			Usages:         []cmapi.KeyUsage{cmapi.UsageClientAuth, cmapi.UsageDigitalSignature},
			PrivateKey:     ecdsaP256(),
			IssuerRef:      issuerRef(issuerName),
		},
	}
}

// CreateClients creates n ClientCertificates named <prefix>-1 to <prefix>-n
// and waits until all are Ready. It returns their names, which are also
// those of their Secrets.
func (c *Cluster) CreateClients(ctx context.Context, ns, issuerName, prefix string, n int, labels map[string]string) ([]string, error) {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i+1)
		if err := c.Client.Create(ctx, c.ClientCertificate(ns, issuerName, names[i], labels)); err != nil {
			return nil, err
		}
	}
	return names, c.WaitReady(ctx, ns, names...)
}

// Trigger asks cert-manager to issue the Certificate again now, as `cmctl
// renew` does: it sets the Issuing condition to True with reason
// ManuallyTriggered. It does not wait.
func (c *Cluster) Trigger(ctx context.Context, ns, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt := &cmapi.Certificate{}
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, crt); err != nil {
			return err
		}
		if condition(crt, cmapi.CertificateConditionIssuing) == cmmeta.ConditionTrue {
			return fmt.Errorf("certificate %s/%s is already being issued", ns, name)
		}
		now := metav1.Now()
		issuing := cmapi.CertificateCondition{
			Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
			Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered",
			LastTransitionTime: &now, ObservedGeneration: crt.Generation,
		}
		crt.Status.Conditions = append(without(crt.Status.Conditions, cmapi.CertificateConditionIssuing), issuing)
		return c.Client.Status().Update(ctx, crt)
	})
}

// Reissue triggers the Certificate and waits until its Secret holds a new
// certificate and the Certificate is Ready again. It returns the new
// certificate (the first of tls.crt).
func (c *Cluster) Reissue(ctx context.Context, ns, name string) (*x509.Certificate, error) {
	cert, _, err := c.reissue(ctx, ns, name)
	return cert, err
}

// Rotation is what one trigger of a root's Certificate gave.
type Rotation struct {
	// Root is the root its Secret holds once the Certificate settled.
	Root *x509.Certificate
	// Passed are the roots its Secret held on the way, oldest first: none,
	// unless cert-manager issued more than once for the one trigger (its
	// trigger controller can act on a Certificate status a write behind).
	// Each was the root Secret's for a moment, so dualca rightly trusts it.
	Passed []*x509.Certificate
}

// RotateRoot is Reissue for the root made by CreateRootCA: it returns the
// new root, which has a new key. CA Issuers signing with its Secret sign
// with the new root from then on; certificates they issued earlier are not
// renewed by that.
func (c *Cluster) RotateRoot(ctx context.Context, ns, certName string) (*x509.Certificate, error) {
	return c.Reissue(ctx, ns, certName)
}

// RotateRootThrough is RotateRoot that also returns the roots the Secret
// held on the way (Rotation.Passed).
func (c *Cluster) RotateRootThrough(ctx context.Context, ns, certName string) (Rotation, error) {
	root, revisions, err := c.reissue(ctx, ns, certName)
	if err != nil {
		return Rotation{}, err
	}
	r := Rotation{Root: root}
	if revisions.to > revisions.from+1 {
		key := types.NamespacedName{Namespace: ns, Name: certName}
		r.Passed, err = c.issuedBetween(ctx, key, revisions.from, revisions.to)
	}
	return r, err
}

// revisions are a Certificate's status.revision before and after a
// reissue: more than one apart when cert-manager issued more than once.
type revisions struct{ from, to int }

// Reissues is how many issuances beyond the one triggered Reissue and
// RotateRoot have seen so far, for a test to report: cert-manager's, not
// dualca's.
func (c *Cluster) Reissues() int64 { return c.reissues.Load() }

// reissue triggers the Certificate, waits until it is issued and settled,
// and returns its new certificate and its revisions before and after; an
// issuance beyond the one triggered is counted (Reissues).
func (c *Cluster) reissue(ctx context.Context, ns, name string) (*x509.Certificate, revisions, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	crt := &cmapi.Certificate{}
	if err := c.Client.Get(ctx, key, crt); err != nil {
		return nil, revisions{}, err
	}
	revs := revisions{from: revision(crt)}
	before, err := c.tlsCrt(ctx, key)
	if err != nil {
		return nil, revs, err
	}
	if err := c.Trigger(ctx, ns, name); err != nil {
		return nil, revs, err
	}
	err = c.waitFor(ctx, "certificate "+key.String()+" to be reissued", func(ctx context.Context) (bool, string, error) {
		after, err := c.tlsCrt(ctx, key)
		if err != nil || bytes.Equal(after, before) {
			return false, "tls.crt unchanged", err
		}
		return c.settled(ctx, key)
	})
	if err != nil {
		return nil, revs, err
	}
	if err := c.Client.Get(ctx, key, crt); err != nil {
		return nil, revs, err
	}
	if revs.to = revision(crt); revs.to > revs.from+1 {
		c.reissues.Add(int64(revs.to - revs.from - 1))
	}
	cert, err := c.leaf(ctx, ns, name)
	return cert, revs, err
}

// revision is a Certificate's status.revision, 0 before its first issuance.
func revision(crt *cmapi.Certificate) int {
	if crt.Status.Revision == nil {
		return 0
	}
	return *crt.Status.Revision
}

// issuedBetween are the certificates of the Certificate key's issued
// CertificateRequests of revisions after from and before to, in revision
// order, one for each: the Secret held each of them for a moment. The
// requests are there because CreateRootCA keeps a history of rootHistory.
func (c *Cluster) issuedBetween(ctx context.Context, key types.NamespacedName, from, to int) ([]*x509.Certificate, error) {
	crs := &cmapi.CertificateRequestList{}
	if err := c.Client.List(ctx, crs, client.InNamespace(key.Namespace)); err != nil {
		return nil, err
	}
	byRevision := map[int]*x509.Certificate{}
	for _, cr := range crs.Items {
		rev, err := strconv.Atoi(cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
		if err != nil || cr.Annotations[cmapi.CertificateNameKey] != key.Name || rev <= from || rev >= to || len(cr.Status.Certificate) == 0 {
			continue
		}
		certs, err := certutil.ParseCertsPEM(cr.Status.Certificate)
		if err != nil {
			return nil, fmt.Errorf("parsing the certificate of request %s/%s: %w", cr.Namespace, cr.Name, err)
		}
		byRevision[rev] = certs[0]
	}
	var passed []*x509.Certificate
	for rev := from + 1; rev < to; rev++ {
		cert, ok := byRevision[rev]
		if !ok {
			return nil, fmt.Errorf("certificate %s went from revision %d to %d, and no issued request of revision %d is left", key, from, to, rev)
		}
		passed = append(passed, cert)
	}
	return passed, nil
}

// WaitReady waits until each Certificate is Ready for its current
// generation and not being issued.
//
// An issuance that failed is triggered again, up to three times, as an
// operator would with `cmctl renew`: under load cert-manager sometimes fails
// one with "CSR not signed by referenced private key" (its request was made
// from a private key Secret it had just replaced) and would otherwise retry
// only after its backoff of an hour.
func (c *Cluster) WaitReady(ctx context.Context, ns string, names ...string) error {
	for _, name := range names {
		key := types.NamespacedName{Namespace: ns, Name: name}
		retriggered := 0
		if err := c.waitFor(ctx, "certificate "+key.String()+" to be Ready", func(ctx context.Context) (bool, string, error) {
			ok, state, err := c.settled(ctx, key)
			if ok || err != nil || retriggered >= 3 {
				return ok, state, err
			}
			crt := &cmapi.Certificate{}
			if err := c.Client.Get(ctx, key, crt); err != nil {
				return false, state, client.IgnoreNotFound(err)
			}
			if cond := conditionOf(crt, cmapi.CertificateConditionIssuing); cond != nil && cond.Status == cmmeta.ConditionFalse && cond.Reason == "Failed" {
				retriggered++
				c.retriggers.Add(1)
				// A failed trigger (cert-manager got there first) is tried
				// again at the next poll, within the same three.
				_ = c.Trigger(ctx, ns, name)
			}
			return false, state, nil
		}); err != nil {
			// Read with a context of its own: ctx may be what ran out.
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return fmt.Errorf("%w; its story: %s", err, strings.Join(c.Story(sctx, ns, name), "; "))
		}
	}
	return nil
}

// Story is what happened to the Certificate ns/name, oldest first:
// cert-manager's events on it (its reason for each issuance it started,
// the request made for each) and the CertificateRequests it keeps (by
// default the last), with their revisions. It tells why a Certificate was
// issued more often than asked, or not at all.
func (c *Cluster) Story(ctx context.Context, ns, name string) []string {
	var out []string
	var events corev1.EventList
	if err := c.Client.List(ctx, &events, client.InNamespace(ns), client.MatchingFields{"involvedObject.name": name}); err != nil {
		return []string{"events: " + err.Error()}
	}
	for _, e := range events.Items {
		out = append(out, fmt.Sprintf("%s event %s %s (x%d): %s", e.FirstTimestamp.UTC().Format(time.StampMilli), e.InvolvedObject.Kind, e.Reason, e.Count, e.Message))
	}
	var crs cmapi.CertificateRequestList
	if err := c.Client.List(ctx, &crs, client.InNamespace(ns)); err != nil {
		return append(out, "requests: "+err.Error())
	}
	for _, cr := range crs.Items {
		if cr.Annotations[cmapi.CertificateNameKey] == name {
			out = append(out, fmt.Sprintf("%s request %s revision %s", cr.CreationTimestamp.UTC().Format(time.StampMilli), cr.Name, cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey]))
		}
	}
	slices.Sort(out)
	return out
}

// Retriggers is how many failed issuances WaitReady has triggered again so
// far, for a test to report: each is cert-manager failing, not dualca.
func (c *Cluster) Retriggers() int64 { return c.retriggers.Load() }

// settled is whether a Certificate is Ready, for its current generation, and
// not being issued; the state is a summary of its conditions.
func (c *Cluster) settled(ctx context.Context, key types.NamespacedName) (bool, string, error) {
	crt := &cmapi.Certificate{}
	if err := c.Client.Get(ctx, key, crt); err != nil {
		return false, "", client.IgnoreNotFound(err)
	}
	var state []string
	ready := false
	for _, cond := range crt.Status.Conditions {
		state = append(state, fmt.Sprintf("%s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message))
		if cond.Type == cmapi.CertificateConditionReady {
			ready = cond.Status == cmmeta.ConditionTrue && cond.ObservedGeneration == crt.Generation
		}
	}
	issuing := condition(crt, cmapi.CertificateConditionIssuing) == cmmeta.ConditionTrue
	return ready && !issuing, strings.Join(state, ", "), nil
}

// waitIssuerReady waits until an Issuer is Ready for its current generation.
func (c *Cluster) waitIssuerReady(ctx context.Context, ns, name string) error {
	key := types.NamespacedName{Namespace: ns, Name: name}
	return c.waitFor(ctx, "issuer "+key.String()+" to be Ready", func(ctx context.Context) (bool, string, error) {
		issuer := &cmapi.Issuer{}
		if err := c.Client.Get(ctx, key, issuer); err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		for _, cond := range issuer.Status.Conditions {
			if cond.Type == cmapi.IssuerConditionReady {
				ok := cond.Status == cmmeta.ConditionTrue && cond.ObservedGeneration == issuer.Generation
				return ok, fmt.Sprintf("Ready=%s (%s: %s)", cond.Status, cond.Reason, cond.Message), nil
			}
		}
		return false, "no Ready condition", nil
	})
}

// probe creates a SelfSigned Issuer, waits until cert-manager makes it
// Ready, and deletes it.
func (c *Cluster) probe(ctx context.Context, name string) error {
	issuer := &cmapi.Issuer{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name},
		Spec:       cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
	}
	if err := c.Client.Create(ctx, issuer); err != nil {
		return err
	}
	if err := c.waitIssuerReady(ctx, metav1.NamespaceDefault, name); err != nil {
		return err
	}
	return c.Client.Delete(ctx, issuer)
}

// waitFor polls done until it holds, Options.Timeout passes or cert-manager
// exits. done also reports the state it saw, for the error on timeout.
func (c *Cluster) waitFor(ctx context.Context, what string, done func(context.Context) (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	last := "nothing yet"
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.exited(); err != nil {
			return false, err
		}
		ok, state, err := done(ctx)
		if state != "" {
			last = state
		}
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("waiting for %s (last seen: %s): %w", what, last, err)
	}
	return nil
}

// tlsCrt is the tls.crt of a Secret, nil if there is none yet.
func (c *Cluster) tlsCrt(ctx context.Context, key types.NamespacedName) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := c.Client.Get(ctx, key, secret); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	return secret.Data[corev1.TLSCertKey], nil
}

// leaf is the first certificate in the tls.crt of a Secret.
func (c *Cluster) leaf(ctx context.Context, ns, name string) (*x509.Certificate, error) {
	pemBytes, err := c.tlsCrt(ctx, types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		return nil, err
	}
	certs, err := certutil.ParseCertsPEM(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parsing tls.crt of secret %s/%s: %w", ns, name, err)
	}
	return certs[0], nil
}

// condition is the status of a Certificate's condition, "" if absent.
func condition(crt *cmapi.Certificate, t cmapi.CertificateConditionType) cmmeta.ConditionStatus {
	if cond := conditionOf(crt, t); cond != nil {
		return cond.Status
	}
	return ""
}

// conditionOf is crt's condition of type t, or nil.
func conditionOf(crt *cmapi.Certificate, t cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i := range crt.Status.Conditions {
		if crt.Status.Conditions[i].Type == t {
			return &crt.Status.Conditions[i]
		}
	}
	return nil
}

// without is conditions without those of type t.
func without(conditions []cmapi.CertificateCondition, t cmapi.CertificateConditionType) []cmapi.CertificateCondition {
	var kept []cmapi.CertificateCondition
	for _, cond := range conditions {
		if cond.Type != t {
			kept = append(kept, cond)
		}
	}
	return kept
}
