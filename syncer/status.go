package syncer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// StatusOptions say what Status looks at: the Secrets themselves, for a
// tool that holds them (the demo). `dualca status` reads the status dualca
// publishes instead (operator.ReadStatus), which needs no Secret.
type StatusOptions struct {
	GatewaySecret types.NamespacedName
	// RootSecret, when set, is read and validated too.
	RootSecret types.NamespacedName
	// ClientSelector, ClientSecretSelector and ClientIssuer select the
	// clients as dualca's options do; when one is set, the report counts
	// the clients that need each root, from their requests; else client
	// progress comes from the gateway Secret's annotation.
	ClientSelector       labels.Selector
	ClientSecretSelector labels.Selector
	ClientIssuer         *IssuerRef
	ClientNamespaces     []string
	// StalledAfter is how long a rotation may stay in Renewing before the
	// report calls the renewal stalled.
	StalledAfter time.Duration
}

// Report is what `dualca status` shows, and what dualca publishes in its
// status ConfigMap (see statusmap.go). It holds fingerprint prefixes,
// subjects and dates, never certificate or key bytes.
type Report struct {
	Gateway string `json:"gateway"`
	// Targets are the objects dualca writes the rotation to and what each
	// holds; empty in a report made from the Secrets (Status).
	Targets []TargetStatus `json:"targets,omitempty"`
	// Issuing is the issuing Secret (--issuing-secret) and the root it
	// holds; nil without one.
	Issuing     *IssuingStatus   `json:"issuingSecret,omitempty"`
	Strategy    string           `json:"strategy"`
	Phase       string           `json:"phase,omitempty"`
	RootAddedAt *time.Time       `json:"rootAddedAt,omitempty"`
	SwitchedAt  *time.Time       `json:"serverSwitchedAt,omitempty"`
	Root        *RootStatus      `json:"rootSecret,omitempty"`
	Roots       []BundleRoot     `json:"roots"`
	Clients     *bundle.Progress `json:"clients,omitempty"`
	// Paused: an operator holds the rotation (dualca pause), since
	// PausedAt when dualca has obeyed it. Promote is the root a pending
	// promote names (12-character prefix).
	Paused   bool       `json:"paused"`
	PausedAt *time.Time `json:"pausedAt,omitempty"`
	Promote  string     `json:"promote,omitempty"`
	// Next is what comes next and when, as dualca decides it; nil when it
	// cannot be told (see Next.Unknown otherwise).
	Next *Next `json:"next,omitempty"`
	// Attention lists what needs an operator; empty when all is well.
	Attention []string `json:"attention"`
	// ObservedAt is when dualca last published the report (it publishes
	// when what the report says changes), by its clock; PollInterval is
	// its poll interval. Both are nil or "" in a report made from the
	// Secrets (Status).
	ObservedAt   *time.Time `json:"observedAt,omitempty"`
	PollInterval string     `json:"pollInterval,omitempty"`
}

// TargetStatus is one object dualca writes the rotation to.
type TargetStatus struct {
	// Object is KIND/NAMESPACE/NAME.
	Object string `json:"object"`
	// Holds says what of the rotation it holds, by key.
	Holds string `json:"holds"`
}

// IssuingStatus is the issuing Secret as dualca last left it.
type IssuingStatus struct {
	Secret string `json:"secret"`
	// Root is the fingerprint prefix of the root it holds; "" when none.
	Root string `json:"root,omitempty"`
	// Current: it holds the current root. Otherwise Reason says why not.
	Current bool   `json:"current"`
	Reason  string `json:"reason,omitempty"`
}

