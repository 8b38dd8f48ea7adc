//go:build unix && !linux

package main

import "syscall"

// childAttrs puts a child in a process group of its own, out of reach of
// the terminal's Ctrl-C, so that the demo stops it in order.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
