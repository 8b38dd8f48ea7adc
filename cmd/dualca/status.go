package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/dualca/dualca/flags"
	"github.com/dualca/dualca/syncer/operator"
)

// Exit codes of `dualca status`: it works as a check.
const (
	statusOK        = 0
	statusAttention = 1 // something needs an operator: invalid root, failed or stalled renewal, no or stale status
	statusError     = 2 // bad flags, or the status ConfigMap could not be read
)

// status runs `dualca status`: flags first, then one read of the status
// ConfigMap, then prints.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// fail reports why the command could not do its job. If stderr cannot
	// be written either, the exit code is all that is left to say it.
	fail := func(msg ...any) int {
		_, _ = fmt.Fprintln(stderr, append([]any{"dualca status:"}, msg...)...)
		return statusError
	}
	f, err := flags.ParseStatus("dualca status", args)
	if code, done := parsed("dualca status", err, statusOK, statusError, stdout, stderr); done {
		return code
	}
	c, err := controlClient()
	if err != nil {
		return fail(err)
	}
	report, err := operator.ReadStatus(ctx, c.CoreV1(), f.StatusConfigMap, f.StalledAfter, time.Now())
	if err != nil {
		return fail(err)
	}
	if f.Output == "json" {
		err = report.WriteJSON(stdout)
	} else {
		err = report.WriteText(stdout)
	}
	if err != nil {
		return fail(err)
	}
	if len(report.Attention) > 0 {
		return statusAttention
	}
	return statusOK
}
