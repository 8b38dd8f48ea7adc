package gateways

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// HAProxy is Debian's HAProxy (OpenSSL) in master-worker mode (-W) serving
// mTLS from the volume, reloaded as in production: `haproxy -c` checks the
// configuration and files, SIGUSR2 makes the master start a new worker,
// and the master CLI (`show proc`) says whether it did. Its certificate is
// `server.pem` with the key beside it as `server.pem.key`, which HAProxy
// loads by itself: the volume's items give the files those names.
var HAProxy = FileGateway{
	Name:   "haproxy",
	Layout: func() (string, string, string) { return "server.pem", "server.pem.key", "ca.crt" },
	Start:  startHAProxy,
}

type haproxy struct {
	p      *proc
	conf   string
	master string // the master CLI's socket
}

// haproxyConf answers 200 to a client it let through; its log goes to
// standard error, so into the process's log file.
const haproxyConf = `global
	log stderr format raw local0 notice
defaults
	mode http
	log global
	timeout connect 5s
	timeout client 10s
	timeout server 10s
frontend gateway
	bind %s ssl crt %[2]s/server.pem ca-file %[2]s/ca.crt verify required
	http-request return status 200 content-type text/plain string through
`

func startHAProxy(ctx context.Context, dir, vol, addr string) (reloader, error) {
	h := &haproxy{conf: filepath.Join(dir, "haproxy.cfg"), master: filepath.Join(dir, "master.sock")}
	if err := os.WriteFile(h.conf, fmt.Appendf(nil, haproxyConf, addr, vol), 0o600); err != nil {
		return nil, err
	}
	if err := command(ctx, "haproxy", "-c", "-q", "-f", h.conf); err != nil {
		return nil, err
	}
	p, err := startProc(filepath.Join(dir, "haproxy.log"), "haproxy", "-W", "-db", "-f", h.conf, "-S", h.master)
	if err != nil {
		return nil, err
	}
	h.p = p
	if err := waitTLS(ctx, p, addr, time.Minute); err != nil {
		h.Stop()
		return nil, err
	}
	return h, nil
}

// Reload checks the configuration, signals the master and waits until
// `show proc` lists a new worker; a failed reload the master counts, or no
// new worker within 15 s, is a refusal.
func (h *haproxy) Reload(ctx context.Context) error {
	if err := h.p.alive(); err != nil {
		return err
	}
	before, err := h.showProc()
	if err != nil {
		return err
	}
	if err := command(ctx, "haproxy", "-c", "-f", h.conf); err != nil {
		return err
	}
	if err := h.p.cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		after, err := h.showProc()
		switch {
		case err != nil: // the master re-executes itself: its CLI comes back
		case after.failed > before.failed:
			return fmt.Errorf("haproxy's master failed to reload: %s", tailFile(h.p.log, 3))
		case after.worker != "" && after.worker != before.worker:
			return nil
		}
		select {
		case <-ctx.Done():
			return nil // the test is over: not a refusal
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("haproxy started no new worker within 15 s of SIGUSR2: %s", tailFile(h.p.log, 3))
}

// procState is what `show proc` says: the current worker's pid and how
// many reloads failed.
type procState struct {
	worker string
	failed int
}

// showProc asks the master CLI `show proc`.
func (h *haproxy) showProc() (procState, error) {
	conn, err := net.DialTimeout("unix", h.master, time.Second)
	if err != nil {
		return procState{}, err
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, "show proc\n"); err != nil {
		return procState{}, err
	}
	// The master answers once the request is over: the write side closed.
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		return procState{}, err
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		return procState{}, err
	}
	return parseShowProc(string(out)), nil
}

// parseShowProc reads the master's failed count ("1 [failed: 0]") and the
// first pid under "# workers".
func parseShowProc(out string) procState {
	var st procState
	inWorkers := false
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case strings.HasPrefix(line, "# workers"):
			inWorkers = true
		case strings.HasPrefix(line, "#"):
			inWorkers = false
		case len(fields) > 1 && fields[1] == "master":
			if i := strings.Index(line, "[failed: "); i >= 0 {
				_, _ = fmt.Sscanf(line[i:], "[failed: %d]", &st.failed)
			}
		case inWorkers && st.worker == "":
			st.worker = fields[0]
		}
	}
	return st
}

func (h *haproxy) Stop() { h.p.stop() }
