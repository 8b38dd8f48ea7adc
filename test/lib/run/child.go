package run

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"time"
)

// ErrExited is what WaitServing returns when the child exits first.
var ErrExited = errors.New("exited before it served")

// WaitServing polls GET url every 20 ms until it answers 200, and fails
// with ErrExited as soon as exited is closed (the child died: a bad flag, a
// bad configuration), or after timeout, naming the last answer. A test
// that uses a child right after this never races its start-up.
func WaitServing(url string, timeout time.Duration, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var last string
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return ErrExited
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not serving within %s at %s: %s", timeout, url, last)
		}
	}
}

// Terminate sends SIGTERM to cmd's process, as the kubelet does, and
// waits until exited is closed; after timeout it sends SIGKILL, waits, and
// reports that it had to.
func Terminate(cmd *exec.Cmd, exited <-chan struct{}, timeout time.Duration) (killed bool) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return false
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-exited
		return true
	}
}
