// Package issuance writes what cert-manager writes when it issues a
// Certificate, for the tests and the benchmark that fabricate issued clients
// without a running cert-manager.
//
// dualca learns a client's credential from the CertificateRequest of the
// Certificate's current revision, not from the client's Secret, so a
// fabricated client must be the whole of what cert-manager leaves behind,
// in cert-manager's order: the request, its status, the Secret, the
// Certificate's status.revision, and the older requests garbage-collected.
// Writing any part of it by hand elsewhere makes a test pass against a world
// cert-manager never makes; this package is the one place that knows the
// shape, so that it changes in one place when cert-manager's does.
//
// A first issuance is four writes and no read: the benchmark fabricates
// tens of thousands of clients through it. A re-issue reads the Secret
// before it updates it, and past the revision history limit lists the
// Certificate's requests and deletes the older ones.
package issuance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strconv"
	"sync"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// certificateGVK is what cert-manager's request manager names the
// Certificate in each request's controller reference.
var certificateGVK = cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind)

// Messages cert-manager writes with the conditions Issue sets, so that a
// fabricated object reads like one cert-manager wrote.
const (
	approvedReason  = "cert-manager.io"
	approvedMessage = "Certificate request has been approved by cert-manager.io"
	issuedMessage   = "Certificate fetched from issuer successfully"
	readyReason     = "Ready"
	readyMessage    = "Certificate is up to date and has not expired"
)

// RequestName is the name cert-manager gives the CertificateRequest of
// revision of the Certificate crtName (its StableCertificateRequestName
// naming, on by default; names longer than 233 characters, which cert-manager
// hashes, are not supported here).
func RequestName(crtName string, revision int) string {
	return crtName + "-" + strconv.Itoa(revision)
}

// Issue issues the Certificate crt, as cert-manager would, with the
// credential given: leafPEM (the leaf first, maybe its chain) as tls.crt and
// the request's status.certificate, keyPEM as tls.key, caPEM as ca.crt and
// the request's status.ca. crt must exist (its UID goes into the request's
// controller reference); its status.revision N (none: 0) says which
// revision is next, N+1. On success crt holds the Certificate as last
// written.
//
// It writes, in cert-manager's order: the CertificateRequest RequestName(crt,
// N+1) with its status (approved, Ready=True, Issued) through the status
// subresource; the Secret crt.spec.secretName, created or updated; crt's
// status (revision N+1, Ready, no Issuing condition, the leaf's validity);
// then it deletes crt's requests of older revisions beyond
// crt.spec.revisionHistoryLimit (default 1). Nothing is checked about the
// PEM given, so that bad-input tests can issue damaged credentials.
func Issue(ctx context.Context, c client.Client, crt *cmapi.Certificate, leafPEM, keyPEM, caPEM []byte) error {
	if crt.UID == "" {
		return fmt.Errorf("issue %s/%s: the Certificate has no UID: create it first", crt.Namespace, crt.Name)
	}
	csr, err := request()
	if err != nil {
		return fmt.Errorf("issue %s/%s: %w", crt.Namespace, crt.Name, err)
	}
	revision := 1
	if crt.Status.Revision != nil {
		revision = *crt.Status.Revision + 1
	}
	cr := newRequest(crt, revision, csr)
	if err := c.Create(ctx, cr); err != nil {
		return fmt.Errorf("issue %s/%s: creating its request: %w", crt.Namespace, crt.Name, err)
	}
	now := metav1.Now()
	cr.Status = cmapi.CertificateRequestStatus{
		Certificate: leafPEM,
		CA:          caPEM,
		Conditions: []cmapi.CertificateRequestCondition{
			{Type: cmapi.CertificateRequestConditionApproved, Status: cmmeta.ConditionTrue, Reason: approvedReason, Message: approvedMessage, LastTransitionTime: &now},
			{Type: cmapi.CertificateRequestConditionReady, Status: cmmeta.ConditionTrue, Reason: cmapi.CertificateRequestReasonIssued, Message: issuedMessage, LastTransitionTime: &now},
		},
	}
	if err := c.Status().Update(ctx, cr); err != nil {
		return fmt.Errorf("issue %s/%s: writing its request's status: %w", crt.Namespace, crt.Name, err)
	}
	if err := writeSecret(ctx, c, crt, leafPEM, keyPEM, caPEM); err != nil {
		return fmt.Errorf("issue %s/%s: writing its Secret: %w", crt.Namespace, crt.Name, err)
	}
	if err := setRevision(ctx, c, crt, revision, leafPEM); err != nil {
		return fmt.Errorf("issue %s/%s: writing its status: %w", crt.Namespace, crt.Name, err)
	}
	if err := deleteOlder(ctx, c, crt, revision); err != nil {
		return fmt.Errorf("issue %s/%s: deleting its older requests: %w", crt.Namespace, crt.Name, err)
	}
	return nil
}

