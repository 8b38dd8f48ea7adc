package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/dualca/dualca/bundle"
)

// handshakeTimeout bounds one connection on the gateway, so that a client
// that stops talking cannot hold a goroutine. Longer than a Client's
// default Timeout, so that a slow attempt is ended by the client's bound
// and counted there, not cut off by the gateway.
const handshakeTimeout = 15 * time.Second

// errNotLoaded is the handshake error of a gateway that has no credential:
// Start returns only once one is loaded, so a gateway never answers with it.
var errNotLoaded = errors.New("gateway has no credential loaded yet")

// Gateway is a TLS server on 127.0.0.1 that requires client certificates,
// serving the credential of one gateway Secret (see the package comment).
// After a successful handshake it writes one byte and closes: in TLS 1.3 the
// client's handshake completes before the server has verified the client's
// certificate, so that byte is how a client learns it was accepted.
type Gateway struct {
	secrets Secrets
	name    string

	ln      net.Listener
	current atomic.Pointer[gatewayConfig]
	// loaded is closed once current holds a first credential.
	loaded     chan struct{}
	loadedOnce sync.Once
	wg         sync.WaitGroup

	mu    sync.Mutex
	stats GatewayStats
	// rootsLoaded is when each root (by fingerprint) first came into use in
	// ca.crt.
	rootsLoaded map[string]time.Time
}

// gatewayConfig is one loaded version of the gateway Secret.
type gatewayConfig struct {
	cred *credential
	tls  *tls.Config
}

// GatewayStats is a snapshot of what a Gateway did.
type GatewayStats struct {
	// Accepted counts handshakes that completed, client certificate verified.
	Accepted int
	// Rejected counts handshakes that failed, whichever side gave up.
	Rejected int
	// Errors counts the rejected handshakes by error text.
	Errors map[string]int
	// Peers counts the accepted handshakes by the common name of the client
	// certificate.
	Peers map[string]int
	// Loads counts what became of the versions of the gateway Secret.
	Loads
}

// NewGateway returns a gateway that serves the Secret called name, read
// through secrets. Start runs it.
func NewGateway(secrets Secrets, name string) *Gateway {
	return &Gateway{
		secrets:     secrets,
		name:        name,
		stats:       GatewayStats{Errors: map[string]int{}, Peers: map[string]int{}},
		loaded:      make(chan struct{}),
		rootsLoaded: map[string]time.Time{},
	}
}

// StartTimeout bounds how long Start waits for the gateway Secret to give
// a usable credential.
const StartTimeout = 30 * time.Second

// Start listens on 127.0.0.1 on a free port, starts watching the Secret and
// returns once the gateway serves: a version of the Secret is loaded and
// the listener accepts, so that a client dialling Addr right after is
// answered with the credential, never refused for lack of one. It fails
// when no usable version came within StartTimeout or ctx ended first, with
// everything it started stopped again. The gateway then serves until ctx
// is done; Wait waits for all of it to stop.
func (g *Gateway) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("gateway %s: listening: %w", g.name, err)
	}
	g.ln = ln
	ctx, cancel := context.WithCancel(ctx)
	wait := g.secrets.Watch(ctx, g.name, g.load)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	g.wg.Add(2)
	go func() {
		defer g.wg.Done()
		defer cancel()
		wait()
	}()
	go func() {
		defer g.wg.Done()
		defer stop()
		g.serve(ctx)
	}()
	if err := g.waitLoaded(ctx); err != nil {
		cancel()
		g.Wait()
		return err
	}
	return nil
}

// waitLoaded waits until load has taken a first credential into use.
func (g *Gateway) waitLoaded(ctx context.Context) error {
	timeout := time.NewTimer(StartTimeout)
	defer timeout.Stop()
	select {
	case <-g.loaded:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway %s: stopped before a credential was loaded: %w", g.name, ctx.Err())
	case <-timeout.C:
		s := g.Stats()
		return fmt.Errorf("gateway %s: no usable credential within %v: %d unusable versions (last: %q), %d deletions",
			g.name, StartTimeout, s.LoadErrors, s.LastLoadError, s.Deletions)
	}
}

