// Package cluster is a real kube-apiserver and etcd (envtest) serving
// cert-manager's CRDs, with cert-manager's controller
// (bin/cert-manager-controller, built by `make cert-manager`) running against
// them as a child process: the world of the end-to-end suite, the demo and
// the benchmark. Its helpers create issuers and certificates the way a user
// would and wait until cert-manager has acted on them.
//
// No webhook runs, so nothing is defaulted or validated: the helpers spell
// out every field, issuerRef kind and group included.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// Options tune the cluster; the zero value suits a test run from anywhere
// inside the repository after `make control-plane cert-manager`.
type Options struct {
	// AssetsDir holds kube-apiserver and etcd. Default: $KUBEBUILDER_ASSETS,
	// else the repository's bin/k8s/$KUBE_VERSION (see controlplane.Assets).
	AssetsDir string
	// CertManager is the controller binary. Default: the repository's
	// bin/cert-manager-controller.
	CertManager string
	// CertManagerArgs are appended to the controller's flags, e.g. "-v=4".
	CertManagerArgs []string
	// CRDDir holds cert-manager's CRDs. Default: deploy/crds of the
	// cert-manager module that the repository's go.mod requires.
	CRDDir string
	// RootDuration is the lifetime of the roots made by CreateRootCA.
	// Default: 2160h.
	RootDuration time.Duration
	// ClientDuration is the lifetime of the certificates made by
	// CreateClients. Default: 2160h.
	ClientDuration time.Duration
	// Timeout bounds each wait for cert-manager. Default: 30s.
	Timeout time.Duration
	// WithoutCertManager serves cert-manager's CRDs but runs no controller:
	// for measuring what dualca alone does to thousands of Certificates.
	WithoutCertManager bool
	// NoSignalHandler leaves SIGINT and SIGTERM to the caller, which must
	// then stop the cluster itself. By default they stop every running
	// cluster and end the process (see signals.go): right for a test binary,
	// but a program with children of its own (the demo) stops those first.
	NoSignalHandler bool
}

// Cluster is a running control plane with cert-manager.
type Cluster struct {
	// RESTConfig reaches the API server as an administrator.
	RESTConfig *rest.Config
	// Client is an uncached client that knows core and cert-manager types.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for an administrator, the
	// one cert-manager uses.
	Kubeconfig string
	// CertManagerLog is the path of cert-manager's standard output and
	// error, appended to by every StartCertManager.
	CertManagerLog string
	// Dir is a temporary directory holding both files, removed by Stop.
	Dir string

	// envMu is held while envtest starts; envStarting says it was started.
	envMu       sync.Mutex
	envStarting bool

	opts Options
	env  *envtest.Environment

	mu     sync.Mutex
	cm     *child // nil while cert-manager is stopped
	probes int

	// retriggers counts the failed issuances WaitReady triggered again.
	retriggers atomic.Int64
	// reissues counts the issuances beyond one per trigger (Reissues).
	reissues atomic.Int64

	stopOnce sync.Once
	stopErr  error
}

// child is a cert-manager process.
type child struct {
	cmd *exec.Cmd
	// stdin is the write end of the child's standard input: when this
	// process dies, however it dies, the pipe closes and the child stops.
	stdin *os.File
	done  chan struct{} // closed once the child has exited
	err   error         // its exit status, set before done is closed
}

// StartT is Start for a test: it fails the test on error and stops the
// cluster when the test ends, showing the end of cert-manager's log if the
// test failed. It also stops the cluster shortly before the test binary's
// -timeout, since a timed-out test binary exits without running cleanups.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	c, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	if deadline, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if d, ok := deadline.Deadline(); ok {
			guard := time.AfterFunc(time.Until(d)-10*time.Second, func() {
				fmt.Fprintln(os.Stderr, "cluster: the test binary is about to time out, stopping the cluster")
				_ = c.Stop()
			})
			t.Cleanup(func() { guard.Stop() })
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("end of cert-manager's log (%s):\n%s", c.CertManagerLog, tail(c.CertManagerLog, 60))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	return c
}