// newRequest is the CertificateRequest of revision of crt as cert-manager's
// request manager creates it: crt's labels (which is how a label selector
// of Certificates also selects their requests), the three annotations that
// tie it to crt and its revision, crt as its controller.
func newRequest(crt *cmapi.Certificate, revision int, csr []byte) *cmapi.CertificateRequest {
	keySecret := crt.Name + "-" + utilrand.String(5) // the keymanager's generated name
	if crt.Status.NextPrivateKeySecretName != nil {
		keySecret = *crt.Status.NextPrivateKeySecretName
	}
	return &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: crt.Namespace,
			Name:      RequestName(crt.Name, revision),
			Labels:    crt.Labels,
			Annotations: map[string]string{
				cmapi.CertificateNameKey:                        crt.Name,
				cmapi.CertificateRequestRevisionAnnotationKey:   strconv.Itoa(revision),
				cmapi.CertificateRequestPrivateKeyAnnotationKey: keySecret,
			},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(crt, certificateGVK)},
		},
		Spec: cmapi.CertificateRequestSpec{
			Duration:  crt.Spec.Duration,
			IssuerRef: crt.Spec.IssuerRef,
			Request:   csr,
			IsCA:      crt.Spec.IsCA,
			Usages:    crt.Spec.Usages,
		},
	}
}

// writeSecret creates or updates crt's Secret as cert-manager's issuing
// controller does. It tries the create first: a fabricated client's Secret
// is new far more often than not, and a create costs one request where a
// read then a write costs two.
func writeSecret(ctx context.Context, c client.Client, crt *cmapi.Certificate, leafPEM, keyPEM, caPEM []byte) error {
	data := map[string][]byte{corev1.TLSCertKey: leafPEM, corev1.TLSPrivateKeyKey: keyPEM, cmmeta.TLSCAKey: caPEM}
	labels := map[string]string{cmapi.PartOfCertManagerControllerLabelKey: "true"}
	annotations := map[string]string{
		cmapi.CertificateNameKey:       crt.Name,
		cmapi.IssuerNameAnnotationKey:  crt.Spec.IssuerRef.Name,
		cmapi.IssuerKindAnnotationKey:  crt.Spec.IssuerRef.Kind,
		cmapi.IssuerGroupAnnotationKey: crt.Spec.IssuerRef.Group,
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: crt.Namespace, Name: crt.Spec.SecretName, Labels: labels, Annotations: annotations},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
	err := c.Create(ctx, s)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), cur); err != nil {
			return err
		}
		// cert-manager keeps what others put on the Secret and sets its own.
		if cur.Labels == nil {
			cur.Labels = map[string]string{}
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		for k, v := range labels {
			cur.Labels[k] = v
		}
		for k, v := range annotations {
			cur.Annotations[k] = v
		}
		if cur.Data == nil {
			cur.Data = map[string][]byte{}
		}
		for k, v := range data {
			cur.Data[k] = v
		}
		return c.Update(ctx, cur)
	})
}

