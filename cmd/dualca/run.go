package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/go-logr/zapr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// run parses and validates the flags before anything touches the cluster,
// then runs the manager until ctx ends.
func run(ctx context.Context, args []string) error {
	opts, err := flags.Parse("dualca", args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("invalid flags: %w", err)
	}
	logger := zapr.NewLogger(ctrlzap.NewRaw(ctrlzap.UseFlagOptions(&opts.Zap)))
	ctrl.SetLogger(logger)
	build := currentBuild()
	logger.Info("dualca version", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion)
	if err := registerBuildInfo(metrics.Registry, build); err != nil {
		return err
	}
	setMemoryLimit(logger)

	if err := servePprof(ctx); err != nil {
		return err
	}
	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	o := opts.Syncer()
	o.Logger, o.Metrics = logger, syncer.NewMetrics()
	// The manager's metrics endpoint serves controller-runtime's registry.
	if err := metrics.Registry.Register(o.Metrics); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	mgr, err := syncer.NewManager(restCfg, o)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
