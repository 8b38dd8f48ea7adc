package main

import (
	"testing"
	"testing/fstest"

	. "github.com/onsi/gomega"
)

// TestGoMemoryLimitIsNinetyPercentOfTheContainers: the cgroup of the
// process, v1 or v2, with its own path or as the mount's root, gives Go
// 90 % of its memory limit; no limit, no cgroup or GOMEMLIMIT set give
// none; a limit that cannot be read is an error, not a limit.
func TestGoMemoryLimitIsNinetyPercentOfTheContainers(t *testing.T) {
	t.Parallel()
	const mi = 1 << 20
	unset := func(string) string { return "" }
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	v1 := "12:pids:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n1:name=systemd:/kubepods/pod1/c1\n0::/\n"
	v2 := "0::/kubepods.slice/pod1/c1\n"

	for _, c := range []struct {
		name   string
		fs     fstest.MapFS
		getenv func(string) string
		cgroup int64
		err    string
	}{
		{name: "v1, the cgroup's own file", fs: fstest.MapFS{
			"proc/self/cgroup": file(v1),
			"sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": file("268435456\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                  file("9223372036854771712\n"),
		}, cgroup: 256 * mi},
		{name: "v1, the container's cgroup mounted as the root", fs: fstest.MapFS{
			"proc/self/cgroup":                           file(v1),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("536870912\n"),
		}, cgroup: 512 * mi},
		{name: "v1 unlimited", fs: fstest.MapFS{
			"proc/self/cgroup": file(v1),
			"sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": file("9223372036854771712\n"),
		}},
		{name: "v2, the cgroup's own file", fs: fstest.MapFS{
			"proc/self/cgroup": file(v2),
			"sys/fs/cgroup/kubepods.slice/pod1/c1/memory.max": file("268435456\n"),
			"sys/fs/cgroup/memory.max":                        file("max\n"),
		}, cgroup: 256 * mi},
		{name: "v2 in a cgroup namespace", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("134217728\n"),
		}, cgroup: 128 * mi},
		{name: "v2 unlimited", fs: fstest.MapFS{
			"proc/self/cgroup": file(v2),
			"sys/fs/cgroup/kubepods.slice/pod1/c1/memory.max": file("max\n"),
		}},
		{name: "no memory file", fs: fstest.MapFS{"proc/self/cgroup": file(v2)}},
		{name: "no cgroup at all", fs: fstest.MapFS{}},
		{name: "GOMEMLIMIT set", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("134217728\n"),
		}, getenv: func(k string) string {
			if k == "GOMEMLIMIT" {
				return "100MiB"
			}
			return ""
		}},
		{name: "unreadable limit", fs: fstest.MapFS{
			"proc/self/cgroup":                  file("0::/\n"),
			"sys/fs/cgroup/memory.max/whatever": file(""), // memory.max a directory
		}, err: "memory.max"},
		{name: "not a number", fs: fstest.MapFS{
			"proc/self/cgroup":         file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n"),
		}, err: "not a memory limit"},
		{name: "unreadable cgroup list", fs: fstest.MapFS{
			"proc/self/cgroup/whatever": file(""),
		}, err: "cgroup"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			getenv := c.getenv
			if getenv == nil {
				getenv = unset
			}
			limit, cgroup, err := memoryLimit(c.fs, getenv)
			if c.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.err)))
				g.Expect(limit).To(BeZero(), "no limit from what could not be read")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cgroup).To(Equal(c.cgroup))
			g.Expect(limit).To(Equal(c.cgroup*9/10), "90 percent of the container's")
		})
	}
}