// setRevision writes crt's status as cert-manager's issuing controller (the
// revision, no Issuing condition, no failure) and its readiness controller
// (Ready, the leaf's validity, the renewal time) leave it. The first attempt
// writes from crt as given, without a read; a conflict re-reads it.
func setRevision(ctx context.Context, c client.Client, crt *cmapi.Certificate, revision int, leafPEM []byte) error {
	fresh := true
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !fresh {
			if err := c.Get(ctx, client.ObjectKeyFromObject(crt), crt); err != nil {
				return err
			}
		}
		fresh = false
		st := &crt.Status
		st.Revision = &revision
		st.FailedIssuanceAttempts, st.LastFailureTime, st.NextPrivateKeySecretName = nil, nil, nil
		// A leaf that does not parse (a bad-input test's) leaves the times
		// unset, as cert-manager's readiness controller could not set them.
		st.NotBefore, st.NotAfter, st.RenewalTime = nil, nil, nil
		if leaf := firstCertificate(leafPEM); leaf != nil {
			nb, na := metav1.NewTime(leaf.NotBefore), metav1.NewTime(leaf.NotAfter)
			// cert-manager renews by default when a third of the lifetime
			// is left.
			rt := metav1.NewTime(leaf.NotAfter.Add(-leaf.NotAfter.Sub(leaf.NotBefore) / 3).Truncate(time.Second))
			st.NotBefore, st.NotAfter, st.RenewalTime = &nb, &na, &rt
		}
		var kept []cmapi.CertificateCondition
		var ready *cmapi.CertificateCondition
		for _, cond := range st.Conditions {
			switch cond.Type {
			case cmapi.CertificateConditionIssuing:
			case cmapi.CertificateConditionReady:
				ready = &cond
			default:
				kept = append(kept, cond)
			}
		}
		now := metav1.Now()
		if ready != nil && ready.Status == cmmeta.ConditionTrue && ready.LastTransitionTime != nil {
			now = *ready.LastTransitionTime // a transition only when it changes
		}
		st.Conditions = append(kept, cmapi.CertificateCondition{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue,
			Reason: readyReason, Message: readyMessage, LastTransitionTime: &now, ObservedGeneration: crt.Generation})
		return c.Status().Update(ctx, crt)
	})
}

// deleteOlder garbage-collects crt's requests as cert-manager's revision
// manager does once crt is Ready: it keeps the revisionHistoryLimit
// (default 1) newest revisions. The first revision has nothing older, and
// costs no list.
func deleteOlder(ctx context.Context, c client.Client, crt *cmapi.Certificate, revision int) error {
	limit := 1
	if crt.Spec.RevisionHistoryLimit != nil {
		limit = int(*crt.Spec.RevisionHistoryLimit)
	}
	if revision <= limit {
		return nil
	}
	// crt's requests carry its labels: listing by them keeps the list to
	// crt's kind of clients rather than the whole namespace.
	var list cmapi.CertificateRequestList
	if err := c.List(ctx, &list, client.InNamespace(crt.Namespace), client.MatchingLabels(crt.Labels)); err != nil {
		return err
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if owner := metav1.GetControllerOfNoCopy(cr); owner == nil || owner.UID != crt.UID {
			continue
		}
		rev, err := strconv.Atoi(cr.Annotations[cmapi.CertificateRequestRevisionAnnotationKey])
		if err != nil || rev > revision-limit {
			continue // cert-manager leaves requests without a revision alone too
		}
		if err := c.Delete(ctx, cr); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// firstCertificate is the first PEM block of data as a certificate, or nil.
func firstCertificate(data []byte) *x509.Certificate {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// request is the CSR PEM every request carries as spec.request, which the
// CRD requires: one, signed once by a key of its own, shared by every
// request. Its key is not the client's: no issuer signs it here and dualca
// never reads it, and one CSR spares the benchmark's tens of thousands of
// clients a signature each and this package a private key parser (bundle
// has the strict one).
var request = sync.OnceValues(func() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, fmt.Errorf("signing a CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
})
