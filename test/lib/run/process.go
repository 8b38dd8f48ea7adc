package run

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// Process is dualca's real binary running as a child of the test process:
// for what only a process can show, such as being killed with SIGKILL in the
// middle of a rotation, or two replicas electing a leader.
type Process struct {
	// Pid is the child's process id.
	Pid int

	cmd  *exec.Cmd
	logs *Buffer
	done chan struct{} // closed once the child has exited
	err  error         // its exit status, set before done is closed

	mu    sync.Mutex
	ended string // "killed" or "stopped" once the test asked for the end
}

// stopTimeout is how long Stop waits after SIGTERM before SIGKILL: dualca
// releases its lease and returns well within it.
const stopTimeout = 10 * time.Second

// readyTimeout bounds how long StartProcess waits for dualca to be ready.
const readyTimeout = time.Minute

// StartProcess builds dualca (once per test binary, see Binary), starts it
// with args and --kubeconfig=kubeconfig, and returns once it serves: its
// readiness endpoint answers 200, which dualca does once it has brought the
// gateway Secret in sync, or at once as a standby replica. A test that
// acts on the process or on what it writes right after never races its
// start-up. The endpoint is the --health-probe-bind-address of args, or a
// free local address when args give none or "0". Its standard output and
// error are collected (Log). When the test ends it is stopped, its log is
// checked to hold no certificate or key material and is shown if the test
// failed; a process that exited without being asked to fails the test. On
// Linux it is also killed when the test process dies, however that
// happens.
func StartProcess(t testing.TB, kubeconfig string, args ...string) *Process {
	t.Helper()
	return StartProcessEnv(t, kubeconfig, nil, args...)
}

// StartProcessEnv is StartProcess with env (KEY=value) added to the
// environment the process inherits: a variable dualca reads apart from
// its flags, such as one per replica.
func StartProcessEnv(t testing.TB, kubeconfig string, env []string, args ...string) *Process {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("building dualca: %v", err)
	}
	args, probes, err := withProbes(args)
	if err != nil {
		t.Fatalf("finding an address for dualca's health probes: %v", err)
	}
	p := &Process{logs: &Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, append(args, "--kubeconfig="+kubeconfig)...)
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
	// One writer for both: exec then copies both through one pipe, in order.
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := StartChild(p.cmd); err != nil {
		t.Fatalf("starting dualca: %v", err)
	}
	p.Pid = p.cmd.Process.Pid
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		unasked := p.exitedUnasked()
		stopErr := p.Stop()
		if unasked {
			t.Errorf("dualca (pid %d) exited by itself: %v", p.Pid, p.err)
		} else if stopErr != nil {
			t.Errorf("dualca (pid %d): %v", p.Pid, stopErr)
		}
		// Secrets stay secret: no PEM, not even a line of one, in the log.
		if log := p.Log(); strings.Contains(log, "-----BEGIN") || strings.Contains(log, "MIIB") {
			t.Errorf("dualca's log (pid %d) contains certificate or key material", p.Pid)
		}
		if t.Failed() {
			t.Logf("dualca log (pid %d, %s):\n%s", p.Pid, p.how(), p.Log())
		}
	})
	if err := p.waitReady(probes); err != nil {
		t.Fatalf("dualca (pid %d): %v", p.Pid, err)
	}
	return p
}

// probesFlag is dualca's flag for the address of its health endpoints.
const probesFlag = "--health-probe-bind-address="

// withProbes returns args with a health endpoint to wait on, and its
// address: the last one args give, else a free local address added.
func withProbes(args []string) ([]string, string, error) {
	args = slices.Clone(args)
	addr := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, probesFlag); ok {
			addr = v
		}
	}
	if addr != "" && addr != "0" {
		return args, addr, nil
	}
	addr, err := controlplane.FreeAddress()
	if err != nil {
		return nil, "", err
	}
	return append(args, probesFlag+addr), addr, nil
}

