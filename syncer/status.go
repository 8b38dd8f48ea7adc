package syncer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
)

// StatusOptions say what `dualca status` looks at.
type StatusOptions struct {
	GatewaySecret types.NamespacedName
	// RootSecret, when set, is read and validated too.
	RootSecret types.NamespacedName
	// ClientSelector, when set, makes the report count the clients that
	// need each root, from their Secrets; else client progress comes from
	// the gateway Secret's annotation.
	ClientSelector   labels.Selector
	ClientNamespaces []string
	// StalledAfter is how long a rotation may stay in Renewing before the
	// report calls the renewal stalled.
	StalledAfter time.Duration
}

// Report is what `dualca status` shows. It holds fingerprint prefixes,
// subjects and dates, never certificate bytes.
type Report struct {
	Gateway     string           `json:"gateway"`
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
	if o.ClientSelector != nil {
		cs, err := ReadClients(ctx, c, o.ClientSelector, o.ClientNamespaces)
		if err != nil {
			return nil, err
		}
		clients = &cs
	}
	r.addRoots(gw, st, clients, now)
	r.addClientAttention(st, o.StalledAfter, now)
	r.Next = next(gatewayOf(gw, nil), root, clients, now)
	return r, nil
}

// readRoot reads and validates the root Secret at key into the report, and
// returns the root when it is usable.
func (r *Report) readRoot(ctx context.Context, c client.Reader, key types.NamespacedName, st bundle.State, now time.Time) (*bundle.Root, error) {
	var usable *bundle.Root
	r.Root = &RootStatus{Secret: key.String()}
	s := &corev1.Secret{}
	err := c.Get(ctx, key, s)
	switch {
	case apierrors.IsNotFound(err):
		r.Root.Reason = "root secret not found"
	case err != nil:
		return nil, fmt.Errorf("reading root secret %s: %w", key, err)
	default:
		root, err := bundle.ValidateRoot(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey], s.Data[caKey], now)
		var invalid *bundle.InvalidError
		switch {
		case errors.As(err, &invalid):
			r.Root.Reason = invalid.Error()
		case err != nil:
			r.Root.Reason = err.Error()
		default:
			r.Root.Valid, r.Root.Fingerprint, usable = true, bundle.Short(root.Fingerprint), root
			if root.Fingerprint != st.Root {
				r.Attention = append(r.Attention, "the gateway does not reflect the current root "+bundle.Short(root.Fingerprint)+" yet")
			}
		}
	}
	if !r.Root.Valid {
		r.Attention = append(r.Attention, "invalid root: "+r.Root.Reason)
	}
	return usable, nil
}

// addRoots reports the roots of the gateway's ca.crt and, when clients
// were read, how many need each and the client progress they make.
func (r *Report) addRoots(gw *corev1.Secret, st bundle.State, clients *bundle.Clients, now time.Time) {
	roots, _ := bundle.ParseCertificates(caKey, gw.Data[caKey])
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
	if clients != nil {
		p := bundle.CountProgress(*clients, bundle.Find(roots, st.Root), now)
		r.Clients = &p
	}
}

// addClientAttention says when client renewal needs an operator: clients
// that failed, or a rotation renewing for longer than stalledAfter.
func (r *Report) addClientAttention(st bundle.State, stalledAfter time.Duration, now time.Time) {
	if r.Clients != nil && r.Clients.Failed > 0 {
		r.Attention = append(r.Attention, fmt.Sprintf("%d clients failed to renew: see their Certificates' conditions", r.Clients.Failed))
	}
	if st.Phase == bundle.PhaseRenewing && r.RootAddedAt != nil && stalledAfter > 0 && now.Sub(*r.RootAddedAt) > stalledAfter {
		r.Attention = append(r.Attention, fmt.Sprintf("client renewal stalled: renewing for %s (more than %s)",
			now.Sub(*r.RootAddedAt).Round(time.Second), stalledAfter))
	}
}

// ReadClients reads the selected clients through any reader: the cache in
// the syncer, the API server in `dualca status`.
func ReadClients(ctx context.Context, c client.Reader, selector labels.Selector, namespaces []string) (bundle.Clients, error) {
	t := &clientTracker{reader: c, selector: selector, namespaces: namespaces}
	cs, _, err := t.read(ctx)
	return cs, err
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) error {
	// Every write goes through p, which keeps the first error: the
	// results of the single writes are p's to check.
	p := &printer{w: w}
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintf(tw, "gateway\t%s\n", r.Gateway)
	_, _ = fmt.Fprintf(tw, "strategy\t%s\n", dash(r.Strategy))
	phase := dash(r.Phase)
	if r.RootAddedAt != nil && r.Phase != "" && r.Phase != string(bundle.PhaseSteady) {
		phase += " (rotation started " + r.RootAddedAt.UTC().Format(time.RFC3339) + ")"
	}
	_, _ = fmt.Fprintf(tw, "phase\t%s\n", phase)
	if r.Root != nil {
		state := "valid, " + r.Root.Fingerprint
		if !r.Root.Valid {
			state = "INVALID: " + r.Root.Reason
		}
		_, _ = fmt.Fprintf(tw, "root secret\t%s (%s)\n", r.Root.Secret, state)
	}
	if r.Clients != nil {
		_, _ = fmt.Fprintf(tw, "clients\trenewed %d, pending %d, failed %d\n", r.Clients.Renewed, r.Clients.Pending, r.Clients.Failed)
	}
	r.writeControls(tw)
	r.Next.writeText(tw)
	_ = tw.Flush() // its errors are p's, kept in p.err
	_, _ = fmt.Fprintln(p)
	tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ROOT\tSUBJECT\tNOT AFTER\tSTATUS")
	for _, b := range r.Roots {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Fingerprint, b.Subject, b.NotAfter.Format(time.RFC3339), b.status())
	}
	_ = tw.Flush()
	_, _ = fmt.Fprintln(p)
	if len(r.Attention) == 0 {
		_, _ = fmt.Fprintln(p, "attention: none")
	}
	for _, a := range r.Attention {
		_, _ = fmt.Fprintln(p, "attention: "+a)
	}
	return p.err
}

// printer is a writer that keeps the first error of the writes through it
// and writes nothing after it, so that a report is printed without checking
// every line and fails as a whole.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	var n int
	n, p.err = p.w.Write(b)
	return n, p.err
}

// WriteJSON prints the report for scripts.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// status says what a root is there for.
func (b BundleRoot) status() string {
	var parts []string
	if b.Current {
		parts = append(parts, "current")
	}
	if b.Server {
		parts = append(parts, "server")
	}
	if b.Clients != nil && *b.Clients > 0 {
		parts = append(parts, "needed by "+clientCount(*b.Clients))
	}
	if len(parts) == 0 {
		parts = append(parts, "retiring")
	}
	return strings.Join(parts, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
