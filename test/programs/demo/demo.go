package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dualca/dualca/bundle"
	"github.com/dualca/dualca/syncer"
	"github.com/dualca/dualca/test/lib/cluster"
	"github.com/dualca/dualca/test/lib/mtls"
)

// The demo world, and the timings dualca gets: seconds instead of minutes
// and days, so both rotations fit in well under a minute.
const (
	namespace        = "demo"
	rootName         = "root-ca"            // the root CA Certificate and its Secret
	issuerName       = "agents-ca"          // the CA Issuer of the clients, signing with rootName
	gatewayName      = "gateway-credential" // the Secret dualca writes and the gateway serves
	clientPrefix     = "agent"              // client Certificates and Secrets are agent-1 … agent-N
	clientLabel      = "dualca.io/client"
	clientLabelValue = "agent"

	trustPropagationDelay = 2 * time.Second
	serverSwitchGrace     = time.Minute
	renewalQPS            = 15
	renewalBurst          = 5
)

// waitPoll is how often a wait looks at what the recorder saw.
const waitPoll = 20 * time.Millisecond

// demo is one run: what it started, and what it saw.
type demo struct {
	o     options
	begin time.Time

	cluster *cluster.Cluster
	cache   ctrlcache.Cache
	rec     *recorder
	dualca  *dualcaProcess
	gateway *mtls.Gateway
	fleet   *mtls.Fleet
	clients []string
	view    *view
	sampler *sampler

	rotations []rotation // the rotations started, in order
	// fleetStats and gatewayStats are the handshake counts when the story
	// ended, before the clients were stopped.
	fleetStats   mtls.FleetStats
	gatewayStats mtls.GatewayStats
	ended        time.Time
	startup      time.Duration
	// stops undo what was started, run last first by teardown.
	stops []stopStep
}

// rotation is one root rotation the demo asked cert-manager for.
type rotation struct {
	from, to  string // root labels, "R1" → "R2"
	root      string // the new root's fingerprint
	requested time.Time
	// came says what the previous rotation was doing when this one came.
	came during
}

// during is what the previous rotation was doing when the next one came.
type during struct {
	what string // "every client holds an R2 certificate, the server still presents R1, …"; empty for the first
	// overlapping says the previous rotation was still in progress.
	overlapping bool
}

type stopStep struct {
	what string
	stop func() error
}

func newDemo(o options) *demo {
	return &demo{o: o, begin: time.Now(), view: newView(os.Stdout, o.verbose)}
}

// run sets the world up, plays the story, stops everything and prints the
// summary; it returns the exit code.
func (d *demo) run(ctx context.Context) int {
	// controller-runtime and envtest log through logr; the demo tells its
	// own story.
	logf.SetLogger(logr.Discard())
	err := d.play(ctx)
	d.view.close()
	if err != nil && ctx.Err() == nil {
		d.showLogs()
	}
	stopErr := d.teardown()
	if ctx.Err() != nil {
		return exitInterrupted
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo: FAILED:", errors.Join(err, stopErr))
		return exitFailed
	}
	s := d.summarize(stopErr)
	fmt.Print(s.text())
	return s.exitCode()
}

// play is the story: set up, two rotations, the second overlapping the
// first, and the clients handshaking all the while.
func (d *demo) play(ctx context.Context) error {
	if err := d.setUp(ctx); err != nil {
		return err
	}
	d.view.start(d.begin)
	d.sampler = startSampler(ctx, d)
	d.stops = append(d.stops, stopStep{"the progress view", func() error { d.sampler.stop(); return nil }})

	d.view.say("the gateway serves R1 and every client gets through; letting them handshake for a moment")
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	r2, err := d.rotate(ctx, during{})
	if err != nil {
		return err
	}
	came, err := d.overlapPoint(ctx, r2)
	if err != nil {
		return err
	}
	r3, err := d.rotate(ctx, came)
	if err != nil {
		return err
	}
	if err := d.converged(ctx, r3); err != nil {
		return err
	}
	d.view.say(fmt.Sprintf("%s is the only root left; the clients keep handshaking for %s", d.rec.label(r3), d.o.settle))
	if err := sleep(ctx, d.o.settle); err != nil {
		return err
	}
	// The counts end here: stopping the clients cuts handshakes short,
	// which the gateway would count as rejected.
	d.fleetStats, d.gatewayStats, d.ended = d.fleet.Stats(), d.gateway.Stats(), time.Now()
	return nil
}

