// Command dualca keeps a gateway Secret in step with a cert-manager root CA,
// rotating it without downtime. See the README for what it does and why.
//
// `dualca status` shows where a gateway stands instead, and exits non-zero
// when something needs attention; `dualca pause`, `dualca resume` and
// `dualca promote` steer a rotation; `dualca version` says which dualca
// this is.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/dualca/dualca/flags"
)

// usage is the top of `dualca --help`; the flags of run follow it.
const usage = `dualca keeps a gateway's mTLS Secret in step with a cert-manager root CA
and rotates the root without cutting off a single client.

Usage:
  dualca [run] [flags]     run the controller (the default command); its flags are below
  dualca status [flags]    show the status dualca publishes in its status ConfigMap: the roots
                           in the gateway's bundle, the phase and client renewals, what comes
                           next and when; exit 1 when something needs attention (status --help)
  dualca pause [flags]     hold a rotation: no client renewal, no server switch (unless its
                           root is about to expire) until resume (pause --help)
  dualca resume [flags]    let a paused rotation go on
  dualca promote [flags]   switch the server to the current root now, clients pending or not
                           (status, pause, resume and promote read and annotate the status
                           ConfigMap alone, --status-configmap: no Secret, the operator Role)
  dualca version           print the version, the source commit and the Go version
  dualca help              print this help

Flags of run:
`

// signals is the context SIGTERM and SIGINT cancel, set up once per
// process (controller-runtime's handler may be set up only once).
var signals = sync.OnceValue(ctrl.SetupSignalHandler)

func main() {
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// dispatch runs the command args name and returns the exit code. Flags
// alone mean run, as the chart passes them.
func dispatch(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	switch {
	case len(args) > 0 && isHelp(args[0]):
		cmd = "help"
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return exitOf(run(signals(), args), stdout, stderr)
	case "status":
		return status(signals(), args, stdout, stderr)
	case "pause", "resume", "promote":
		return control(signals(), cmd, args, stdout, stderr)
	case "version":
		_, _ = fmt.Fprintln(stdout, currentBuild())
		return 0
	case "help":
		printUsage(stdout)
		return 0
	default:
		_, _ = fmt.Fprintf(stderr, "dualca: unknown command %q: want run, status, pause, resume, promote, version or help (dualca --help)\n", cmd)
		return 2
	}
}

// exitOf is run's exit code for err: 0 when it ended well or printed its
// help (on stdout); 2 for a command line it cannot run, its error first,
// then the usage; 1 for any other failure.
func exitOf(err error, stdout, stderr io.Writer) int {
	var bad *flags.UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &bad):
		code, _ := parsed("dualca", err, 0, 2, stdout, stderr)
		return code
	}
	_, _ = fmt.Fprintln(stderr, "dualca:", err)
	return 1
}

// usageText is printUsage's text.
func usageText() string {
	var b strings.Builder
	printUsage(&b)
	return b.String()
}

// parsed ends a command whose flags did not parse (done): with its help on
// stdout and exit ok when that was asked, else with the error and then the
// usage on stderr, and exit bad. It lets the command go on when err is nil.
func parsed(cmd string, err error, ok, bad int, stdout, stderr io.Writer) (code int, done bool) {
	if err == nil {
		return 0, false
	}
	var usage *flags.UsageError
	hasUsage := errors.As(err, &usage)
	if errors.Is(err, flag.ErrHelp) {
		if hasUsage {
			_, _ = io.WriteString(stdout, usage.Usage)
		}
		return ok, true
	}
	_, _ = fmt.Fprintf(stderr, "%s: invalid flags: %v\n", cmd, err)
	if hasUsage {
		_, _ = fmt.Fprintf(stderr, "\n%s", usage.Usage)
	}
	return bad, true
}

func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// printUsage lists the commands, then run's flags with their defaults.
func printUsage(w io.Writer) {
	_, _ = io.WriteString(w, usage)
	fs := flag.NewFlagSet("dualca", flag.ContinueOnError)
	o := flags.Defaults()
	o.AddFlags(fs)
	fs.SetOutput(w)
	fs.PrintDefaults()
}
