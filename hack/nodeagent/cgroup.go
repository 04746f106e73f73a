package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// memCgroups enforces containers' memory limits as a kubelet does: every
// container runs in a memory cgroup of its own, <agent's cgroup>/hitless/<pod
// UID>/<container>, limited to its limits.memory. The agent creates the
// cgroups below the one it runs in, so it needs no cgroup of its own
// configured on the host, and the limits nest under whatever limit the host
// gives the agent.
type memCgroups struct {
	v2   bool
	root string // <agent's own memory cgroup>/hitless
}

// detectMemoryCgroups finds the agent's own memory cgroup and makes its
// hitless child. An error means no writable memory cgroup: the agent then
// runs containers without limits.
func detectMemoryCgroups() (*memCgroups, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	pc := parseProcCgroup(string(self))
	m := &memCgroups{}
	var own string
	switch {
	case pc.hasV1Memory:
		// Checked first: on a hybrid host the unified hierarchy exists too
		// but the memory controller is bound to the v1 one.
		dir, ok := cgroupDir(string(mountinfo), false, pc.v1Memory)
		if !ok {
			return nil, fmt.Errorf("the memory cgroup %s (v1) is not mounted", pc.v1Memory)
		}
		own = dir
	case pc.hasUnified:
		dir, ok := cgroupDir(string(mountinfo), true, pc.unified)
		if !ok {
			return nil, fmt.Errorf("the cgroup %s (v2) is not mounted", pc.unified)
		}
		m.v2, own = true, dir
		if err := enableV2Memory(own); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("/proc/self/cgroup names no memory cgroup")
	}
	m.root = filepath.Join(own, "hitless")
	if err := os.Mkdir(m.root, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("cannot create a child of the agent's memory cgroup: %w", err)
	}
	if m.v2 {
		if err := writeCgroupFile(m.root, "cgroup.subtree_control", "+memory"); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(m.root, m.limitFile())); err != nil {
		return nil, fmt.Errorf("%s has no memory limit file: %w", m.root, err)
	}
	return m, nil
}

