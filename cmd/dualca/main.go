// Command dualca keeps a gateway Secret in step with a cert-manager root CA,
// rotating it without downtime. See the README for what it does and why.
//
// `dualca status` shows where a gateway stands instead, and exits non-zero
// when something needs attention; `dualca pause`, `dualca resume` and
// `dualca promote` steer a rotation; `dualca version` says which dualca
// this is.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

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
		if err := run(ctrl.SetupSignalHandler(), args); err != nil {
			_, _ = fmt.Fprintln(stderr, "dualca:", err)
			return 1
		}
		return 0
	case "status":
		return status(ctrl.SetupSignalHandler(), args, stdout, stderr)
	case "pause", "resume", "promote":
		return control(ctrl.SetupSignalHandler(), cmd, args, stdout, stderr)
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
