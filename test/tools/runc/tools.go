//go:build tools

// Package tools pins github.com/opencontainers/runc so that `go build
// github.com/opencontainers/runc` from this directory builds the runc the
// image tests run dualca's image with (runc's main package is its module
// root, so it cannot be imported for real; the build tag keeps this file out
// of every build, and go mod tidy still sees it).
package tools

import _ "github.com/opencontainers/runc"
