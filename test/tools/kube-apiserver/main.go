// Command kube-apiserver builds the upstream kube-apiserver from the
// published k8s.io/kubernetes module so that envtest can run against a real
// API server without setup-envtest downloading binaries. The same main builds
// every supported version: versions/<version>.mod picks the release.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
