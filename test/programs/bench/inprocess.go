package main

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// startInProcess runs dualca inside the benchmark, for what the binary
// cannot show: the poll alone, its watches disabled (a test knob). stop
// ends it and waits.
func (b *bench) startInProcess(ctx context.Context, args ...string) (stop func(), err error) {
	opts, err := flags.Parse("dualca", append([]string{"--metrics-bind-address=0", "--health-probe-bind-address=0", serverNames}, args...))
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(b.cluster.RESTConfig)
	cfg.QPS = -1 // as ctrl.GetConfig leaves it for the binary
	o := opts.Syncer()
	o.DisableWatches, o.Logger, o.Metrics = true, logr.Discard(), syncer.NewMetrics()
	mgr, err := syncer.NewManager(cfg, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.log("dualca stopped with an error: %v", err)
		}
	}, nil
}
