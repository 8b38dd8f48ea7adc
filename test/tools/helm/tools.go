//go:build tools

// Package tools pins helm.sh/helm/v4 so that `go build helm.sh/helm/v4/cmd/helm`
// from this directory builds the chart tests' helm from the Go module proxy
// (cmd/helm is a main package, so it cannot be imported for real; the build
// tag keeps this file out of every build, and go mod tidy still sees it).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
