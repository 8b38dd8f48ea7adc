package operator

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// WriteText prints the report for people.
func (r *Status) WriteText(w io.Writer) error {
	// Every write goes through p, which keeps the first error: the
	// results of the single writes are p's to check.
	p := &printer{w: w}
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintf(tw, "gateway\t%s\n", dash(r.Gateway))
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
	for _, t := range r.Targets {
		_, _ = fmt.Fprintf(tw, "target\t%s (%s)\n", t.Object, t.Holds)
	}
	if is := r.Issuing; is != nil {
		state := "current root"
		if !is.Current {
			state = "not the current root yet: " + is.Reason
		}
		_, _ = fmt.Fprintf(tw, "issuing secret\t%s (root %s, %s)\n", is.Secret, dash(is.Root), state)
	}
	writeControls(tw, &r.Report)
	writeNext(tw, r.Next)
	if r.ObservedAt != nil {
		ago := ""
		if r.age > 0 {
			ago = " (" + r.age.Round(time.Second).String() + " ago)"
		}
		_, _ = fmt.Fprintf(tw, "published\t%s%s\n", r.ObservedAt.UTC().Format(time.RFC3339), ago)
	}
	_ = tw.Flush() // its errors are p's, kept in p.err
	_, _ = fmt.Fprintln(p)
	tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ROOT\tSUBJECT\tNOT AFTER\tSTATUS")
	for _, b := range r.Roots {
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.Fingerprint, b.Subject, b.NotAfter.Format(time.RFC3339), rootStatus(b))
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
func (r *Status) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// rootStatus says what a root is there for.
func rootStatus(b syncer.BundleRoot) string {
	var parts []string
	if b.Current {
		parts = append(parts, "current")
	}
	if b.Server {
		parts = append(parts, "server")
	}
	if b.Clients != nil && *b.Clients > 0 {
		parts = append(parts, "needed by "+syncer.ClientCount(*b.Clients))
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

// writeControls prints the pause and a pending promote, if any.
func writeControls(w io.Writer, r *syncer.Report) {
	if r.Paused {
		since := ""
		if r.PausedAt != nil {
			since = " since " + r.PausedAt.UTC().Format(time.RFC3339)
		}
		_, _ = fmt.Fprintf(w, "paused\tyes%s (dualca resume)\n", since)
	}
	if r.Promote != "" {
		_, _ = fmt.Fprintf(w, "promote\tpending, to root %s\n", r.Promote)
	}
}

// maxUpcomingShown bounds the moments the text report lists; JSON has all.
const maxUpcomingShown = 4

// writeNext prints the next step n, and its first upcoming moments.
func writeNext(w io.Writer, n *syncer.Next) {
	if n == nil {
		return
	}
	if n.Unknown != "" {
		_, _ = fmt.Fprintf(w, "next\tunknown: %s\n", n.Unknown)
		return
	}
	_, _ = fmt.Fprintf(w, "next\t%s\n", n.Summary)
	for _, due := range n.DueNow {
		_, _ = fmt.Fprintf(w, "due now\t%s\n", due)
	}
	for i, u := range n.Upcoming[:min(len(n.Upcoming), maxUpcomingShown)] {
		label := ""
		if i == 0 {
			label = "upcoming"
		}
		root := ""
		if u.Root != "" {
			root = " " + u.Root
		}
		_, _ = fmt.Fprintf(w, "%s\t%s  %s%s: %s\n", label, u.At.UTC().Format(time.RFC3339), u.Step, root, u.What)
	}
}