// setUp starts the control plane with cert-manager, has cert-manager issue
// the root and the clients, runs dualca, and starts the gateway and the
// clients once dualca has written the gateway Secret.
func (d *demo) setUp(ctx context.Context) error {
	d.view.say("starting kube-apiserver, etcd and cert-manager's controller …")
	// The demo handles Ctrl-C itself (see main): a signal while the control
	// plane starts cancels ctx, and Start then stops what it started.
	cl, err := cluster.Start(ctx, cluster.Options{Timeout: d.o.timeout, NoSignalHandler: true})
	if err != nil {
		return fmt.Errorf("starting the cluster (make control-plane cert-manager builds it): %w", err)
	}
	d.cluster = cl
	d.stops = append(d.stops, stopStep{"cert-manager and the control plane", cl.Stop})
	d.view.say(fmt.Sprintf("control plane and cert-manager up in %s", seconds(time.Since(d.begin))))

	if err := cl.CreateNamespace(ctx, namespace); err != nil {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	if err := d.startRecorder(ctx); err != nil {
		return err
	}
	step := time.Now()
	if _, err := cl.CreateRootCA(ctx, namespace, rootName); err != nil {
		return fmt.Errorf("having cert-manager issue the root CA: %w", err)
	}
	if err := cl.CreateCAIssuer(ctx, namespace, issuerName, rootName); err != nil {
		return fmt.Errorf("creating the CA Issuer: %w", err)
	}
	d.clients, err = cl.CreateClients(ctx, namespace, issuerName, clientPrefix, d.o.clients, map[string]string{clientLabel: clientLabelValue})
	if err != nil {
		return fmt.Errorf("having cert-manager issue the clients: %w", err)
	}
	r1 := d.rec.currentRoot()
	d.view.say(fmt.Sprintf("cert-manager issued root CA %s/%s (%s) and %d client certificates from it in %s",
		namespace, rootName, d.rec.describe(r1), len(d.clients), seconds(time.Since(step))))

	if err := d.startDualca(ctx, r1); err != nil {
		return err
	}
	return d.startTraffic(ctx)
}

// startRecorder starts a cache of the demo namespace's Secrets (without
// their private keys) and Certificates: the recorder follows the Secrets
// through it, the progress view reads the state through it.
func (d *demo) startRecorder(ctx context.Context) error {
	scheme, err := syncer.Scheme()
	if err != nil {
		return err
	}
	c, err := ctrlcache.New(d.cluster.RESTConfig, ctrlcache.Options{
		Scheme:            scheme,
		DefaultNamespaces: map[string]ctrlcache.Config{namespace: {}},
		DefaultTransform:  ctrlcache.TransformStripManagedFields(),
		ByObject:          map[client.Object]ctrlcache.ByObject{&corev1.Secret{}: {Transform: withoutPrivateKey}},
	})
	if err != nil {
		return fmt.Errorf("creating the demo's cache: %w", err)
	}
	d.rec = newRecorder(d.o.clients)
	inf, err := c.GetInformer(ctx, &corev1.Secret{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(d.rec.handler()); err != nil {
		return err
	}
	cacheCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Start(cacheCtx) }()
	d.stops = append(d.stops, stopStep{"the demo's watches", func() error { stop(); return <-done }})
	if !c.WaitForCacheSync(ctx) {
		return errors.New("the demo's cache did not sync")
	}
	d.cache = c
	return nil
}

// withoutPrivateKey drops tls.key from a Secret as it enters the cache:
// the demo shows and checks certificates only, but for the gateway's key,
// which the monitor checks against its certificate (and never shows).
func withoutPrivateKey(obj any) (any, error) {
	if s, ok := obj.(*corev1.Secret); ok && s.Name != gatewayName {
		delete(s.Data, corev1.TLSPrivateKeyKey)
	}
	return obj, nil
}

// startDualca runs the dualca binary and waits until the gateway Secret
// serves and trusts root r1.
func (d *demo) startDualca(ctx context.Context, r1 string) error {
	args, err := dualcaArgs(d.cluster.Kubeconfig, d.o.legacy)
	if err != nil {
		return err
	}
	d.view.say(fmt.Sprintf("running %s", d.o.dualca))
	d.view.say("  " + strings.Join(args[1:], " "))
	d.dualca, err = startDualca(d.o.dualca, args, d.o.verbose)
	if err != nil {
		return err
	}
	d.stops = append(d.stops, stopStep{"dualca", d.dualca.stop})
	err = d.waitFor(ctx, "dualca to write the gateway Secret from R1", func() bool {
		st, _ := d.rec.gatewayState()
		return st.Root == r1 && st.Server == r1
	})
	if err != nil {
		return err
	}
	d.startup = d.rec.firstSeen(keyServer, r1).Sub(d.dualca.started)
	d.view.say(fmt.Sprintf("dualca wrote %s/%s %s after it started: serving and trusting R1", namespace, gatewayName, millis(d.startup)))
	return nil
}

// startTraffic starts the gateway on the gateway Secret and one client per
// client Secret, and waits until every client gets through.
func (d *demo) startTraffic(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(d.cluster.RESTConfig)
	if err != nil {
		return err
	}
	trafficCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	// The gateway watches its one Secret, as an SDS agent does; the
	// clients share one watch of the namespace, so that a few dozen of
	// them cost the API server one watch.
	d.gateway = mtls.NewGateway(mtls.OneObjectWatches(kube, namespace), gatewayName)
	if err := d.gateway.Start(trafficCtx); err != nil {
		stop()
		return err
	}
	shared := mtls.NewSharedWatch(kube, namespace)
	shared.Start(trafficCtx)
	d.fleet = mtls.NewFleet(shared, d.clients, d.gateway.Addr(), mtls.ClientOptions{Interval: d.o.interval})
	d.fleet.Start(trafficCtx)
	d.stops = append(d.stops, stopStep{"the clients and the gateway", func() error {
		stop()
		d.fleet.Wait()
		d.gateway.Wait()
		shared.Wait()
		return nil
	}})
	d.view.say(fmt.Sprintf("gateway listening on %s; %d clients handshaking with it every %s", d.gateway.Addr(), len(d.clients), d.o.interval))
	return d.waitFor(ctx, "every client to get through the gateway", func() bool {
		return d.fleet.Stats().Total.ConsecutiveSuccesses >= 2
	})
}

// rotate has cert-manager re-issue the root CA, with a new key as it does
// since 1.18, and returns the new root's fingerprint once the root Secret
// holds it.
func (d *demo) rotate(ctx context.Context, came during) (string, error) {
	from := d.rec.currentRoot()
	next := fmt.Sprintf("R%d", d.rec.roots()+1)
	n := len(d.rotations) + 1
	switch {
	case came.what == "":
		d.view.say(fmt.Sprintf("rotation %d: cert-manager re-issues the root CA (%s → %s)", n, d.rec.label(from), next))
	case came.overlapping:
		d.view.say(fmt.Sprintf("rotation %d, overlapping rotation %d: %s; cert-manager re-issues the root CA again (%s → %s)",
			n, n-1, came.what, d.rec.label(from), next))
	default:
		d.view.say(fmt.Sprintf("rotation %d: %s; cert-manager re-issues the root CA again (%s → %s)", n, came.what, d.rec.label(from), next))
	}
	r := rotation{from: d.rec.label(from), to: next, requested: time.Now(), came: came}
	root, err := d.cluster.RotateRoot(ctx, namespace, rootName)
	if err != nil {
		return "", fmt.Errorf("rotating the root: %w", err)
	}
	fp := bundle.Fingerprint(root)
	if err := d.waitFor(ctx, "the recorder to see the new root", func() bool { return d.rec.currentRoot() == fp }); err != nil {
		return "", err
	}
	r.root = fp
	d.rotations = append(d.rotations, r)
	d.view.say(fmt.Sprintf("the root Secret holds %s", d.rec.describe(fp)))
	return fp, nil
}

// overlapPoint waits until every client holds a certificate of root, and
// says what the rotation to root is doing then. With the zero-downtime
// strategy it is still in progress: the server still presents the old root,
// as it switches only once the clients have had the propagation delay to
// load theirs. With the legacy one it is over. Rotating at this point, and
// not while cert-manager is issuing a client, keeps cert-manager from
// signing a client with the next root before dualca has put that root in
// the gateway's bundle: a race between the two that is not dualca's.
func (d *demo) overlapPoint(ctx context.Context, root string) (during, error) {
	label := d.rec.label(root)
	err := d.waitFor(ctx, "every client to hold a certificate of "+label, func() bool {
		return d.rec.clientsOn(root) == len(d.clients)
	})
	if err != nil {
		return during{}, err
	}
	st, roots := d.rec.gatewayState()
	switch {
	case d.o.legacy:
		return during{what: fmt.Sprintf("every client holds an %s certificate (the legacy gateway moved to %s at once: nothing left in progress)", label, label)}, nil
	case st.Server == root:
		return during{what: fmt.Sprintf("every client holds an %s certificate and the server already presents it (too late to overlap)", label)}, nil
	}
	return during{overlapping: true, what: fmt.Sprintf("every client holds an %s certificate, the server still presents %s, the bundle holds %s",
		label, d.rec.label(st.Server), d.rec.labels(roots))}, nil
}

// converged waits until the rotation to root is over: the gateway trusts
// root alone and serves from it (zero-downtime: phase Steady), every client
// is on it, and every client gets through again.
func (d *demo) converged(ctx context.Context, root string) error {
	label := d.rec.label(root)
	err := d.waitFor(ctx, "the gateway to trust "+label+" alone and every client to be on it", func() bool {
		st, roots := d.rec.gatewayState()
		done := len(roots) == 1 && roots[0] == root && st.Server == root && d.rec.clientsOn(root) == len(d.clients)
		if !d.o.legacy {
			done = done && st.Phase == bundle.PhaseSteady
		}
		return done
	})
	if err != nil {
		return err
	}
	base := d.fleet.Stats().Total.Successes
	return d.waitFor(ctx, "every client to get through again", func() bool {
		t := d.fleet.Stats().Total
		return t.ConsecutiveSuccesses >= 2 && t.Successes > base+2*len(d.clients)
	})
}

// waitFor polls done until it holds. It gives up after the -timeout, when
// dualca exits, or when the demo is interrupted.
func (d *demo) waitFor(ctx context.Context, what string, done func() bool) error {
	deadline := time.Now().Add(d.o.timeout)
	var exited <-chan struct{}
	if d.dualca != nil {
		exited = d.dualca.exited
	}
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d.o.timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return fmt.Errorf("dualca exited (%s) while the demo waited for %s", exitStatus(d.dualca.err), what)
		case <-time.After(waitPoll):
		}
	}
	return nil
}

