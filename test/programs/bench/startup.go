package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// startup starts dualca again and again: before each start the root is
// rotated while dualca is down, so that the gateway is in sync only once
// the new process has read the root and written the gateway. Each start
// is timed from the process's start to the watch event of the gateway
// Secret carrying the new root, and to its readiness probe answering 200,
// with no selected client and with many; with clients, also to the end of
// their cache's load, which the gateway does not wait for.
func (b *bench) startup(ctx context.Context) error {
	for _, clients := range []int{0, b.opts.startupClients} {
		res, err := b.startupRun(ctx, clients)
		if err != nil {
			return fmt.Errorf("%d clients: %w", clients, err)
		}
		b.report.startup = append(b.report.startup, res)
		b.log("start-up with %d clients: in sync %s; ready %s; the clients read %s", clients, summarize(res.inSync), summarize(res.ready), summarize(res.clientsRead))
	}
	return nil
}

func (b *bench) startupRun(ctx context.Context, clients int) (startupResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	roots, err := newRoots(b.opts.starts + 1)
	if err != nil {
		return startupResult{}, err
	}
	w, err := b.newWorld(ctx, fmt.Sprintf("startup-%d", clients), roots[0])
	if err != nil {
		return startupResult{}, err
	}
	if err := b.createClients(ctx, w.ns, roots[0], clients); err != nil {
		return startupResult{}, err
	}
	gw, err := w.watchSecret(ctx, gatewayName)
	if err != nil {
		return startupResult{}, err
	}
	args := []string{w.rootFlag(), w.gatewayFlag(), "--client-selector=" + clientLabel + "=agent", "--client-namespaces=" + w.ns,
		"--server-switch-grace=1h"}
	res := startupResult{clients: clients}
	for i := 1; i <= b.opts.starts; i++ {
		if _, err := w.writeRoot(ctx, roots[i]); err != nil {
			return res, err
		}
		mark := gw.mark()
		p, err := b.startDualca(b.cluster.Kubeconfig, args...)
		if err != nil {
			return res, err
		}
		var ready time.Time
		err = wait.PollUntilContextTimeout(ctx, 2*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if err := p.alive(); err != nil {
				return false, err
			}
			if p.ready(ctx) {
				ready = time.Now()
				return true, nil
			}
			return false, nil
		})
		if err != nil {
			p.stop()
			return res, fmt.Errorf("start %d: waiting for readiness: %w", i, err)
		}
		v, err := gw.trusting(ctx, mark, roots[i].Cert)
		if err != nil {
			p.stop()
			return res, fmt.Errorf("start %d: %w", i, err)
		}
		if clients > 0 {
			read, err := clientsRead(ctx, p)
			if err != nil {
				p.stop()
				return res, fmt.Errorf("start %d: waiting for the clients to be read: %w", i, err)
			}
			res.clientsRead = append(res.clientsRead, read)
		}
		p.stop()
		res.inSync = append(res.inSync, v.at.Sub(p.started))
		res.ready = append(res.ready, ready.Sub(p.started))
	}
	return res, nil
}

// startupResult is the start-up times with a number of clients.
type startupResult struct {
	clients       int
	inSync, ready []time.Duration
	// clientsRead are from the start to the client cache loaded
	// (dualca_clients_read 1, scraped every 20 ms), with clients only.
	clientsRead []time.Duration
}
