package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dualca/dualca/test/lib/controlplane"
	dualcarun "github.com/dualca/dualca/test/lib/run"
)

// process is a child of the benchmark: dualca or the baseline. It dies with
// the benchmark (Pdeathsig), so an interrupted run leaves nothing behind.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    dualcarun.Buffer
	exited chan struct{}
	// metrics and probes are the addresses of its metrics endpoint and
	// readiness probe, "" when it has none.
	metrics, probes string
	// pprof is the address of its profiling endpoints, "" when it has
	// none.
	pprof string
	// started is when it was started.
	started time.Time
}

// startProcess runs path with args.
func startProcess(name, path string, args ...string) (*process, error) {
	return startProcessEnv(name, path, nil, args...)
}

// startProcessEnv is startProcess with env (KEY=value) added to the
// benchmark's environment.
func startProcessEnv(name, path string, env []string, args ...string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(path, args...), exited: make(chan struct{})}
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// serverNames is the server certificate's name: the gateways are dialled
// at 127.0.0.1.
const serverNames = "--server-ip-addresses=127.0.0.1"

// startDualca runs the dualca binary against the cluster through
// kubeconfig, with its default logging (info, JSON), args added, and a
// metrics endpoint and readiness probe of its own.
func (b *bench) startDualca(kubeconfig string, args ...string) (*process, error) {
	return b.startDualcaIn(nil, kubeconfig, args...)
}

// startDualcaIn is startDualca inside the memory cgroup cg, none when nil.
func (b *bench) startDualcaIn(cg *memoryCgroup, kubeconfig string, args ...string) (*process, error) {
	metrics, err := controlplane.FreeAddress()
	if err != nil {
		return nil, err
	}
	probes, err := controlplane.FreeAddress()
	if err != nil {
		return nil, err
	}
	all := append([]string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=" + probes, serverNames}, args...)
	path := b.dualca
	if cg != nil {
		path, all = cg.wrap(path, all)
	}
	var env []string
	pprof := ""
	if b.opts.profiles != "" {
		if pprof, err = controlplane.FreeAddress(); err != nil {
			return nil, err
		}
		env = []string{"DUALCA_PPROF_ADDRESS=" + pprof}
	}
	p, err := startProcessEnv(systemDualca, path, env, all...)
	if err != nil {
		return nil, err
	}
	p.metrics, p.probes, p.pprof = metrics, probes, pprof
	return p, nil
}

// profile writes p's profile of kind (heap: the live heap at a collection
// made for it; profile: the CPU over seconds) to the file name of the
// -profiles directory; nothing without one. A profile that cannot be had
// fails the step: a run asked for it.
func (b *bench) profile(ctx context.Context, p *process, kind string, seconds int, name string) error {
	if b.opts.profiles == "" {
		return nil
	}
	if p.pprof == "" {
		return fmt.Errorf("profiling %s: it serves no profile", p.name)
	}
	url := fmt.Sprintf("http://%s/debug/pprof/%s?gc=1", p.pprof, kind)
	if seconds > 0 {
		url = fmt.Sprintf("http://%s/debug/pprof/%s?seconds=%d", p.pprof, kind, seconds)
	}
	path := filepath.Join(b.opts.profiles, name+".pb.gz")
	if err := dualcarun.FetchTo(ctx, path, url); err != nil {
		return fmt.Errorf("profiling %s: %w", p.name, err)
	}
	b.log("wrote %s", path)
	return nil
}

// ready reports whether the process's readiness probe answers 200.
func (p *process) ready(ctx context.Context) bool {
	if p.probes == "" {
		return false
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.probes+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// cpu is the CPU time the process has used, user and system, from /proc.
func (p *process) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, errors.New("unexpected /proc stat")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, 100 on Linux.
const clockTicks = 100

// stop ends the process with SIGTERM, and SIGKILL after 10 s.
func (p *process) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// alive fails when the process ended before it was told to.
func (p *process) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited early: %s\n%s", p.name, p.cmd.ProcessState, tailOf(p.log.String(), 20))
	default:
		return nil
	}
}

// rss is the process's resident set size in bytes, from /proc.
func (p *process) rss() (int64, error) { return p.status("VmRSS") }

// peakRSS is the highest resident set size the process has had, in bytes.
func (p *process) peakRSS() (int64, error) { return p.status("VmHWM") }

// status reads a size field of the process's /proc status, in bytes.
func (p *process) status(field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc status", field)
}

// scrape returns the text of the process's metrics endpoint.
func (p *process) scrape(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}

func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
