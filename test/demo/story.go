package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/test/certs"
)

// How often the demo reads the gateway Secret: often while it measures how
// fast dualca follows a rotation, calmly while it waits out timers.
const (
	fastPoll = 2 * time.Millisecond
	slowPoll = 50 * time.Millisecond
)

// rootLifetime is how long every demo root is valid, as a cert-manager CA
// Certificate with duration 2160h would be.
const rootLifetime = 90 * 24 * time.Hour

// story is the demo: the root rotates, dualca follows, the demo watches the
// gateway Secret and tells what it sees.
type story struct {
	k8s     client.Client
	dualca  *dualcaProcess
	timeout time.Duration

	step     int
	roots    []*certs.CA     // every root issued so far, oldest first
	versions map[string]bool // gateway Secret versions checked
}

// setUp creates the namespace and the first root, issued 60 days ago as if
// it had been in use for a while.
func (s *story) setUp(ctx context.Context) error {
	if err := s.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	root, err := newRoot("demo-root-1", time.Now().Add(-60*24*time.Hour))
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: rootKey.Namespace, Name: rootKey.Name},
		Type:       corev1.SecretTypeTLS,
		Data:       rootData(root),
	}
	if err := s.k8s.Create(ctx, secret); err != nil {
		return fmt.Errorf("creating root Secret %s: %w", rootKey, err)
	}
	s.roots = append(s.roots, root)
	fmt.Printf("created root CA Secret %s: %s\n", rootKey, describe(root.Cert))
	return nil
}

// play runs the steps: first sync, then two rotations.
func (s *story) play(ctx context.Context) error {
	if err := s.firstSync(ctx); err != nil {
		return err
	}
	for _, cn := range []string{"demo-root-2", "demo-root-3"} {
		if err := s.rotate(ctx, cn); err != nil {
			return err
		}
	}
	fmt.Printf("\nchecked %d versions of the gateway Secret: each one's ca.crt held the root its tls.crt presents\n", len(s.versions))
	return nil
}

func (s *story) current() *certs.CA { return s.roots[len(s.roots)-1] }

// firstSync waits for dualca to create the gateway Secret from the root.
func (s *story) firstSync(ctx context.Context) error {
	root := s.current()
	cn := root.Cert.Subject.CommonName
	v, err := s.waitFor(ctx, "the gateway Secret to present and trust "+cn, fastPoll, func(v *gateway) bool {
		return v.serves(root.Cert) && v.trusts(root.Cert)
	})
	if err != nil {
		return err
	}
	s.snapshot(fmt.Sprintf("dualca created the gateway Secret from %s, %s after it started",
		cn, millis(v.seenAt.Sub(s.dualca.started))), v)
	return nil
}

// rotate replaces the root with a new one, as cert-manager does when it
// renews a CA with a new key, and follows the gateway Secret until its
// server presents the new root.
func (s *story) rotate(ctx context.Context, cn string) error {
	old := s.current()
	root, err := newRoot(cn, time.Now())
	if err != nil {
		return err
	}
	at, err := s.writeRoot(ctx, root)
	if err != nil {
		return err
	}
	s.roots = append(s.roots, root)

	v, err := s.waitFor(ctx, "the gateway Secret to trust "+cn, fastPoll, func(v *gateway) bool {
		return v.trusts(root.Cert)
	})
	if err != nil {
		return err
	}
	s.snapshot(fmt.Sprintf("root rotated to %s: gateway updated %s after the root write (polled every %s)",
		cn, millis(v.seenAt.Sub(at)), fastPoll), v)
	if !v.trusts(old.Cert) {
		fmt.Printf("    ! %s left ca.crt at once: clients whose certificates it issued are no longer trusted\n",
			old.Cert.Subject.CommonName)
	}
	if v.serves(root.Cert) {
		fmt.Println("    the server switched together with the bundle: there is no grace period")
		return nil
	}

	v, err = s.waitForSwitch(ctx, root, at, v.phase)
	if err != nil {
		return err
	}
	s.snapshot(fmt.Sprintf("server switched to %s, %s after the rotation (grace period %s)",
		cn, seconds(v.seenAt.Sub(at)), serverSwitchGrace), v)
	return nil
}

