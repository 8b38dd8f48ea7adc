package bundle_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/dualca/dualca/bundle"
)

// stFP is a fingerprint-shaped value; ParseState does not check the shape.
var stFP = strings.Repeat("ab", 32)

func TestStateAnnotationsRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	tests := map[string]struct {
		state bundle.State
	}{
		"a full zero-downtime state comes back as it was": {
			state: bundle.State{
				Strategy:    bundle.StrategyZeroDowntime,
				Phase:       bundle.PhaseRenewing,
				Root:        stFP,
				Server:      strings.Repeat("cd", 32),
				RootAddedAt: at,
				SwitchedAt:  at.Add(-48 * time.Hour),
				BundleHash:  "sha256:0123456789abcdef",
				BundleRoots: []string{stFP, strings.Repeat("cd", 32), strings.Repeat("ef", 32)},
				Clients:     &bundle.Progress{Renewed: 3, Pending: 2, Failed: 1},
			},
		},
		"a legacy state with only the strategy and the root comes back as it was": {
			state: bundle.State{Strategy: bundle.StrategyLegacy, Root: stFP, Server: stFP},
		},
		"progress of zero clients is kept, not read as untracked": {
			state: bundle.State{Strategy: bundle.StrategyZeroDowntime, Clients: &bundle.Progress{}},
		},
		"a bundle of one root comes back as one root": {
			state: bundle.State{BundleRoots: []string{stFP}},
		},
		"the zero state comes back as the zero state": {
			state: bundle.State{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			a := tc.state.Annotations()
			for k := range a {
				g.Expect(k).To(HavePrefix(bundle.AnnotationPrefix))
			}
			g.Expect(bundle.ParseState(a)).To(Equal(tc.state))
		})
	}
}

