package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dualca/dualca/test/lib/apirequest"
)

// countingProxy stands between one process and the API server, on
// 127.0.0.1, and records every request the process sends: what the API
// server serves it, counted outside it, whatever client library it uses.
type countingProxy struct {
	srv *http.Server
	// kubeconfig points the process at the proxy.
	kubeconfig string

	mu   sync.Mutex
	reqs []timedRequest
}

type timedRequest struct {
	at time.Time
	apirequest.Request
}

// newProxy starts a proxy for the process called name.
func (b *bench) newProxy(name string) (*countingProxy, error) {
	transport, err := rest.TransportFor(b.cluster.RESTConfig)
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(b.cluster.RESTConfig.Host)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{kubeconfig: filepath.Join(b.cluster.Dir, name+".kubeconfig")}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1, // watches stream
	}
	p.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if req, ok := apirequest.Parse(r); ok {
			p.mu.Lock()
			p.reqs = append(p.reqs, timedRequest{at: time.Now(), Request: req})
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(ln) }()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["bench"] = &clientcmdapi.Cluster{Server: "http://" + ln.Addr().String()}
	cfg.AuthInfos["bench"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	cfg.CurrentContext = "bench"
	if err := clientcmd.WriteToFile(*cfg, p.kubeconfig); err != nil {
		_ = p.srv.Close()
		return nil, err
	}
	return p, nil
}

// since returns the requests recorded from t on.
func (p *countingProxy) since(t time.Time) []timedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []timedRequest
	for _, r := range p.reqs {
		if !r.at.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

func (p *countingProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "bench: closing a proxy:", err)
	}
	_ = p.srv.Close()
}
