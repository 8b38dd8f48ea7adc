//go:build unix

package main

import "syscall"

// ownProcessGroup puts a child in a process group of its own, out of reach
// of the terminal's Ctrl-C.
func ownProcessGroup() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
