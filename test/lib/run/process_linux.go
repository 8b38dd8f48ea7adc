package run

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Linux kills the child when the test process dies (Pdeathsig), so that a
// test binary killed by its -timeout or by ^C leaves no dualca behind.
//
// The signal is sent when the thread that forked the child ends, not the
// process (see prctl(2) and golang/go#27505), and Go ends a thread when a
// goroutine locked to it returns. Every child is therefore started from one
// goroutine that locks its thread and never returns.
var (
	starterOnce sync.Once
	starts      chan startRequest
)

type startRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// StartChild starts cmd as a child that dies with the test process (see
// above): for any program a test runs beside it.
func StartChild(cmd *exec.Cmd) error {
	starterOnce.Do(func() {
		starts = make(chan startRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for req := range starts {
				req.done <- req.cmd.Start()
			}
		}()
	})
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	req := startRequest{cmd: cmd, done: make(chan error, 1)}
	starts <- req
	return <-req.done
}