// Wait blocks until the gateway started by Start has stopped: listener,
// connections and watch.
func (g *Gateway) Wait() { g.wg.Wait() }

// Addr is the address the gateway listens on, host:port. Valid after Start.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Stats returns a snapshot of the counters.
func (g *Gateway) Stats() GatewayStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Errors, s.Peers = cloneCounts(s.Errors), cloneCounts(s.Peers)
	return s
}

// ServerChain is the certificate chain the gateway currently presents (the
// whole tls.crt, leaf first), or nil before a credential is loaded.
func (g *Gateway) ServerChain() []*x509.Certificate {
	if c := g.current.Load(); c != nil {
		return slices.Clone(c.cred.chain)
	}
	return nil
}

// ClientCAs are the roots the gateway currently verifies clients with (its
// ca.crt), or nil before a credential is loaded.
func (g *Gateway) ClientCAs() []*x509.Certificate {
	if c := g.current.Load(); c != nil {
		return slices.Clone(c.cred.cas)
	}
	return nil
}

// RootLoaded is when the gateway first verified clients with root (its
// fingerprint, see bundle.Fingerprint), zero if it never has.
func (g *Gateway) RootLoaded(fingerprint string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rootsLoaded[fingerprint]
}

// load takes a new version of the Secret into use for the next handshakes.
func (g *Gateway) load(s *corev1.Secret) {
	g.mu.Lock()
	defer g.mu.Unlock()
	load(s, &g.current, func(c *gatewayConfig) string { return c.cred.version }, func(cred *credential) *gatewayConfig {
		return &gatewayConfig{cred: cred, tls: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cred.pair},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    cred.pool,
			// Every handshake is a full one, so every one verifies the client
			// against the roots loaded at that moment.
			SessionTicketsDisabled: true,
		}}
	}, &g.stats.Loads)
	if c := g.current.Load(); c != nil {
		now := time.Now()
		for _, r := range c.cred.cas {
			if fp := bundle.Fingerprint(r); g.rootsLoaded[fp].IsZero() {
				g.rootsLoaded[fp] = now
			}
		}
		g.loadedOnce.Do(func() { close(g.loaded) })
	}
}

func (g *Gateway) serve(ctx context.Context) {
	// Each handshake asks for the config then current, so a reload applies
	// to the next connection without a restart.
	base := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if c := g.current.Load(); c != nil {
			return c.tls, nil
		}
		return nil, errNotLoaded
	}}
	for {
		conn, err := g.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.handle(ctx, conn, base)
		}()
	}
}

func (g *Gateway) handle(ctx context.Context, conn net.Conn, base *tls.Config) {
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(handshakeTimeout))
	tc := tls.Server(conn, base)
	if err := tc.HandshakeContext(ctx); err != nil {
		g.mu.Lock()
		g.stats.Rejected++
		countError(g.stats.Errors, err)
		g.mu.Unlock()
		lingeringClose(conn)
		return
	}
	g.mu.Lock()
	g.stats.Accepted++
	g.stats.Peers[tc.ConnectionState().PeerCertificates[0].Subject.CommonName]++
	g.mu.Unlock()
	_, _ = tc.Write([]byte{1})
	_ = tc.Close()
}

// lingeringClose closes conn once the client has had the alert sent on a
// failed handshake. The client's last handshake messages may still be unread
// here, and closing a socket with unread data makes the kernel send a reset,
// which can cost the client the alert: it would report "connection reset"
// instead of why it was refused. net/http closes the same way.
func lingeringClose(conn net.Conn) {
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return
	}
	_ = tcp.CloseWrite()
	_ = tcp.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, tcp)
}
