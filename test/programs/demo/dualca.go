package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// stopTimeout is how long dualca gets to shut down after SIGTERM.
const stopTimeout = 10 * time.Second

// dualcaArgs are the flags dualca runs with in the demo, as an operator
// would set them but with timings in seconds: the demo's Secrets and
// clients, a propagation delay long enough for the gateway to reload, a
// switch grace long enough that the server switches because the clients are
// ready, never because time ran out, and a poll interval longer than the
// demo, so that everything seen comes from the watches. Its log is at info
// level: kept, shown with -v or when it fails, and checked for key material.
func dualcaArgs(kubeconfig string, legacy bool) ([]string, error) {
	probes, err := controlplane.FreeAddress()
	if err != nil {
		return nil, fmt.Errorf("finding a free port for dualca's health probes: %w", err)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--root-secret=" + namespace + "/" + rootName,
		"--gateway-secret=" + namespace + "/" + gatewayName,
		"--server-ip-addresses=127.0.0.1", // the gateway is dialled there
		"--client-selector=" + clientLabel + "=" + clientLabelValue,
		"--client-namespaces=" + namespace,
		"--trust-propagation-delay=" + trustPropagationDelay.String(),
		"--server-switch-grace=" + serverSwitchGrace.String(),
		"--renewal-qps=" + strconv.FormatFloat(renewalQPS, 'f', -1, 64),
		"--renewal-burst=" + strconv.Itoa(renewalBurst),
		"--poll-interval=5m",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=" + probes,
		"--zap-log-level=info",
	}
	if legacy {
		args = append(args, "--cert-management-legacy")
	}
	return args, nil
}

// dualcaProcess is the running dualca binary.
type dualcaProcess struct {
	cmd     *exec.Cmd
	log     *prefixWriter
	started time.Time
	exited  chan struct{} // closed when the process has ended
	err     error         // what Wait returned; read only after exited is closed
}

// startDualca runs dualca in its own process group, so that Ctrl-C reaches
// only the demo, which then stops dualca before the control plane; should
// the demo die without stopping it, the kernel stops it (see childAttrs).
func startDualca(path string, args []string, verbose bool) (*dualcaProcess, error) {
	log := &prefixWriter{prefix: "dualca| "}
	if verbose {
		log.live = os.Stderr
	}
	cmd := exec.Command(path, args...) //nolint:gosec // G204: running the binary given with -dualca is the point
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttrs()
	p := &dualcaProcess{cmd: cmd, log: log, started: time.Now(), exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting dualca: %w", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop sends SIGTERM and waits for dualca to end. dualca's log is shown when
// it ended by itself, ended with an error, or had to be killed.
func (p *dualcaProcess) stop() error {
	select {
	case <-p.exited:
		p.log.dump(os.Stderr)
		return fmt.Errorf("dualca exited before it was told to stop: %s", exitStatus(p.err))
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.exited:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.log.dump(os.Stderr)
		return fmt.Errorf("dualca did not stop within %s of SIGTERM and was killed", stopTimeout)
	}
	if p.err != nil {
		p.log.dump(os.Stderr)
		return fmt.Errorf("dualca stopped with %s", exitStatus(p.err))
	}
	return nil
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// prefixWriter collects a process's output line by line, each line prefixed.
// With live set, lines go there at once; otherwise they are kept for dump.
// Either way it counts the lines that carry key or certificate material.
type prefixWriter struct {
	prefix string
	live   io.Writer

	mu      sync.Mutex
	partial []byte
	kept    bytes.Buffer
	lines   int
	leaks   int
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.emit(w.partial[:i])
		w.partial = w.partial[i+1:]
	}
}

// pemMarkers betray a certificate or key in a line: a PEM header, or the
// start of a base64 DER body (certificates and PKCS #8 keys "MII…", SEC 1
// P-256 keys "MHcC…").
var pemMarkers = [][]byte{[]byte("-----BEGIN"), []byte("MII"), []byte("MHcC")}

func (w *prefixWriter) emit(line []byte) {
	w.lines++
	for _, m := range pemMarkers {
		if bytes.Contains(line, m) {
			w.leaks++
			break
		}
	}
	out := io.Writer(&w.kept)
	if w.live != nil {
		out = w.live
	}
	// A lost line of dualca's log is no reason to stop dualca.
	_, _ = fmt.Fprintf(out, "%s%s\n", w.prefix, line)
}

// dump writes what was kept to out (nothing when the output went out live).
func (w *prefixWriter) dump(out io.Writer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushPartial()
	_, _ = w.kept.WriteTo(out)
}

// counts returns the lines written and those with key or certificate
// material in them.
func (w *prefixWriter) counts() (lines, leaks int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushPartial()
	return w.lines, w.leaks
}

func (w *prefixWriter) flushPartial() {
	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
}
