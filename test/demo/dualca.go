package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// stopTimeout is how long dualca gets to shut down after SIGTERM.
const stopTimeout = 10 * time.Second

// dualcaArgs are the flags dualca runs with in the demo: the demo's Secrets,
// short rotation timings, a poll interval long enough that every update seen
// comes from the watch, no metrics endpoint and health probes on a free port.
func dualcaArgs(kubeconfig string, legacy, verbose bool) ([]string, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("finding a free port for dualca's health probes: %w", err)
	}
	level := "error"
	if verbose {
		level = "info"
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--root-secret=" + rootKey.String(),
		"--gateway-secret=" + gatewayKey.String(),
		"--trust-propagation-delay=" + trustPropagationDelay.String(),
		"--server-switch-grace=" + serverSwitchGrace.String(),
		"--poll-interval=30s",
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--zap-log-level=" + level,
	}
	if legacy {
		args = append(args, "--cert-management-legacy")
	}
	return args, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
// only the demo, which then stops dualca before the control plane.
func startDualca(path string, args []string, verbose bool) (*dualcaProcess, error) {
	log := &prefixWriter{prefix: "dualca| "}
	if verbose {
		log.live = os.Stderr
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = ownProcessGroup()
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
type prefixWriter struct {
	prefix string
	live   io.Writer

	mu      sync.Mutex
	partial []byte
	kept    bytes.Buffer
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

func (w *prefixWriter) emit(line []byte) {
	out := io.Writer(&w.kept)
	if w.live != nil {
		out = w.live
	}
	fmt.Fprintf(out, "%s%s\n", w.prefix, line)
}

// dump writes what was kept to out (nothing when the output went out live).
func (w *prefixWriter) dump(out io.Writer) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.emit(w.partial)
		w.partial = nil
	}
	_, _ = w.kept.WriteTo(out)
}