// waitForSwitch waits until the server presents root, printing each phase
// the gateway Secret passes through on the way.
func (s *story) waitForSwitch(ctx context.Context, root *certs.CA, rotatedAt time.Time, phase string) (*gateway, error) {
	last := phase
	what := "the server to switch to " + root.Cert.Subject.CommonName
	return s.waitFor(ctx, what, slowPoll, func(v *gateway) bool {
		if v.phase != last {
			fmt.Printf("    %6s after the rotation: phase %s -> %s\n", seconds(v.seenAt.Sub(rotatedAt)), dash(last), dash(v.phase))
			last = v.phase
		}
		return v.serves(root.Cert)
	})
}

// writeRoot updates the root Secret in place with root and returns when the
// API server accepted the write.
func (s *story) writeRoot(ctx context.Context, root *certs.CA) (time.Time, error) {
	var secret corev1.Secret
	if err := s.k8s.Get(ctx, rootKey, &secret); err != nil {
		return time.Time{}, fmt.Errorf("reading root Secret %s: %w", rootKey, err)
	}
	secret.Data = rootData(root)
	if err := s.k8s.Update(ctx, &secret); err != nil {
		return time.Time{}, fmt.Errorf("rotating root Secret %s: %w", rootKey, err)
	}
	return time.Now(), nil
}

// waitFor reads the gateway Secret every so often until done says so, the
// step times out, dualca exits or the demo is interrupted. Every version
// read is checked: its ca.crt must hold the root its tls.crt presents.
func (s *story) waitFor(ctx context.Context, what string, every time.Duration, done func(*gateway) bool) (*gateway, error) {
	deadline := time.Now().Add(s.timeout)
	var lastErr error
	for {
		v, err := readGateway(ctx, s.k8s)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		switch {
		case err != nil:
			lastErr = err
		case v != nil:
			if err := s.check(v); err != nil {
				return nil, err
			}
			if done(v) {
				return v, nil
			}
		}
		if time.Now().After(deadline) {
			if lastErr != nil {
				return nil, fmt.Errorf("timed out after %s waiting for %s (last error: %w)", s.timeout, what, lastErr)
			}
			return nil, fmt.Errorf("timed out after %s waiting for %s", s.timeout, what)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.dualca.exited:
			return nil, fmt.Errorf("dualca exited while the demo waited for %s", what)
		case <-time.After(every):
		}
	}
}

// check fails the demo if the gateway Secret ever presents a server
// credential from a root its own trust bundle does not hold.
func (s *story) check(v *gateway) error {
	if s.versions == nil {
		s.versions = map[string]bool{}
	}
	s.versions[v.version] = true
	if v.server == nil {
		return fmt.Errorf("gateway Secret version %s presents %s, whose root its ca.crt does not hold", v.version, describe(v.leaf))
	}
	return nil
}

// newRoot issues a self-signed root CA valid for rootLifetime from issued.
func newRoot(cn string, issued time.Time) (*certs.CA, error) {
	ca, err := certs.NewCA(cn, issued, issued.Add(rootLifetime))
	if err != nil {
		return nil, fmt.Errorf("issuing root %s: %w", cn, err)
	}
	return ca, nil
}

// rootData is a root Secret's content as cert-manager writes it for a
// self-signed CA: ca.crt is the root itself.
func rootData(root *certs.CA) map[string][]byte {
	return map[string][]byte{
		corev1.TLSCertKey:       root.CertPEM,
		corev1.TLSPrivateKeyKey: root.KeyPEM,
		"ca.crt":                root.CertPEM,
	}
}
