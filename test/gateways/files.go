package gateways

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/dualca/dualca/test/lib/controlplane"
)

// FileGateway is a gateway that reads its credential from files, as one
// mounting a projected volume does, and is reloaded after each change.
type FileGateway struct {
	// Name is its name in the report.
	Name string
	// Layout names its files: the path in its volume of the server chain,
	// the key and the CA bundle.
	Layout func() (cert, key, bundle string)
	// Start starts it in dir (configuration, pid file, logs, temporary
	// files) on addr, serving from the volume vol, and returns once it
	// serves.
	Start func(ctx context.Context, dir, vol, addr string) (reloader, error)
}

// reloader is a running file gateway.
type reloader interface {
	// Reload makes it take the volume's new version in, the way it is
	// reloaded in production; an error is a refused reload.
	Reload(ctx context.Context) error
	Stop()
}

// fileServer is a FileGateway running with its projector.
type fileServer struct {
	refusals
	addr   string
	expect int
	vol    *Projector
}

func (f *fileServer) Addr() string { return f.addr }
func (f *fileServer) Expect() int  { return f.expect }

// StartFile projects the gateway Secret's credential, in shape, into a
// volume of dir with lag, starts gw on it and reloads gw after each later
// version. A reload refused is counted (Refused). It returns once gw
// serves; the gateway stops when ctx ends (then call the returned stop).
func StartFile(ctx context.Context, kube kubernetes.Interface, ns string, gw FileGateway, shape Shape, gateway, dir string, lag func() time.Duration) (Server, func(), error) {
	cert, key, bundle := gw.Layout()
	items := []Item{shape.Cert(gateway).Item(cert), shape.Key(gateway).Item(key), shape.Bundle(gateway).Item(bundle)}
	vol := NewProjector(kube, ns, items, filepath.Join(dir, "volume"), lag)
	addr, err := controlplane.FreeAddress()
	if err != nil {
		return nil, nil, err
	}
	s := &fileServer{addr: addr, expect: 200, vol: vol}
	var running atomic.Pointer[reloader]
	vol.Written = func() error {
		r := running.Load()
		if r == nil {
			return nil // the first version: the gateway starts on it
		}
		return s.add((*r).Reload(ctx))
	}
	if err := vol.Start(ctx); err != nil {
		return nil, nil, err
	}
	if err := vol.Wait(ctx, time.Minute); err != nil {
		return nil, nil, err
	}
	r, err := gw.Start(ctx, dir, vol.Dir(), addr)
	if err != nil {
		return nil, nil, fmt.Errorf("starting %s: %w", gw.Name, err)
	}
	running.Store(&r)
	// A version written between the first and the start is taken in now.
	if vol.Stats().Writes > 1 {
		if err := s.add(r.Reload(ctx)); err != nil {
			return nil, nil, errors.Join(err, stopped(r))
		}
	}
	return s, r.Stop, nil
}

// stopped stops r and returns nil, for an error path.
func stopped(r reloader) error {
	r.Stop()
	return nil
}
