//go:build linux

package main

import "syscall"

// childAttrs puts a child in a process group of its own, out of reach of
// the terminal's Ctrl-C, so that the demo stops it in order; and has the
// kernel send it SIGTERM should the demo die without doing so (killed, or
// crashed), so that it never outlives the demo.
func childAttrs() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
