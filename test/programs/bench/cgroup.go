package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// memoryCgroup is a cgroup v1 memory group the benchmark makes under its
// own, with a memory limit, for one dualca: the chart's limit checked as a
// container runtime enforces it (the kernel reclaims, then kills the
// process, at the limit), and read by dualca itself for its GOMEMLIMIT.
type memoryCgroup struct {
	dir   string
	limit int64
}

// cgroupV1Memory is where cgroup v1's memory hierarchy is mounted.
const cgroupV1Memory = "/sys/fs/cgroup/memory"

// newMemoryCgroup makes the group name under the benchmark's own memory
// cgroup with limit bytes. It needs cgroup v1's memory controller and root.
func newMemoryCgroup(name string, limit int64) (*memoryCgroup, error) {
	own, err := ownMemoryCgroup()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cgroupV1Memory, own, name)
	if _, err := os.Stat(filepath.Join(cgroupV1Memory, own)); err != nil {
		dir = filepath.Join(cgroupV1Memory, name) // a container seeing its own group as the mount's root
	}
	if err := os.Mkdir(dir, 0o755); err != nil { //nolint:gosec // G301: a cgroup, which the kernel fills with its control files
		return nil, fmt.Errorf("making a memory cgroup: %w", err)
	}
	c := &memoryCgroup{dir: dir, limit: limit}
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil { //nolint:gosec // G306: the kernel's control file, which exists already
		return nil, errors.Join(fmt.Errorf("setting the memory cgroup's limit: %w", err), c.remove())
	}
	return c, nil
}

// ownMemoryCgroup is the benchmark's cgroup v1 memory path, from
// /proc/self/cgroup.
func ownMemoryCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) == 3 && strings.Contains(","+parts[1]+",", ",memory,") {
			return parts[2], nil
		}
	}
	return "", errors.New("no cgroup v1 memory controller (/proc/self/cgroup): the chart's limit cannot be checked here")
}

// wrap is the command that runs path with args inside the group: a shell
// writes its own pid into the group's cgroup.procs, then becomes the
// process (exec keeps the pid), so that everything it allocates is
// charged to the group.
func (c *memoryCgroup) wrap(path string, args []string) (string, []string) {
	return "/bin/sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(c.dir, "cgroup.procs"), path}, args...)
}

// cgroupStats is what the kernel says of the group.
type cgroupStats struct {
	// maxUsage is the group's highest charge (memory.max_usage_in_bytes);
	// failcnt the times a charge hit the limit and had to reclaim.
	maxUsage, failcnt int64
	// underOOM and oomKills are memory.oom_control's under_oom and
	// oom_kill: a process of the group killed at the limit.
	underOOM, oomKills int64
}

func (c *memoryCgroup) stats() (cgroupStats, error) {
	var st cgroupStats
	var errs []error
	read := func(file string) int64 {
		b, err := os.ReadFile(filepath.Join(c.dir, file))
		if err != nil {
			errs = append(errs, err)
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		errs = append(errs, err)
		return n
	}
	st.maxUsage, st.failcnt = read("memory.max_usage_in_bytes"), read("memory.failcnt")
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.oom_control"))
	if err != nil {
		return st, errors.Join(append(errs, err)...)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "under_oom":
			st.underOOM = n
		case "oom_kill":
			st.oomKills = n
		}
	}
	return st, errors.Join(errs...)
}

// remove deletes the group; its process must have ended.
func (c *memoryCgroup) remove() error { return os.Remove(c.dir) }
