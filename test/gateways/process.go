package gateways

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dualca/dualca/test/lib/run"
)

// ServerName is the DNS name the gateways serve and the clients check: the
// root Certificate carries it, since dualca's server leaf copies the
// root's SANs. Once dualca takes the leaf's names as a flag of their own,
// this is the one value to pass there instead.
const ServerName = "gateway.dualca.test"

// Server is a running gateway, whichever it is.
type Server interface {
	// Addr is where it listens, 127.0.0.1:port.
	Addr() string
	// Expect is the HTTP status it answers a client it let through.
	Expect() int
	// Refused counts the reloads it refused (or, reading Kubernetes
	// itself, the configurations it rejected); Problems says what they were.
	Refused() int
	Problems() string
}

// proc is a gateway process started by a test: its output goes to a log
// file; it is stopped with SIGTERM (then SIGKILL) when the test ends.
type proc struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
	err    error
}

// startProc starts name with args, its output appended to log.
func startProc(log, name string, args ...string) (*proc, error) {
	return startCmd(log, exec.Command(name, args...))
}

// startCmd starts cmd as a child that dies with the test, its output
// appended to log.
func startCmd(log string, cmd *exec.Cmd) (*proc, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	p := &proc{cmd: cmd, log: log, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := run.StartChild(p.cmd); err != nil {
		return nil, fmt.Errorf("starting %s (run `make gateway-tools`): %w", cmd.Path, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// stop terminates the process and waits for it.
func (p *proc) stop() { run.Terminate(p.cmd, p.exited, 10*time.Second) }

// alive is an error if the process has exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited (%w); end of its log:\n%s", filepath.Base(p.cmd.Path), p.err, tailFile(p.log, 20))
	default:
		return nil
	}
}

// waitTLS waits until addr completes a TLS handshake's server side (the
// server's certificate is not checked: this only says it serves), failing
// early when p exits.
func waitTLS(ctx context.Context, p *proc, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if p != nil {
			if err := p.alive(); err != nil {
				return err
			}
		}
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: time.Second},
			Config: &tls.Config{InsecureSkipVerify: true, ServerName: ServerName}} //nolint:gosec // G402: a readiness probe, not a client
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s does not serve TLS within %s: %w", addr, timeout, last)
}

// refusals counts refused reloads and keeps the last reason, shared by the
// gateways that reload.
type refusals struct {
	mu   sync.Mutex
	n    int
	last string
}

func (r *refusals) add(err error) error {
	if err != nil {
		r.mu.Lock()
		r.n++
		r.last = err.Error()
		r.mu.Unlock()
	}
	return err
}

// Refused is how many reloads were refused.
func (r *refusals) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Problems is the last refusal's reason.
func (r *refusals) Problems() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// command runs name with args and returns an error holding its output if
// it fails.
func command(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// tailFile is the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