// teardown stops what was started, last first, and says how long it took.
func (d *demo) teardown() error {
	if len(d.stops) == 0 {
		return nil
	}
	begin := time.Now()
	var errs []error
	var stopped []string
	for i := len(d.stops) - 1; i >= 0; i-- {
		if err := d.stops[i].stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", d.stops[i].what, err))
		}
		stopped = append(stopped, d.stops[i].what)
	}
	fmt.Fprintf(os.Stderr, "stopped %s in %s\n", strings.Join(stopped, ", "), seconds(time.Since(begin)))
	return errors.Join(errs...)
}

// showLogs prints, when the story failed, what dualca logged and the end of
// cert-manager's log, before teardown removes it.
func (d *demo) showLogs() {
	if d.dualca != nil {
		fmt.Fprintln(os.Stderr, "dualca's log:")
		d.dualca.log.dump(os.Stderr)
	}
	if d.cluster != nil {
		if b, err := os.ReadFile(d.cluster.CertManagerLog); err == nil {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			fmt.Fprintln(os.Stderr, "end of cert-manager's log:")
			fmt.Fprintln(os.Stderr, strings.Join(lines[max(0, len(lines)-20):], "\n"))
		}
	}
}

// status reads where the gateway stands as `dualca status` does, from the
// demo's cache.
func (d *demo) status(ctx context.Context) (*syncer.Report, error) {
	return syncer.Status(ctx, d.cache, syncer.StatusOptions{
		GatewaySecret:    types.NamespacedName{Namespace: namespace, Name: gatewayName},
		ClientSelector:   labels.SelectorFromSet(labels.Set{clientLabel: clientLabelValue}),
		ClientNamespaces: []string{namespace},
	}, time.Now())
}

// sleep waits for d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// seconds formats d for people: "6.1s".
func seconds(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// millis formats a short d: "412 ms", or "2.4s" from a second on.
func millis(d time.Duration) string {
	if d >= time.Second {
		return seconds(d)
	}
	return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
}
