//go:build !unix

package main

import "syscall"

// ownProcessGroup is a no-op where process groups do not exist.
func ownProcessGroup() *syscall.SysProcAttr { return nil }
