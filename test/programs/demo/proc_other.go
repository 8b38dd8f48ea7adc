//go:build !unix

package main

import "syscall"

// childAttrs is a no-op where process groups do not exist.
func childAttrs() *syscall.SysProcAttr { return nil }
