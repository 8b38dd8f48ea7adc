//go:build !linux

package run

import "os/exec"

// StartChild starts cmd as a child of the test process. Only Linux can tie
// its life to the test process's (see process_linux.go); elsewhere a test
// binary that dies without running its cleanups leaves it running.
func StartChild(cmd *exec.Cmd) error { return cmd.Start() }
