package syncer

import (
	"context"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/legacy"
)

// strategy is how the gateway Secret follows the root: what it holds
// (Plan), and how a client due for renewal is moved to the new root
// (Renew). The zero-downtime strategy and the legacy one (package legacy)
// are its two implementations, chosen once at start-up by newStrategy.
type strategy interface {
	// Name is the strategy's name in annotations, metrics and logs.
	Name() string
	// Plan decides what the gateway Secret holds. Without a client
	// selector, clients are not tracked: the zero-downtime strategy then
	// keeps old roots until they expire and switches the server when the
	// grace period ends.
	Plan(gw bundle.Gateway, root *bundle.Root, clients bundle.Clients, now time.Time) bundle.Decision
	// Phase is the phase label of the dualca_phase metric for d.
	Phase(d bundle.Decision) string
	// Renew acts on one client due for renewal: crt is its Certificate,
	// revision the revision of the credential the decision saw it hold
	// (nil when it had none). It reports whether it acted (false: there
	// was nothing to do).
	Renew(ctx context.Context, crt types.NamespacedName, revision *int) (bool, error)
	// RenewalMethod is the renewals metric's method label.
	RenewalMethod() string
	// RenewalMessage is the event message telling that clients (say, "3
	// clients") were queued for renewal from root, paced at qps.
	RenewalMessage(clients, root string, qps float64) string
}

// newStrategy is where the strategy is chosen, once, from the options.
// certs reads the client Certificates, from a cache when there is one.
func newStrategy(o Options, api, certs client.Reader, writer client.Client) strategy {
	if o.Legacy {
		return legacy.Strategy{Reader: api, Writer: writer}
	}
	server := o.Server
	return &zeroDowntime{
		timings: bundle.Timings{TrustPropagationDelay: o.TrustPropagationDelay, ServerSwitchGrace: o.ServerSwitchGrace, Server: &server},
		api:     api, cache: certs, writer: writer, clock: o.Clock,
	}
}

// zeroDowntime is the default strategy: bundle.Plan, and re-issuance of
// clients through cert-manager's Issuing condition (what `cmctl renew`
// does), which never deletes anything.
type zeroDowntime struct {
	timings bundle.Timings
	api     client.Reader // uncached: a renewal acts on what is, not on a cache
	// cache is the client cache, for a first attempt (see Renew); nil when
	// clients are not tracked.
	cache  client.Reader
	writer client.Client
	clock  clock.PassiveClock
}

func (z *zeroDowntime) Name() string { return bundle.StrategyZeroDowntime }

func (z *zeroDowntime) Plan(gw bundle.Gateway, root *bundle.Root, clients bundle.Clients, now time.Time) bundle.Decision {
	return bundle.Plan(gw, root, clients, z.timings, now)
}

func (z *zeroDowntime) Phase(d bundle.Decision) string { return string(d.State.Phase) }

func (z *zeroDowntime) RenewalMethod() string { return "issuing-condition" }

func (z *zeroDowntime) RenewalMessage(clients, root string, qps float64) string {
	return fmt.Sprintf("re-issuing %s from root %s through cert-manager's Issuing condition (%.3g/s)", clients, root, qps)
}

// Renew sets Issuing=True on the client's Certificate unless cert-manager
// is already issuing it. The first attempt starts from the cached
// Certificate: the update carries its resourceVersion, so a cache behind
// the API server only costs a conflict, after which the Certificate is read
// fresh. That is one request per client instead of two.
func (z *zeroDowntime) Renew(ctx context.Context, key types.NamespacedName, _ *int) (bool, error) {
	triggered := false
	from := z.cache
	if from == nil {
		from = z.api
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt := &cmapi.Certificate{}
		reader := from
		from = z.api
		if err := reader.Get(ctx, key, crt); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if issuing(crt) {
			return nil // in flight: re-triggering would only restart it
		}
		setIssuing(crt, "ManuallyTriggered", "Re-issuance triggered by dualca: the CA root rotated", z.clock.Now())
		if err := z.writer.Status().Update(ctx, crt); err != nil {
			return err
		}
		triggered = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("setting Issuing on certificate %s: %w", key, err)
	}
	return triggered, nil
}
