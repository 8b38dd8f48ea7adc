// Command dualca keeps a gateway Secret in step with a cert-manager root CA,
// rotating it without downtime. See the README for what it does and why.
//
// `dualca status` shows where a gateway stands instead, and exits non-zero
// when something needs attention.
package main

import (
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "status" {
		os.Exit(status(ctrl.SetupSignalHandler(), os.Args[2:], os.Stdout, os.Stderr))
	}
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dualca:", err)
		os.Exit(1)
	}
}
