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

	restCfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	mgr, _, err := syncer.NewManager(restCfg, syncer.Config{Options: opts, Logger: logger})
	if err != nil {
		return err
	}
	logger.Info("starting", "root", opts.RootSecret, "gateway", opts.GatewaySecret,
		"strategy", strategyName(opts.Legacy), "pollInterval", opts.PollInterval)
	return mgr.Start(ctx)
}

func strategyName(legacy bool) string {
	if legacy {
		return "legacy"
	}
	return "zero-downtime"
}
