package bundle

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// AnnotationPrefix starts every annotation dualca writes on the gateway
// Secret; annotations with other prefixes belong to other controllers and
// are never touched.
const AnnotationPrefix = "dualca.io/"

// The annotations that record a rotation on the gateway Secret. They are the
// only state dualca keeps, so a restart at any moment resumes where it was.
const (
	AnnotationStrategy         = AnnotationPrefix + "strategy"
	AnnotationPhase            = AnnotationPrefix + "phase"
	AnnotationRoot             = AnnotationPrefix + "root-fingerprint"
	AnnotationServer           = AnnotationPrefix + "server-fingerprint"
	AnnotationRootAddedAt      = AnnotationPrefix + "root-added-at"
	AnnotationServerSwitchedAt = AnnotationPrefix + "server-switched-at"
	AnnotationBundleHash       = AnnotationPrefix + "bundle-hash"
	AnnotationBundleRoots      = AnnotationPrefix + "bundle-roots"
	AnnotationClients          = AnnotationPrefix + "clients"
	AnnotationClientsReadyAt   = AnnotationPrefix + "clients-ready-at"
	// AnnotationTimings records the Timings the decisions are made with,
	// so that `dualca status` decides what comes next exactly as dualca does.
	AnnotationTimings = AnnotationPrefix + "timings"
)

// Strategy names, as recorded in AnnotationStrategy.
const (
	StrategyZeroDowntime = "zero-downtime"
	StrategyLegacy       = "legacy"
)

// Phase is where a zero-downtime rotation stands.
type Phase string

// The phases of a zero-downtime rotation, in order.
const (
	// PhaseBundle: the new root is in the bundle; the gateway is given the
	// propagation delay to load it before anything depends on it.
	PhaseBundle Phase = "Bundle"
	// PhaseRenewing: clients are being moved to the new root; the server
	// still presents the old one.
	PhaseRenewing Phase = "Renewing"
	// PhaseRetiring: the server presents the new root; old roots stay in the
	// bundle until nobody uses them or they expire.
	PhaseRetiring Phase = "Retiring"
	// PhaseSteady: the bundle holds only the current root, which the server presents.
	PhaseSteady Phase = "Steady"
)

// Progress counts the selected clients during a rotation.
type Progress struct {
	Renewed, Pending, Failed int
}

// String is the annotation form, stable so that equal progress writes nothing.
func (p Progress) String() string {
	return fmt.Sprintf("renewed=%d pending=%d failed=%d", p.Renewed, p.Pending, p.Failed)
}

// State is what the annotations of the gateway Secret say.
type State struct {
	Strategy    string
	Phase       Phase
	Root        string    // fingerprint of the current root
	Server      string    // fingerprint of the root the server certificate is or chains to
	RootAddedAt time.Time // when Root entered the bundle, by dualca's clock
	SwitchedAt  time.Time // when tls.crt last moved to another root
	// ClientsReadyAt is when dualca first saw every selected client on the
	// current root while the server was not yet on it; zero otherwise.
	ClientsReadyAt time.Time
	BundleHash     string    // Hash of ca.crt as dualca wrote it
	BundleRoots    []string  // fingerprints of the roots in ca.crt, in order
	Clients        *Progress // nil when client renewal is not tracked
	// Timings are those the decision was made with; zero when not recorded.
	Timings Timings
	// Paused and Promote are the operator's AnnotationPaused and
	// AnnotationPromote as found, verbatim (see control.go).
	Paused, Promote string
	// PausedAt is when dualca first obeyed the pause; zero when not paused.
	PausedAt time.Time
}

// ParseState reads State from annotations; unknown or malformed values are
// read as absent, which makes the next decision treat the Secret as adopted
// rather than trust a value it cannot read.
func ParseState(annotations map[string]string) State {
	s := State{
		Strategy:       annotations[AnnotationStrategy],
		Phase:          Phase(annotations[AnnotationPhase]),
		Root:           annotations[AnnotationRoot],
		Server:         annotations[AnnotationServer],
		RootAddedAt:    parseTime(annotations[AnnotationRootAddedAt]),
		SwitchedAt:     parseTime(annotations[AnnotationServerSwitchedAt]),
		ClientsReadyAt: parseTime(annotations[AnnotationClientsReadyAt]),
		BundleHash:     annotations[AnnotationBundleHash],
		Timings:        parseTimings(annotations[AnnotationTimings]),
		Paused:         annotations[AnnotationPaused],
		Promote:        annotations[AnnotationPromote],
		PausedAt:       parseTime(annotations[AnnotationPausedAt]),
	}
	if s.Strategy != StrategyZeroDowntime && s.Strategy != StrategyLegacy {
		s.Strategy = ""
	}
	switch s.Phase {
	case PhaseBundle, PhaseRenewing, PhaseRetiring, PhaseSteady:
	default:
		s.Phase = ""
	}
	if v := annotations[AnnotationBundleRoots]; v != "" {
		s.BundleRoots = strings.Split(v, ",")
	}
	if v, ok := annotations[AnnotationClients]; ok {
		var p Progress
		if _, err := fmt.Sscanf(v, "renewed=%d pending=%d failed=%d", &p.Renewed, &p.Pending, &p.Failed); err == nil {
			s.Clients = &p
		}
	}
	return s
}

// Annotations is the inverse of ParseState: every dualca annotation with its
// value; empty values are absent from the map and get removed from the Secret.
func (s State) Annotations() map[string]string {
	a := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			a[k] = v
		}
	}
	set(AnnotationStrategy, s.Strategy)
	set(AnnotationPhase, string(s.Phase))
	set(AnnotationRoot, s.Root)
	set(AnnotationServer, s.Server)
	set(AnnotationRootAddedAt, formatTime(s.RootAddedAt))
	set(AnnotationServerSwitchedAt, formatTime(s.SwitchedAt))
	set(AnnotationClientsReadyAt, formatTime(s.ClientsReadyAt))
	set(AnnotationBundleHash, s.BundleHash)
	set(AnnotationBundleRoots, strings.Join(s.BundleRoots, ","))
	if s.Clients != nil {
		set(AnnotationClients, s.Clients.String())
	}
	set(AnnotationTimings, formatTimings(s.Timings))
	set(AnnotationPaused, s.Paused)
	set(AnnotationPromote, s.Promote)
	set(AnnotationPausedAt, formatTime(s.PausedAt))
	return a
}

// Times are kept to the second in UTC: finer precision would only make
// equal states look different.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func parseTime(v string) time.Time {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Short is the prefix of a fingerprint used in messages: enough to tell
// roots apart for a human, and never certificate material.
func Short(fp string) string {
	if len(fp) > 12 {
		return fp[:12]
	}
	return fp
}

// itoa keeps message building terse.
func itoa(n int) string { return strconv.Itoa(n) }
