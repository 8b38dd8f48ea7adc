//go:build !linux

package run

import "os/exec"

// startChild starts the child. Only Linux can tie its life to the test
// process's (see process_linux.go); elsewhere a test binary that dies
// without running its cleanups leaves it running.
func startChild(cmd *exec.Cmd) error { return cmd.Start() }