// RootStatus is the root Secret as dualca would read it.
type RootStatus struct {
	Secret      string `json:"secret"`
	Valid       bool   `json:"valid"`
	Reason      string `json:"reason,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
}

// BundleRoot is one root of the gateway's ca.crt.
type BundleRoot struct {
	Fingerprint string    `json:"fingerprint"` // 12-character prefix
	Subject     string    `json:"subject"`
	NotAfter    time.Time `json:"notAfter"`
	Current     bool      `json:"current"`
	Server      bool      `json:"server"`
	// Clients is how many selected clients' unexpired leaves chain to it;
	// nil when clients were not looked at.
	Clients *int `json:"clients,omitempty"`
}

// Status reads the gateway Secret, and the root Secret and clients when
// asked, and reports on them.
func Status(ctx context.Context, c client.Reader, o StatusOptions, now time.Time) (*Report, error) {
	gw := &corev1.Secret{}
	if err := c.Get(ctx, o.GatewaySecret, gw); err != nil {
		if apierrors.IsNotFound(err) {
			return &Report{Gateway: o.GatewaySecret.String(), Roots: []BundleRoot{},
				Attention: []string{"gateway secret " + o.GatewaySecret.String() + " does not exist"}}, nil
		}
		return nil, fmt.Errorf("reading gateway secret %s: %w", o.GatewaySecret, err)
	}
	st := bundle.ParseState(gw.Annotations)
	r := &Report{Gateway: o.GatewaySecret.String(), Strategy: st.Strategy, Phase: string(st.Phase), Clients: st.Clients,
		Roots: []BundleRoot{}, Attention: []string{}}
	if !st.RootAddedAt.IsZero() {
		r.RootAddedAt = &st.RootAddedAt
	}
	if !st.SwitchedAt.IsZero() {
		r.SwitchedAt = &st.SwitchedAt
	}
	if r.Strategy == "" {
		r.Attention = append(r.Attention, "the gateway secret carries no dualca strategy annotation: not written by dualca yet")
	}
	r.addControls(st)
	var root *bundle.Root
	if o.RootSecret.Name != "" {
		var err error
		if root, err = r.readRoot(ctx, c, o.RootSecret, st, now); err != nil {
			return nil, err
		}
	}
	var clients *bundle.Clients
	if sel := (ClientSelection{Labels: o.ClientSelector, SecretLabels: o.ClientSecretSelector, Issuer: o.ClientIssuer}); sel.Tracked() {
		cs, err := readClients(ctx, c, sel, o.ClientNamespaces)
		if err != nil {
			return nil, err
		}
		clients = &cs
	}
	roots, _ := bundle.ParseCertificates(caKey, gw.Data[caKey])
	r.addRoots(roots, st, clients, now)
	if clients != nil {
		p := bundle.CountProgress(*clients, bundle.Find(roots, st.Root), now)
		r.Clients = &p
	}
	r.addFailedClients()
	r.AddStalled(o.StalledAfter, now)
	r.Next = next(gatewayOf(gw, nil), root, clients, now)
	return r, nil
}

// readRoot reads and validates the root Secret at key into the report, and
// returns the root when it is usable.
func (r *Report) readRoot(ctx context.Context, c client.Reader, key types.NamespacedName, st bundle.State, now time.Time) (*bundle.Root, error) {
	var usable *bundle.Root
	r.Root = &RootStatus{Secret: key.String()}
	s, err := getRoot(ctx, c, key)
	var root *bundle.Root
	if err == nil {
		root, err = bundle.ValidateRoot(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[caKey], now)
	}
	var invalid *bundle.InvalidError
	switch {
	case errors.As(err, &invalid):
		r.Root.Reason = invalid.Error()
	case err != nil && s == nil:
		return nil, err
	case err != nil:
		r.Root.Reason = err.Error()
	default:
		r.Root.Valid, r.Root.Fingerprint, usable = true, bundle.Short(root.Fingerprint), root
		if root.Fingerprint != st.Root {
			r.Attention = append(r.Attention, "the gateway does not reflect the current root "+bundle.Short(root.Fingerprint)+" yet")
		}
	}
	if !r.Root.Valid {
		r.Attention = append(r.Attention, "invalid root: "+r.Root.Reason)
	}
	return usable, nil
}

// addRoots reports roots, the gateway's ca.crt, and, when clients were
// read, how many need each.
func (r *Report) addRoots(roots []*x509.Certificate, st bundle.State, clients *bundle.Clients, now time.Time) {
	for _, root := range roots {
		fp := bundle.Fingerprint(root)
		br := BundleRoot{Fingerprint: bundle.Short(fp), Subject: root.Subject.String(), NotAfter: root.NotAfter.UTC(),
			Current: fp == st.Root, Server: fp == st.Server}
		if clients != nil {
			n := clients.Using(root, now)
			br.Clients = &n
		}
		r.Roots = append(r.Roots, br)
	}
}

// addFailedClients says when clients failed to renew.
func (r *Report) addFailedClients() {
	if r.Clients != nil && r.Clients.Failed > 0 {
		r.Attention = append(r.Attention, fmt.Sprintf("%d clients failed to renew: see their Certificates' conditions", r.Clients.Failed))
	}
}

// AddStalled says when the rotation has been renewing clients for longer
// than stalledAfter (0: never): for Status and for `dualca status`, as of
// their own clocks.
func (r *Report) AddStalled(stalledAfter time.Duration, now time.Time) {
	if r.Phase == string(bundle.PhaseRenewing) && r.RootAddedAt != nil && stalledAfter > 0 && now.Sub(*r.RootAddedAt) > stalledAfter {
		r.Attention = append(r.Attention, fmt.Sprintf("client renewal stalled: renewing for %s (more than %s)",
			now.Sub(*r.RootAddedAt).Round(time.Second), stalledAfter))
	}
}

// readClients reads the selected clients through c as the controller's
// tracker does, for Status (the demo's report, read through its cache).
// `dualca status` reads no client: it reads the status ConfigMap alone
// (operator.ReadStatus).
func readClients(ctx context.Context, c client.Reader, selection ClientSelection, namespaces []string) (bundle.Clients, error) {
	t := &clientTracker{reader: c, selection: selection, namespaces: namespaces}
	cs, _, err := t.read(ctx)
	return cs, err
}