// waitReady waits until GET /readyz at addr answers 200, failing at once
// if the process exits, and after readyTimeout.
func (p *Process) waitReady(addr string) error {
	err := WaitServing("http://"+addr+"/readyz", readyTimeout, p.done)
	if errors.Is(err, ErrExited) {
		return fmt.Errorf("exited before it was ready: %w", p.err)
	}
	return err
}

// Kill sends SIGKILL and waits until the process is gone: no cleanup of any
// kind runs in it, as when a node dies or the OOM killer strikes. Killing an
// ended process does nothing.
func (p *Process) Kill() {
	p.end("killed", syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, as the kubelet does, and waits for the exit; after
// stopTimeout it kills the process and says so. It returns an error when
// dualca did not exit cleanly. Stopping an ended process does nothing.
func (p *Process) Stop() error {
	// Terminate sends the one SIGTERM: a second one, while dualca shuts
	// down, makes controller-runtime's signal handler exit at once with 1.
	if !p.end("stopped", 0) {
		return nil
	}
	if Terminate(p.cmd, p.done, stopTimeout) {
		return fmt.Errorf("ignored SIGTERM for %s and was killed", stopTimeout)
	}
	if p.err != nil {
		return fmt.Errorf("exited uncleanly after SIGTERM: %w", p.err)
	}
	return nil
}

// Reap accepts that the process exited by itself, for why (as a
// replica that lost its leader lease exits, for its pod to be restarted):
// the end of the test then reports no failure for it. It reports whether
// the process had exited without being asked.
func (p *Process) Reap(why string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != "" || !p.Exited() {
		return false
	}
	p.ended = why
	return true
}

// Exited reports whether the process has exited, for whatever reason.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitsWithin reports whether the process has exited, or exits within d.
func (p *Process) ExitsWithin(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Log is what dualca wrote to its standard output and error so far.
func (p *Process) Log() string { return p.logs.String() }

// end records why the process ends and sends it sig (none when 0), unless
// it had ended or been asked to already; it reports whether it was asked
// now.
func (p *Process) end(why string, sig syscall.Signal) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != "" || p.Exited() {
		if p.ended == "" {
			p.ended = "exited"
		}
		return false
	}
	p.ended = why
	if sig != 0 {
		_ = p.cmd.Process.Signal(sig)
	}
	return true
}

// exitedUnasked reports whether the process exited before the test asked.
func (p *Process) exitedUnasked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ended == "" && p.Exited()
}

// how tells how the process ended, for its log's heading.
func (p *Process) how() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended == "" {
		return "running"
	}
	return fmt.Sprintf("%s, exit status %v", p.ended, p.err)
}

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/dualca once per test binary and returns its path. The
// build cache makes it quick after the first time. The binary goes to a
// directory of the temporary directory named after the repository: a test
// binary has no hook to remove a directory of its own when it exits, and
// one binary per checkout, replaced by every build, leaves nothing to pile
// up. It is built beside and renamed into place, so a test binary of
// another package building at the same moment never runs half a file.
//
// With $DUALCA_BINARY set, that binary runs instead (`make soak` runs
// bin/dualca, as built by make).
func Binary() (string, error) {
	if bin := os.Getenv("DUALCA_BINARY"); bin != "" {
		return bin, nil
	}
	build.once.Do(func() {
		root, err := controlplane.RepoRoot()
		if err != nil {
			build.err = err
			return
		}
		sum := sha256.Sum256([]byte(root))
		dir := filepath.Join(os.TempDir(), "dualca-test-"+hex.EncodeToString(sum[:6]))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			build.err = err
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("dualca.%d.tmp", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/dualca")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp)
			build.err = fmt.Errorf("go build ./cmd/dualca: %w\n%s", err, out)
			return
		}
		build.path = filepath.Join(dir, "dualca")
		if err := os.Rename(tmp, build.path); err != nil {
			build.err = errors.Join(err, os.Remove(tmp))
		}
	})
	return build.path, build.err
}
