package operator

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
)

// Status is the report dualca published, as `dualca status` reads it: what
// needs attention includes what the reader finds as of its own clock (a
// stale report, a stalled renewal, a control not obeyed yet). Its JSON is
// the published report's.
type Status struct {
	syncer.Report
	// age is how old ObservedAt was when the report was read; 0 when
	// unknown. Text output shows it.
	age time.Duration
}

// unpublished is the status when dualca published none: why, alone.
func unpublished(why string) *Status {
	return &Status{Report: syncer.Report{Roots: []syncer.BundleRoot{}, Attention: []string{why}}}
}

// staleAfterPolls is how many of dualca's poll intervals may pass after
// the moment a report says dualca acts next before `dualca status` says
// dualca stopped publishing: dualca reconciles at that moment at the
// latest, and the decision then differs from the one published (that
// moment is past), so a running dualca publishes again.
const staleAfterPolls = 3

// defaultPollInterval is the poll interval a report that names none is
// taken to have been published at (flags.Defaults).
const defaultPollInterval = 5 * time.Minute

// ReadStatus is `dualca status`: the report dualca last published in the
// status ConfigMap at key, and what needs attention as of now: a report
// older than staleAfterPolls poll intervals, or none (dualca is not
// running, or cannot write there), a rotation renewing for longer than
// stalledAfter (0: never), a control set but not obeyed yet. It reads that
// one ConfigMap and nothing else: no Secret.
func ReadStatus(ctx context.Context, c typedcorev1.ConfigMapsGetter, key types.NamespacedName, stalledAfter time.Duration, now time.Time) (*Status, error) {
	cm, err := c.ConfigMaps(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return unpublished("dualca has not published status to configmap " + key.String() + ": is it running?"), nil
	case err != nil:
		return nil, fmt.Errorf("reading status configmap %s: %w", key, err)
	}
	published := syncer.ParseReport(cm.Data[syncer.StatusKey])
	if published == nil {
		return unpublished("configmap " + key.String() + " holds no status dualca published (no readable " + syncer.StatusKey + "): is it running?"), nil
	}
	r := &Status{Report: *published}
	if r.Roots == nil {
		r.Roots = []syncer.BundleRoot{}
	}
	if r.Attention == nil {
		r.Attention = []string{}
	}
	r.addStale(now)
	r.AddStalled(stalledAfter, now)
	r.addPendingControls(cm.Annotations)
	return r, nil
}

// addStale says when the report is stale: dualca was due to act more
// than staleAfterPolls poll intervals ago, by the report's own next step,
// and published nothing since. dualca publishes a report when what it says
// changes, not to show it is alive (at rest it writes nothing), so a report
// with no next step (a steady gateway) is never called stale.
func (r *Status) addStale(now time.Time) {
	if r.ObservedAt == nil {
		r.Attention = append(r.Attention, "the status carries no observedAt: it was not published by this dualca")
		return
	}
	r.age = max(now.Sub(*r.ObservedAt), 0)
	if r.Next == nil || len(r.Next.Upcoming) == 0 {
		return
	}
	poll, err := time.ParseDuration(r.PollInterval)
	if err != nil || poll <= 0 {
		poll = defaultPollInterval
	}
	due := r.Next.Upcoming[0]
	if late := now.Sub(due.At); late > staleAfterPolls*poll {
		r.Attention = append(r.Attention, fmt.Sprintf("dualca was due %s ago (%s) and has published nothing since, more than %d poll intervals (%s): is dualca running, and leading?",
			late.Round(time.Second), due.What, staleAfterPolls, poll))
	}
}

// addPendingControls says when the ConfigMap's controls (annotations) ask
// for what the published report does not show obeyed yet.
func (r *Status) addPendingControls(annotations map[string]string) {
	paused, _ := bundle.PauseRequested(annotations[bundle.AnnotationPaused])
	if paused != r.Paused {
		want := "resume"
		if paused {
			want = "pause"
		}
		r.Attention = append(r.Attention, "a "+want+" is requested ("+bundle.AnnotationPaused+"="+
			fmt.Sprintf("%q", annotations[bundle.AnnotationPaused])+") that dualca has not obeyed yet")
	}
	if p := annotations[bundle.AnnotationPromote]; p != "" && r.Promote == "" {
		r.Attention = append(r.Attention, "a promote to root "+bundle.Short(p)+" is requested that dualca has not acted on yet")
	}
}