// enableV2Memory makes the memory controller available to the children of
// the agent's own v2 cgroup. A cgroup other than the root cannot hand
// controllers to children while it holds processes itself (the "no internal
// processes" rule), so when the agent is alone in its cgroup (a service with
// a delegated cgroup) it moves itself into a leaf child first, as delegated
// managers are expected to.
func enableV2Memory(own string) error {
	ctrls, err := os.ReadFile(filepath.Join(own, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if !slices.Contains(strings.Fields(string(ctrls)), "memory") {
		return fmt.Errorf("the memory controller is not enabled for %s (see its parent's cgroup.subtree_control)", own)
	}
	sub, _ := os.ReadFile(filepath.Join(own, "cgroup.subtree_control"))
	if slices.Contains(strings.Fields(string(sub)), "memory") {
		return nil
	}
	err = writeCgroupFile(own, "cgroup.subtree_control", "+memory")
	if err == nil || !errors.Is(err, unix.EBUSY) {
		return err
	}
	procs, _ := os.ReadFile(filepath.Join(own, "cgroup.procs"))
	if !slices.Equal(strings.Fields(string(procs)), []string{strconv.Itoa(os.Getpid())}) {
		return fmt.Errorf("cannot enable the memory controller below %s: it holds other processes than the agent; "+
			"run the agent alone in a cgroup of its own", own)
	}
	leaf := filepath.Join(own, "nodeagent")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := writeCgroupFile(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		return err
	}
	return writeCgroupFile(own, "cgroup.subtree_control", "+memory")
}

func (m *memCgroups) limitFile() string {
	if m.v2 {
		return "memory.max"
	}
	return "memory.limit_in_bytes"
}

// podDir is the cgroup that holds a pod's containers.
func (m *memCgroups) podDir(uid string) string { return filepath.Join(m.root, uid) }

// ctrCgroup is one container's memory cgroup.
type ctrCgroup struct {
	dir string
	v2  bool
}

// create makes a container's cgroup with its memory limit (0: none). Swap is
// limited to nothing so that the limit cannot be dodged by swapping, as with
// a kubelet's default NoSwap behaviour.
func (m *memCgroups) create(uid, name string, limit int64) (*ctrCgroup, error) {
	pod := m.podDir(uid)
	// The root too: an agent sharing it may have removed it at its shutdown.
	for _, d := range []string{m.root, pod} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		if m.v2 {
			if err := writeCgroupFile(d, "cgroup.subtree_control", "+memory"); err != nil {
				return nil, err
			}
		}
	}
	c := &ctrCgroup{dir: filepath.Join(pod, name), v2: m.v2}
	// It may exist if the previous run's could not be removed; the spec,
	// and so the limit, is the same.
	if err := os.Mkdir(c.dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	if limit <= 0 {
		return c, nil
	}
	v := strconv.FormatInt(limit, 10)
	var files []struct{ name, value string }
	if m.v2 {
		// memory.oom.group: the OOM killer takes the whole container, as a
		// kubelet sets it on cgroup v2.
		files = []struct{ name, value string }{{"memory.max", v}, {"memory.swap.max", "0"}, {"memory.oom.group", "1"}}
	} else {
		// memsw (memory+swap) must not be below the memory limit: set after it.
		files = []struct{ name, value string }{{"memory.limit_in_bytes", v}, {"memory.memsw.limit_in_bytes", v}}
	}
	for i, f := range files {
		err := writeCgroupFile(c.dir, f.name, f.value)
		// Only the first file is essential: swap accounting and oom.group
		// may be absent from the kernel.
		if err != nil && (i == 0 || !errors.Is(err, fs.ErrNotExist)) {
			c.remove()
			return nil, err
		}
	}
	return c, nil
}

// oomCounters is what a cgroup says about OOM kills in it.
type oomCounters struct {
	kills      int64 // oom_kill of memory.oom_control (v1) or memory.events (v2)
	killsKnown bool  // false on v1 kernels before 4.13
	failcnt    int64 // v1 memory.failcnt: times the limit was hit
}

// oomCounters reads the cgroup's counters.
func (c *ctrCgroup) oomCounters() oomCounters {
	if c.v2 {
		events, _ := os.ReadFile(filepath.Join(c.dir, "memory.events"))
		return parseOOMCounters(string(events), "")
	}
	ctl, _ := os.ReadFile(filepath.Join(c.dir, "memory.oom_control"))
	failcnt, _ := os.ReadFile(filepath.Join(c.dir, "memory.failcnt"))
	return parseOOMCounters(string(ctl), string(failcnt))
}

// parseOOMCounters reads the oom_kill line of memory.oom_control (v1) or
// memory.events (v2), both "key value" lines, and memory.failcnt (v1).
func parseOOMCounters(keyed, failcnt string) oomCounters {
	var c oomCounters
	for _, line := range strings.Split(keyed, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == "oom_kill" {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				c.kills, c.killsKnown = n, true
			}
		}
	}
	c.failcnt, _ = strconv.ParseInt(strings.TrimSpace(failcnt), 10, 64)
	return c
}

// oomKilled reports whether a run that ended with exitCode was ended by the
// OOM killer, from the cgroup's counters before and after it. As with a
// container runtime, an OOM kill of any process of the container marks a
// failed container OOMKilled. Without an oom_kill counter, a SIGKILL after
// the limit was hit is taken for the OOM killer's.
func oomKilled(before, after oomCounters, exitCode int) bool {
	if exitCode == 0 {
		return false
	}
	if after.killsKnown {
		return after.kills > before.kills
	}
	return exitCode == 128+int(unix.SIGKILL) && after.failcnt > before.failcnt
}

// remove kills what is left in the cgroup and removes it.
func (c *ctrCgroup) remove() error { return removeCgroupTree(c.dir) }

// procCgroups is what /proc/self/cgroup says about memory.
type procCgroups struct {
	v1Memory    string // path in the v1 hierarchy that has the memory controller
	hasV1Memory bool
	unified     string // path in the v2 (unified) hierarchy, the "0::" line
	hasUnified  bool
}

// parseProcCgroup reads /proc/<pid>/cgroup: "id:controllers:path" lines, the
// v2 line being "0::path".
func parseProcCgroup(content string) procCgroups {
	var pc procCgroups
	for _, line := range strings.Split(content, "\n") {
		id, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		ctrls, path, ok := strings.Cut(rest, ":")
		if !ok || path == "" {
			continue
		}
		if id == "0" && ctrls == "" {
			pc.unified, pc.hasUnified = path, true
			continue
		}
		if slices.Contains(strings.Split(ctrls, ","), "memory") {
			pc.v1Memory, pc.hasV1Memory = path, true
		}
	}
	return pc
}

// cgroupDir maps a cgroup path from /proc/self/cgroup to its directory, from
// the mounts in /proc/self/mountinfo: a v1 hierarchy with the memory
// controller or the v2 one. A mount may show a subtree of the hierarchy (its
// root field), as in a container.
func cgroupDir(mountinfo string, v2 bool, path string) (string, bool) {
	for _, line := range strings.Split(mountinfo, "\n") {
		// id parent major:minor root mountpoint options... - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		fields, pf := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(pf) < 3 {
			continue
		}
		switch {
		case v2 && pf[0] == "cgroup2":
		case !v2 && pf[0] == "cgroup" && slices.Contains(strings.Split(pf[2], ","), "memory"):
		default:
			continue
		}
		root, mp := unescapeMountPath(fields[3]), unescapeMountPath(fields[4])
		rel := path
		if root != "/" {
			if path != root && !strings.HasPrefix(path, root+"/") {
				continue
			}
			rel = strings.TrimPrefix(path, root)
		}
		return filepath.Join(mp, rel), true
	}
	return "", false
}

// memoryLimitBytes is a container's memory limit in bytes, 0 for none. A
// limit that is not a whole number of bytes rounds up, as the kubelet's
// Quantity.Value does.
func memoryLimitBytes(c *corev1.Container) int64 {
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || q.Sign() <= 0 {
		return 0
	}
	return q.Value()
}

// writeCgroupFile writes a cgroup control file; the error names the file.
func writeCgroupFile(dir, name, value string) error {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}

// cgroupPids lists the processes in a cgroup and its descendants.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		raw, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(raw)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupTree SIGKILLs every process in a cgroup tree, waits for them
// to be gone (a cgroup with processes cannot be removed) and removes the
// directories, deepest first. A missing dir is not an error.
func removeCgroupTree(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !isCgroupDir(dir) {
		return fmt.Errorf("%s is not a cgroup", dir)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := cgroupPids(dir)
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes %v still in cgroup %s", pids, dir)
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		// A cgroup dir holds only control files, which rmdir ignores.
		var err error
		for try := 0; try < 50; try++ {
			// Just after its last process exits a cgroup can be busy briefly.
			if err = unix.Rmdir(dirs[i]); !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("rmdir %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// isCgroupDir guards the removal of a path read from a pod record: only a
// directory of a cgroup file system is emptied of processes and removed.
func isCgroupDir(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}

// joinCgroup moves the calling process into the cgroup dir; everything it
// later execs or forks stays there.
func joinCgroup(dir string) error {
	return writeCgroupFile(dir, "cgroup.procs", strconv.Itoa(os.Getpid()))
}
