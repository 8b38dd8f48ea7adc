package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// A process started through a memory cgroup's wrap is in the group from
// its first instruction, with its own pid, and the group's figures read
// back once it has ended. Skipped where the benchmark could not check the
// chart's limit either: no cgroup v1 memory controller, or not root.
func TestMemoryCgroupHoldsTheProcess(t *testing.T) {
	if _, err := ownMemoryCgroup(); err != nil || os.Geteuid() != 0 {
		t.Skip("an environment this machine may lack, not a missing feature: making a memory cgroup needs root and cgroup v1's memory controller (the benchmark then reports the chart's limit as not checked)")
	}
	g := NewWithT(t)
	cg, err := newMemoryCgroup(fmt.Sprintf("dualca-bench-test-%d", os.Getpid()), 64<<20)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { g.Expect(cg.remove()).To(Succeed()) }()
	limit, err := os.ReadFile(filepath.Join(cg.dir, "memory.limit_in_bytes"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.TrimSpace(string(limit))).To(Equal("67108864"))

	path, args := cg.wrap("/bin/sh", []string{"-c", "exec sleep 30"})
	p, err := startProcess("sleeper", path, args...)
	g.Expect(err).NotTo(HaveOccurred())
	pid := p.cmd.Process.Pid
	g.Eventually(func() (string, error) {
		b, err := os.ReadFile(filepath.Join(cg.dir, "cgroup.procs"))
		return string(b), err
	}).Should(ContainSubstring(fmt.Sprint(pid)), "the started process itself is in the group")
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(own)).To(ContainSubstring(filepath.Base(cg.dir)))
	p.stop()
	g.Eventually(p.exited).WithTimeout(15 * time.Second).Should(BeClosed())

	st, err := cg.stats()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.maxUsage).To(BeNumerically(">", 0))
	g.Expect(st.oomKills).To(BeZero())
	g.Expect(st.underOOM).To(BeZero())
}