func TestStateAnnotations(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	elsewhere := time.FixedZone("UTC+2", 2*60*60)

	tests := map[string]struct {
		state bundle.State
		want  map[string]string
	}{
		"the zero state has no annotations at all": {
			state: bundle.State{},
			want:  map[string]string{},
		},
		"empty fields are absent from the map": {
			state: bundle.State{Strategy: bundle.StrategyLegacy, Root: stFP, Server: stFP, BundleRoots: []string{}},
			want: map[string]string{
				bundle.AnnotationStrategy: "legacy",
				bundle.AnnotationRoot:     stFP,
				bundle.AnnotationServer:   stFP,
			},
		},
		"every field has its annotation": {
			state: bundle.State{
				Strategy:    bundle.StrategyZeroDowntime,
				Phase:       bundle.PhaseBundle,
				Root:        stFP,
				Server:      "cd",
				RootAddedAt: at,
				SwitchedAt:  at.Add(-time.Hour),
				BundleHash:  "sha256:0123456789abcdef",
				BundleRoots: []string{stFP, "cd"},
				Clients:     &bundle.Progress{Renewed: 1, Pending: 2, Failed: 3},
			},
			want: map[string]string{
				"dualca.io/strategy":           "zero-downtime",
				"dualca.io/phase":              "Bundle",
				"dualca.io/root-fingerprint":   stFP,
				"dualca.io/server-fingerprint": "cd",
				"dualca.io/root-added-at":      "2026-01-02T03:04:05Z",
				"dualca.io/server-switched-at": "2026-01-02T02:04:05Z",
				"dualca.io/bundle-hash":        "sha256:0123456789abcdef",
				"dualca.io/bundle-roots":       stFP + ",cd",
				"dualca.io/clients":            "renewed=1 pending=2 failed=3",
			},
		},
		"times are written in UTC to the second": {
			state: bundle.State{RootAddedAt: at.Add(999 * time.Millisecond).In(elsewhere)},
			want:  map[string]string{bundle.AnnotationRootAddedAt: "2026-01-02T03:04:05Z"},
		},
		"untracked clients have no progress annotation": {
			state: bundle.State{Strategy: bundle.StrategyZeroDowntime, Clients: nil},
			want:  map[string]string{bundle.AnnotationStrategy: "zero-downtime"},
		},
		"progress of zero clients is written": {
			state: bundle.State{Clients: &bundle.Progress{}},
			want:  map[string]string{bundle.AnnotationClients: "renewed=0 pending=0 failed=0"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(tc.state.Annotations()).To(Equal(tc.want))
		})
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	tests := map[string]struct {
		annotations map[string]string
		want        bundle.State
	}{
		"no annotations are the zero state": {
			annotations: nil,
			want:        bundle.State{},
		},
		"a root-added-at that is not a time is absent": {
			annotations: map[string]string{bundle.AnnotationRootAddedAt: "yesterday"},
			want:        bundle.State{},
		},
		"a server-switched-at without a time zone is absent": {
			annotations: map[string]string{bundle.AnnotationServerSwitchedAt: "2026-01-02 03:04:05"},
			want:        bundle.State{},
		},
		"a time with an impossible month is absent": {
			annotations: map[string]string{bundle.AnnotationRootAddedAt: "2026-13-02T03:04:05Z"},
			want:        bundle.State{},
		},
		"an empty time is absent": {
			annotations: map[string]string{bundle.AnnotationRootAddedAt: ""},
			want:        bundle.State{},
		},
		"client progress that is not numbers is absent": {
			annotations: map[string]string{bundle.AnnotationClients: "renewed=a pending=b failed=c"},
			want:        bundle.State{},
		},
		"client progress missing a count is absent": {
			annotations: map[string]string{bundle.AnnotationClients: "renewed=1 pending=2"},
			want:        bundle.State{},
		},
		"empty client progress is absent": {
			annotations: map[string]string{bundle.AnnotationClients: ""},
			want:        bundle.State{},
		},
		"an empty list of bundle roots is absent": {
			annotations: map[string]string{bundle.AnnotationBundleRoots: ""},
			want:        bundle.State{},
		},
		"malformed values do not hide the well-formed ones beside them": {
			annotations: map[string]string{
				bundle.AnnotationStrategy:         bundle.StrategyZeroDowntime,
				bundle.AnnotationRootAddedAt:      "not a time",
				bundle.AnnotationServerSwitchedAt: "2026-01-02T03:04:05Z",
				bundle.AnnotationClients:          "renewed=x",
			},
			want: bundle.State{Strategy: bundle.StrategyZeroDowntime, SwitchedAt: at},
		},
		"annotations of other controllers are ignored": {
			annotations: map[string]string{
				"example.com/owner":                           "someone",
				"kubectl.kubernetes.io/last-applied-config":   "{}",
				bundle.AnnotationPrefix + "something-else":    "x",
				"cert-manager.io/certificate-name":            "root",
				"dualca.io.example.com/" + "root-fingerprint": stFP,
			},
			want: bundle.State{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.ParseState(tc.annotations)).To(Equal(tc.want))
		})
	}
}

func TestShort(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fp, want string
	}{
		"no fingerprint is empty":                            {fp: "", want: ""},
		"a value shorter than the prefix is kept whole":      {fp: "abc", want: "abc"},
		"a value exactly as long as the prefix is kept":      {fp: "0123456789ab", want: "0123456789ab"},
		"a value one longer than the prefix is cut":          {fp: "0123456789abc", want: "0123456789ab"},
		"a full SHA-256 fingerprint is cut to 12 hex digits": {fp: stFP, want: "abababababab"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(bundle.Short(tc.fp)).To(Equal(tc.want))
		})
	}
}

func TestProgressString(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		p    bundle.Progress
		want string
	}{
		"no clients":              {p: bundle.Progress{}, want: "renewed=0 pending=0 failed=0"},
		"every count in its slot": {p: bundle.Progress{Renewed: 10000, Pending: 2, Failed: 3}, want: "renewed=10000 pending=2 failed=3"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := NewWithT(t)
			g.Expect(tc.p.String()).To(Equal(tc.want))
		})
	}
}
