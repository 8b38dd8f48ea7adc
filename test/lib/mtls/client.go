package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ClientOptions tune a Client; the zero value is usable.
type ClientOptions struct {
	// Interval is the time between the starts of two attempts; 20ms when
	// zero. Each attempt is a full handshake on a new connection, which costs
	// client and gateway together about 1ms of CPU, 4ms under -race
	// (measured with ECDSA keys): 50 clients at 20ms saturate two cores, so
	// a fleet that size wants 200ms or more under -race.
	Interval time.Duration
	// Timeout bounds one attempt: dial, handshake and the gateway's byte;
	// 10s when zero. A handshake takes milliseconds; the bound is for a
	// gateway that hangs, not for a slow one: on two cores shared with a
	// compiler and a control plane a process can wait seconds for CPU, and
	// an attempt timed out only for that would count as a failed handshake.
	Timeout time.Duration
	// OnFailure, when set, is told of every failed attempt, with the leaf
	// the client presented: a caller that must tell one cause of failure
	// from another needs to know which credential failed, and when.
	OnFailure func(Failure)
}

// Failure is one failed attempt of a Client.
type Failure struct {
	// Client is the name of the client's Secret.
	Client string
	// Start is when the attempt began, before it dialled: the gateway
	// chose the credential it answered with after that.
	Start time.Time
	// Leaf is the client certificate the attempt presented.
	Leaf *x509.Certificate
	// Err is why it failed.
	Err error
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.Interval <= 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	return o
}

// Client is a remote agent: it loads its certificate, key and trusted roots
// from its own kubernetes.io/tls Secret and, while Run runs, handshakes with
// the gateway continuously. It verifies the gateway's chain against its
// ca.crt but not the host name, as agents that dial an address do.
type Client struct {
	secrets Secrets
	name    string
	addr    string
	opts    ClientOptions

	current atomic.Pointer[clientConfig]

	mu    sync.Mutex
	stats ClientStats
}

// clientConfig is one loaded version of the client's Secret.
type clientConfig struct {
	cred *credential
	tls  *tls.Config
}

// ClientStats is a snapshot of what a Client did.
type ClientStats struct {
	// Attempts counts handshakes tried: Successes + Failures.
	Attempts int
	// Successes counts handshakes the gateway accepted and the client too.
	Successes int
	// Failures counts handshakes that failed, whichever side refused.
	Failures int
	// NotReady counts the attempts skipped because no version of the Secret
	// had been loaded yet; they are not failures.
	NotReady int
	// Errors counts the failures by error text.
	Errors map[string]int
	// LastError is the error of the last failure.
	LastError string
	// ConsecutiveSuccesses is the number of successes since the last failure;
	// ConsecutiveFailures the number of failures since the last success.
	// Summed over a Fleet they are the smallest and the largest of its
	// clients.
	ConsecutiveSuccesses, ConsecutiveFailures int
	// Loads counts what became of the versions of the client's Secret.
	Loads
}

// NewClient returns a client of the gateway at addr that uses the Secret
// called name, read through secrets. Run runs it.
func NewClient(secrets Secrets, name, addr string, opts ClientOptions) *Client {
	return &Client{
		secrets: secrets,
		name:    name,
		addr:    addr,
		opts:    opts.withDefaults(),
		stats:   ClientStats{Errors: map[string]int{}},
	}
}

// Name is the name of the client's Secret.
func (c *Client) Name() string { return c.name }

// Certificate is the client's current leaf certificate, or nil before its
// Secret is loaded.
func (c *Client) Certificate() *x509.Certificate {
	if cfg := c.current.Load(); cfg != nil {
		return cfg.cred.chain[0]
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Errors = cloneCounts(s.Errors)
	return s
}

// Run watches the client's Secret and handshakes with the gateway every
// Interval until ctx is done. It returns once the watch has stopped too.
func (c *Client) Run(ctx context.Context) {
	wait := c.secrets.Watch(ctx, c.name, c.load)
	defer wait()
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	for {
		c.attempt(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// load takes a new version of the Secret into use for the next attempts.
func (c *Client) load(s *corev1.Secret) {
	c.mu.Lock()
	defer c.mu.Unlock()
	load(s, &c.current, func(cfg *clientConfig) string { return cfg.cred.version }, func(cred *credential) *clientConfig {
		return &clientConfig{cred: cred, tls: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// The gateway is dialled by address, so there is no name to check;
			// VerifyConnection does the chain verification instead.
			InsecureSkipVerify: true, //nolint:gosec // G402: VerifyConnection verifies the chain against the client's ca.crt
			VerifyConnection:   verifyGateway(cred.pool),
			// Always send the certificate, even when the gateway's list of
			// acceptable CAs does not name its issuer: the gateway must be the
			// one that decides, as with a real agent.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &cred.pair, nil
			},
			// No ClientSessionCache: no resumption, every handshake verifies.
		}}
	}, &c.stats.Loads)
}

// verifyGateway verifies the gateway's chain against roots: the leaf must
// chain to one of them, through the certificates the gateway sent after it.
func verifyGateway(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("gateway sent no certificate")
		}
		intermediates := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			intermediates.AddCert(c)
		}
		_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
			Roots:         roots,
			Intermediates: intermediates,
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			return fmt.Errorf("verifying the gateway: %w", err)
		}
		return nil
	}
}

// attempt makes one handshake and counts its outcome. An attempt cut short
// because ctx is done is not counted.
func (c *Client) attempt(ctx context.Context) {
	cfg := c.current.Load()
	if cfg == nil {
		c.mu.Lock()
		c.stats.NotReady++
		c.mu.Unlock()
		return
	}
	start := time.Now()
	err := c.handshake(ctx, cfg.tls)
	if ctx.Err() != nil {
		return
	}
	if err != nil && c.opts.OnFailure != nil {
		c.opts.OnFailure(Failure{Client: c.name, Start: start, Leaf: cfg.cred.chain[0], Err: err})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats.Attempts++
	if err == nil {
		c.stats.Successes++
		c.stats.ConsecutiveSuccesses++
		c.stats.ConsecutiveFailures = 0
		return
	}
	c.stats.Failures++
	c.stats.ConsecutiveFailures++
	c.stats.ConsecutiveSuccesses = 0
	c.stats.LastError = countError(c.stats.Errors, err)
}

func (c *Client) handshake(ctx context.Context, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	// Reading the byte does not watch ctx; this ends it when Run is stopped.
	defer context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })()
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	// In TLS 1.3 the gateway judges our certificate only now: its verdict
	// is either its byte or an alert.
	if _, err := io.ReadFull(tc, make([]byte, 1)); err != nil {
		return fmt.Errorf("waiting for the gateway's byte: %w", err)
	}
	return nil
}
