// Command dualca keeps a gateway Secret in step with a cert-manager root CA,
// rotating it without downtime. See the README for what it does and why.
package main

import (
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
)

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "dualca:", err)
		os.Exit(1)
	}
}