// Start starts envtest with cert-manager's CRDs, then cert-manager, and
// returns once cert-manager makes issuers Ready. On error it leaves nothing
// running.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "dualca-e2e-")
	if err != nil {
		return nil, err
	}
	// The API server's certificates live in a directory of ours rather than
	// one envtest makes and removes when the API server stops: so
	// RestartAPIServer brings it back with the serving certificate that every
	// client's configuration already trusts.
	certDir := filepath.Join(dir, "kube-apiserver")
	if err := os.Mkdir(certDir, 0o700); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	apiServer := &envtest.APIServer{CertDir: certDir}
	// Stopped with watches open, kube-apiserver waits for them to end and
	// outlasted envtest's 20 s stop timeout: it closes them after two
	// seconds instead, and their clients reconnect, as during a control
	// plane's upgrade.
	apiServer.Configure().Set("shutdown-watch-termination-grace-period", "2s")
	c := &Cluster{opts: opts, Dir: dir,
		Kubeconfig:     filepath.Join(dir, "kubeconfig"),
		CertManagerLog: filepath.Join(dir, "cert-manager.log"),
		env: &envtest.Environment{
			BinaryAssetsDirectory:    opts.AssetsDir,
			CRDDirectoryPaths:        []string{opts.CRDDir},
			ErrorIfCRDPathMissing:    true,
			ControlPlaneStartTimeout: time.Minute, // two cores, other tests running
			ControlPlane:             envtest.ControlPlane{APIServer: apiServer},
		},
	}
	defer func() {
		if err == nil {
			return
		}
		if _, statErr := os.Stat(c.CertManagerLog); statErr == nil {
			err = fmt.Errorf("%w\nend of cert-manager's log:\n%s", err, tail(c.CertManagerLog, 30))
		}
		err = errors.Join(err, c.Stop())
	}()
	if !opts.NoSignalHandler {
		track(c)
	}
	// Held while envtest starts, so that a Stop from the signal handler
	// waits for etcd and kube-apiserver to exist, then stops them.
	c.envMu.Lock()
	c.RESTConfig, err = c.env.Start()
	c.envStarting = true
	c.envMu.Unlock()
	if err != nil {
		return c, fmt.Errorf("starting the control plane from %s (run `make control-plane`): %w", opts.AssetsDir, err)
	}
	if err := controlplane.ExpectKubeVersion(c.RESTConfig); err != nil {
		return c, err
	}
	if err := c.writeKubeconfig(); err != nil {
		return c, err
	}
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), cmapi.AddToScheme(scheme)); err != nil {
		return c, err
	}
	if c.Client, err = client.New(c.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		return c, err
	}
	if opts.WithoutCertManager {
		return c, nil
	}
	return c, c.StartCertManager(ctx)
}

// writeKubeconfig writes a kubeconfig for a user of its own, as cert-manager
// would have in a cluster (as powerful as the test's, though).
func (c *Cluster) writeKubeconfig() error {
	user, err := c.env.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding cert-manager's user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(c.Kubeconfig, kubeconfig, 0o600)
}

// StartCertManager starts cert-manager and waits until it makes a new
// SelfSigned Issuer Ready: then its informers have synced and its
// controllers run.
func (c *Cluster) StartCertManager(ctx context.Context) error {
	probe, err := c.startChild()
	if err != nil {
		return err
	}
	return c.probe(ctx, probe)
}

// startChild starts the cert-manager process and names its probe Issuer.
func (c *Cluster) startChild() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cm != nil {
		return "", errors.New("cert-manager is already running")
	}
	logFile, err := os.OpenFile(c.CertManagerLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return "", err
	}
	defer func() { _ = logFile.Close() }() // the child has its own copy
	stdin, stdinWriter, err := os.Pipe()
	if err != nil {
		return "", err
	}
	defer func() { _ = stdin.Close() }()
	args := append([]string{"-kubeconfig", c.Kubeconfig, "-stop-on-stdin-close", "-v=2"}, c.opts.CertManagerArgs...)
	cm := &child{cmd: exec.Command(c.opts.CertManager, args...), stdin: stdinWriter, done: make(chan struct{})}
	cm.cmd.Stdin, cm.cmd.Stdout, cm.cmd.Stderr = stdin, logFile, logFile
	if err := cm.cmd.Start(); err != nil {
		_ = stdinWriter.Close()
		return "", fmt.Errorf("starting %s (run `make cert-manager`): %w", c.opts.CertManager, err)
	}
	go func() {
		cm.err = cm.cmd.Wait()
		close(cm.done)
	}()
	c.cm = cm
	c.probes++
	return fmt.Sprintf("cert-manager-probe-%d", c.probes), nil
}

