//go:build tools

// Package tools pins github.com/golangci/golangci-lint/v2 so that `go build
// github.com/golangci/golangci-lint/v2/cmd/golangci-lint` from this directory
// builds `make lint`'s linter from the Go module proxy (cmd/golangci-lint is a
// main package, so it cannot be imported for real; the build tag keeps this
// file out of every build, and go mod tidy still sees it).
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
