package main

import (
	"context"
	"fmt"
	"os"

	"github.com/go-logr/zapr"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer"
)

// run parses and validates the flags before anything touches the cluster,
// then runs the manager until ctx ends. A command line it cannot run (or
// --help) is a *flags.UsageError.
func run(ctx context.Context, args []string) error {
	opts, err := flags.Parse("dualca", args)
	if err != nil {
		// dispatch prints the error, then the usage (or the usage alone for
		// --help).
		return &flags.UsageError{Err: err, Usage: usageText()}
	}
	humanLogs(&opts.Zap, isTerminal(os.Stderr))
	logger := zapr.NewLogger(ctrlzap.NewRaw(ctrlzap.UseFlagOptions(&opts.Zap)))
	ctrl.SetLogger(logger)
	build := currentBuild()
	logger.Info("dualca version", "version", build.Version, "revision", build.Revision, "goVersion", build.GoVersion)
	if err := registerBuildInfo(metrics.Registry, build); err != nil {
		return err
	}
	setMemoryLimit(logger)
	tuneGC(logger)

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

// humanLogs has dualca log lines a person reads when it writes to a
// terminal and --zap-encoder did not choose: console lines, not the JSON a
// log collector wants from a pod.
func humanLogs(o *ctrlzap.Options, terminal bool) {
	if terminal && o.NewEncoder == nil && o.Encoder == nil {
		ctrlzap.ConsoleEncoder()(o)
	}
}

// isTerminal tells whether f is a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
