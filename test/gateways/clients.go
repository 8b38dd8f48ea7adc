package gateways

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// attemptTimeout bounds one handshake and request.
const attemptTimeout = 10 * time.Second

// Stack is a client TLS stack other than Go's: a command that loads the
// client's projected files (tls.crt, tls.key, ca.crt in vol), handshakes
// with addr presenting ServerName, checks the server's chain against
// ca.crt and its name, sends one request and reads the answer's status.
type Stack struct {
	// Name is its name in the report (the command and its TLS library).
	Name string
	// Attempt runs one handshake and request and returns the HTTP status
	// read, or an error.
	Attempt func(ctx context.Context, vol, addr string) (int, error)
}

// Curl is curl with OpenSSL: --resolve sends ServerName to 127.0.0.1, so
// the name checked is ServerName.
var Curl = Stack{Name: "curl (OpenSSL)", Attempt: curlAttempt}

// GnuTLS is gnutls-cli: SNI and the name it verifies are ServerName; the
// request goes in on its standard input.
var GnuTLS = Stack{Name: "gnutls-cli (GnuTLS)", Attempt: gnutlsAttempt}

// Stacks are the client stacks the suite runs against every gateway.
var Stacks = []Stack{Curl, GnuTLS}

func curlAttempt(ctx context.Context, vol, addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
		"--max-time", strconv.Itoa(int(attemptTimeout/time.Second)),
		"--resolve", ServerName+":"+port+":"+host,
		"--cacert", filepath.Join(vol, "ca.crt"), "--cert", filepath.Join(vol, "tls.crt"), "--key", filepath.Join(vol, "tls.key"),
		"https://"+ServerName+":"+port+"/")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("curl: %s", firstLine(stderr.String(), err))
	}
	return strconv.Atoi(strings.TrimSpace(stdout.String()))
}

func gnutlsAttempt(ctx context.Context, vol, addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "gnutls-cli", "--port", port,
		"--sni-hostname", ServerName, "--verify-hostname", ServerName,
		"--x509cafile", filepath.Join(vol, "ca.crt"),
		"--x509certfile", filepath.Join(vol, "tls.crt"), "--x509keyfile", filepath.Join(vol, "tls.key"),
		host)
	cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: " + ServerName + "\r\nConnection: close\r\n\r\n")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	for line := range strings.Lines(out.String()) {
		if rest, ok := strings.CutPrefix(line, "HTTP/1.1 "); ok && len(rest) >= 3 {
			return strconv.Atoi(rest[:3])
		}
	}
	return 0, fmt.Errorf("gnutls-cli: %s", gnutlsError(out.String(), err))
}

// gnutlsError is the line of gnutls-cli's output that says what failed:
// its verdict on the server's certificate if it gave one, else its first
// fatal error.
func gnutlsError(out string, err error) string {
	for _, mark := range []string{"NOT trusted", "*** "} {
		for line := range strings.Lines(out) {
			if strings.Contains(line, mark) {
				return strings.TrimSpace(line)
			}
		}
	}
	return firstLine("", err)
}

// firstLine is the first line of s, else err's text.
func firstLine(s string, err error) string {
	if line, _, _ := strings.Cut(strings.TrimSpace(s), "\n"); line != "" {
		return line
	}
	if err != nil {
		return err.Error()
	}
	return "no answer"
}

// Pair is one client of one stack handshaking with one gateway in a loop,
// counting every attempt: nothing is retried, nothing is set aside.
type Pair struct {
	Gateway, Stack string
	stack          Stack
	vol            string
	server         Server

	mu    sync.Mutex
	stats PairStats
}

// PairStats count a pair's attempts since it started or since Mark.
type PairStats struct {
	Attempts, Failures, ConsecutiveOK int
	// TornLoads counts the loads of the client's files that straddled a
	// swap of its volume (tls.crt of one version, tls.key of the next)
	// and were read again, as an agent that loads its credential whole
	// does; they are no handshake.
	TornLoads int
	// Errors counts the failures by what the client said.
	Errors map[string]int
}

// NewPair is a pair handshaking with server as the client whose files are
// in vol.
func NewPair(gateway string, stack Stack, vol string, server Server) *Pair {
	return &Pair{Gateway: gateway, Stack: stack.Name, stack: stack, vol: vol, server: server,
		stats: PairStats{Errors: map[string]int{}}}
}

// Run attempts every interval until ctx ends or max attempts were made.
// Before each attempt the client loads its files whole, one version of
// the volume (see load), into a directory of its own that the TLS stack
// reads: curl or gnutls-cli opening tls.crt and tls.key themselves could
// open them across a swap, a client's own torn read and no handshake.
func (p *Pair) Run(ctx context.Context, interval time.Duration, maxAttempts int) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	own, err := os.MkdirTemp("", "dualca-pair-")
	if err != nil {
		p.count(fmt.Errorf("making the client's directory: %w", err))
		return
	}
	defer func() { _ = os.RemoveAll(own) }()
	for range maxAttempts {
		status, err := 0, p.load(own)
		if err == nil {
			status, err = p.stack.Attempt(ctx, own, p.server.Addr())
		}
		if ctx.Err() != nil {
			return // cut short by the end of the test, not by the gateway
		}
		if err == nil && status != p.server.Expect() {
			err = fmt.Errorf("HTTP status %d, not %d", status, p.server.Expect())
		}
		p.count(err)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// maxLoads bounds the reads of one load: a volume swapped that often in
// one load is a failure of the load, counted as one.
const maxLoads = 5

// load copies the client's files of one version of its volume into own:
// read through the ..data link, then the link read again; a load that
// straddled a swap is counted (TornLoads) and read again.
func (p *Pair) load(own string) error {
	for range maxLoads {
		before, err := os.Readlink(filepath.Join(p.vol, dataLink))
		if err != nil {
			return fmt.Errorf("loading the client's files: %w", err)
		}
		files := map[string][]byte{}
		for _, name := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if files[name], err = os.ReadFile(filepath.Join(p.vol, before, name)); err != nil {
				break
			}
		}
		after, _ := os.Readlink(filepath.Join(p.vol, dataLink))
		if err != nil || after != before {
			p.mu.Lock()
			p.stats.TornLoads++
			p.mu.Unlock()
			continue
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(own, name), data, 0o600); err != nil {
				return fmt.Errorf("loading the client's files: %w", err)
			}
		}
		return nil
	}
	return fmt.Errorf("loading the client's files: the volume was swapped during %d reads in a row", maxLoads)
}

func (p *Pair) count(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Attempts++
	if err == nil {
		p.stats.ConsecutiveOK++
		return
	}
	p.stats.Failures++
	p.stats.ConsecutiveOK = 0
	p.stats.Errors[err.Error()]++
}

// Stats is a snapshot of the counts.
func (p *Pair) Stats() PairStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Errors = map[string]int{}
	for k, v := range p.stats.Errors {
		s.Errors[k] = v
	}
	return s
}

// Mark starts the counts afresh and returns those until now: the suite
// counts from the moment every gateway served every client, so that the
// start-up of a server on a busy machine is not counted as a failure.
func (p *Pair) Mark() PairStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	p.stats = PairStats{Errors: map[string]int{}, ConsecutiveOK: s.ConsecutiveOK}
	return s
}