// StopCertManager stops cert-manager (SIGTERM, then SIGKILL after 10s) and
// waits until it has exited. Stopping a stopped cert-manager does nothing.
func (c *Cluster) StopCertManager() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm := c.cm
	if cm == nil {
		return nil
	}
	c.cm = nil
	defer func() { _ = cm.stdin.Close() }()
	_ = cm.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cm.done:
	case <-time.After(10 * time.Second):
		_ = cm.cmd.Process.Kill()
		<-cm.done
		return errors.New("cert-manager ignored SIGTERM for 10s and was killed")
	}
	var exit *exec.ExitError
	if errors.As(cm.err, &exit) && exit.ExitCode() != 0 {
		return fmt.Errorf("cert-manager exited: %w", cm.err)
	}
	return nil
}

// RestartAPIServer stops kube-apiserver gracefully (SIGTERM, as a rolling
// update of a control plane does), leaves it down for down, and starts it
// again on the same address, with the same serving certificate and client
// CA, over the same etcd, which keeps running: every object survives, and
// clients (cert-manager, dualca, the test's own) see their watches and
// requests fail, then reconnect by themselves. It returns once the new
// API server answers /healthz. ctx bounds the whole restart.
//
// envtest's APIServer supports Start after Stop: Start prepares a new
// process from the same settings (port, arguments, the client CA of the
// users already added). What it does not keep by default is the directory
// of the serving certificate, which it makes on its own and removes on Stop;
// the restarted API server would then present a certificate from a new CA,
// which no existing client trusts. Start therefore gives it a directory of
// the cluster's.
func (c *Cluster) RestartAPIServer(ctx context.Context, down time.Duration) error {
	if c.env == nil || c.env.ControlPlane.APIServer == nil {
		return errors.New("the control plane is not running")
	}
	apiServer := c.env.ControlPlane.APIServer
	if err := apiServer.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("restarting kube-apiserver: %w", ctx.Err())
	case <-time.After(down):
	}
	started := make(chan error, 1)
	go func() { started <- apiServer.Start() }()
	select {
	case err := <-started:
		if err != nil {
			return fmt.Errorf("starting kube-apiserver again: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("starting kube-apiserver again: %w", ctx.Err())
	}
}

// exited is an error if cert-manager ought to run but has exited, so that
// waits fail at once instead of timing out.
func (c *Cluster) exited() error {
	c.mu.Lock()
	cm := c.cm
	c.mu.Unlock()
	if cm == nil {
		return nil
	}
	select {
	case <-cm.done:
		if cm.err == nil {
			return fmt.Errorf("cert-manager exited with status 0, see %s", c.CertManagerLog)
		}
		return fmt.Errorf("cert-manager exited (%w), see %s", cm.err, c.CertManagerLog)
	default:
		return nil
	}
}

// Stop stops cert-manager and the control plane and removes Dir. It can be
// called more than once, from any goroutine.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		c.stopErr = c.StopCertManager()
		c.envMu.Lock()
		started := c.envStarting // even a failed start may leave etcd running
		c.envMu.Unlock()
		if started {
			c.stopErr = errors.Join(c.stopErr, c.env.Stop())
		}
		c.stopErr = errors.Join(c.stopErr, os.RemoveAll(c.Dir))
		untrack(c)
	})
	return c.stopErr
}

// complete fills in the defaults.
func (o *Options) complete() error {
	if o.RootDuration == 0 {
		o.RootDuration = 2160 * time.Hour
	}
	if o.ClientDuration == 0 {
		o.ClientDuration = 2160 * time.Hour
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.AssetsDir == "" {
		d, err := controlplane.Assets()
		if err != nil {
			return err
		}
		o.AssetsDir = d
	}
	if o.CertManager == "" {
		root, err := controlplane.RepoRoot()
		if err != nil {
			return err
		}
		o.CertManager = filepath.Join(root, "bin", "cert-manager-controller")
	}
	if o.CRDDir == "" {
		d, err := controlplane.CertManagerCRDs()
		if err != nil {
			return err
		}
		o.CRDDir = d
	}
	return nil
}

// tail is the last n lines of a file, for a failed test's log.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}
