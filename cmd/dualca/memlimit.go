package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// memoryLimitShare is the share of the container's memory limit that Go's
// soft memory limit is set to: the runtime collects harder as its memory
// nears it instead of letting the heap grow to twice the live data, and
// the rest is left to what Go does not count (the binary, thread stacks
// outside its heap, memory not yet returned to the kernel).
const memoryLimitShare = 0.9

// unlimitedV1 is the least memory.limit_in_bytes read as no limit: cgroup
// v1 shows "no limit" as the largest page-aligned int64
// (9223372036854771712), and no real limit comes near 2^62 bytes.
const unlimitedV1 = 1 << 62

// memoryLimit is Go's soft memory limit for a process whose filesystem is
// root ("/" in production) and whose environment getenv reads: 90 % of
// the memory limit of its own cgroup, v2 or v1; 0 when GOMEMLIMIT is set
// (the runtime applied it already) or when the cgroup has no limit.
// cgroup is the limit read, in bytes, 0 when none.
func memoryLimit(root fs.FS, getenv func(string) string) (limit, cgroup int64, err error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, 0, nil
	}
	cgroup, err = cgroupMemoryLimit(root)
	if err != nil || cgroup == 0 {
		return 0, 0, err
	}
	return int64(float64(cgroup) * memoryLimitShare), cgroup, nil
}

// cgroupMemoryLimit reads the memory limit of the process's own cgroup
// under root: /proc/self/cgroup names the cgroup, as a line
// "ID:memory[,…]:/path" on cgroup v1 (its limit in
// /sys/fs/cgroup/memory/<path>/memory.limit_in_bytes) or "0::/path" on
// v2 (/sys/fs/cgroup/<path>/memory.max); v1's line wins on a hybrid
// host, where the memory controller is v1's. A container usually sees its
// own cgroup mounted as the hierarchy's root while /proc/self/cgroup
// still names the host's path, or "/" with a cgroup namespace: when the
// path's file is missing, the mount root's is read. 0 when the cgroup
// has no limit ("max" on v2, a value near the maximum on v1) or when the
// process is in no cgroup.
func cgroupMemoryLimit(root fs.FS) (int64, error) {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	v1, v2, found1, found2 := cgroupPaths(b)
	switch {
	case found1:
		return readLimit(root, "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes")
	case found2:
		return readLimit(root, "sys/fs/cgroup", v2, "memory.max")
	}
	return 0, nil
}

// cgroupPaths finds, in /proc/self/cgroup, the cgroup of v1's memory
// controller and that of v2.
func cgroupPaths(b []byte) (v1, v2 string, found1, found2 bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2, found2 = p, true
		case containsWord(controllers, "memory"):
			v1, found1 = p, true
		}
	}
	return v1, v2, found1, found2
}

func containsWord(list, word string) bool {
	for w := range strings.SplitSeq(list, ",") {
		if w == word {
			return true
		}
	}
	return false
}

// readLimit reads file in the cgroup p of the hierarchy mounted at mount,
// or at the mount's root when p is not there.
func readLimit(root fs.FS, mount, p, file string) (int64, error) {
	name := path.Join(mount, strings.TrimPrefix(path.Clean("/"+p), "/"), file)
	b, err := fs.ReadFile(root, name)
	if errors.Is(err, fs.ErrNotExist) {
		name = path.Join(mount, file)
		b, err = fs.ReadFile(root, name)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("/%s: not a memory limit: %q", name, s)
	}
	if n >= unlimitedV1 {
		return 0, nil
	}
	return n, nil
}

// setMemoryLimit gives Go's runtime a soft memory limit from the
// container's (memoryLimit) and logs it. A limit that cannot be read is
// logged and leaves Go's default (none): dualca runs as before.
func setMemoryLimit(log logr.Logger) {
	limit, cgroup, err := memoryLimit(os.DirFS("/"), os.Getenv)
	switch {
	case err != nil:
		log.Error(err, "reading the container's memory limit; Go's memory limit left unset")
	case limit > 0:
		debug.SetMemoryLimit(limit)
		log.Info("Go memory limit set to 90% of the container's", "bytes", limit, "containerBytes", cgroup)
	case os.Getenv("GOMEMLIMIT") != "":
		log.Info("Go memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
	default:
		log.V(1).Info("no container memory limit; Go's memory limit left unset")
	}
}
