package main

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestParseProcCgroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    procCgroups
	}{
		{"hybrid: v1 memory and a unified line", "9:name=systemd:/\n4:memory:/process_api/228f\n1:cpu:/\n0::/\n",
			procCgroups{v1Memory: "/process_api/228f", hasV1Memory: true, unified: "/", hasUnified: true}},
		{"v1 with joint controllers", "5:memory,hugetlb:/system.slice/a.service\n3:cpu,cpuacct:/x\n",
			procCgroups{v1Memory: "/system.slice/a.service", hasV1Memory: true}},
		{"v1 without memory", "3:cpu,cpuacct:/x\n2:name=systemd:/y\n", procCgroups{}},
		{"pure v2", "0::/user.slice/user-0.slice/session-1.scope\n",
			procCgroups{unified: "/user.slice/user-0.slice/session-1.scope", hasUnified: true}},
		{"path with a colon", "0::/a:b\n", procCgroups{unified: "/a:b", hasUnified: true}},
		{"memory as part of a name is not the controller", "4:memoryx:/a\n", procCgroups{}},
		{"empty", "", procCgroups{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := parseProcCgroup(tc.content); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCgroupDir(t *testing.T) {
	const hybrid = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	const v2 = `25 30 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate
`
	const joint = `35 31 0:32 / /sys/fs/cgroup/memory,hugetlb rw - cgroup cgroup rw,memory,hugetlb
`
	// A container's view: the mount shows only its own subtree.
	const sub = `35 31 0:32 /kubepods/pod1 /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
	for _, tc := range []struct {
		name      string
		mountinfo string
		v2        bool
		path      string
		want      string
		ok        bool
	}{
		{"v1 memory", hybrid, false, "/process_api/228f", "/sys/fs/cgroup/memory/process_api/228f", true},
		{"v1 root", hybrid, false, "/", "/sys/fs/cgroup/memory", true},
		{"unified in a hybrid", hybrid, true, "/", "/sys/fs/cgroup/unified", true},
		{"pure v2", v2, true, "/system.slice/x.service", "/sys/fs/cgroup/system.slice/x.service", true},
		{"no v1 memory mount", v2, false, "/a", "", false},
		{"joint controllers", joint, false, "/a", "/sys/fs/cgroup/memory,hugetlb/a", true},
		{"mount of a subtree", sub, false, "/kubepods/pod1/c", "/sys/fs/cgroup/memory/c", true},
		{"path outside the mounted subtree", sub, false, "/kubepods/pod10", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := cgroupDir(tc.mountinfo, tc.v2, tc.path)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %q %v, want %q %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestMemoryLimitBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits corev1.ResourceList
		want   int64
	}{
		{"none", nil, 0},
		{"cpu only", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, 0},
		{"64Mi", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}, 64 << 20},
		{"decimal", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("350M")}, 350_000_000},
		{"1Gi", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}, 1 << 30},
		{"fraction rounds up", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1500m")}, 2},
		{"zero is no limit", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("0")}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := corev1.Container{Resources: corev1.ResourceRequirements{Limits: tc.limits,
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Mi")}}}
			if got := memoryLimitBytes(&c); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestOOMKilled(t *testing.T) {
	const v1Before = "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"
	const v1After = "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
	const v2Before = "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n"
	const v2After = "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 1\n"
	const oldKernel = "oom_kill_disable 0\nunder_oom 0\n"
	for _, tc := range []struct {
		name                  string
		before, after         string
		failBefore, failAfter string
		code                  int
		want                  bool
	}{
		{"v1 OOM kill", v1Before, v1After, "0", "3", 137, true},
		{"v1 SIGKILL without OOM", v1Before, v1Before, "0", "0", 137, false},
		{"v1 earlier run's kill does not count", v1After, v1After, "3", "3", 137, false},
		{"v1 child OOM-killed, main failed", v1Before, v1After, "0", "1", 1, true},
		{"clean exit after a child's OOM kill", v1Before, v1After, "0", "1", 0, false},
		{"v2 OOM kill", v2Before, v2After, "", "", 137, true},
		{"v2 error exit", v2Before, v2Before, "", "", 2, false},
		{"old kernel: SIGKILL after the limit was hit", oldKernel, oldKernel, "0", "5", 137, true},
		{"old kernel: limit hit, exited 1", oldKernel, oldKernel, "0", "5", 1, false},
		{"old kernel: SIGKILL, limit never hit", oldKernel, oldKernel, "0", "0", 137, false},
		{"unreadable files", "", "", "", "", 137, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, a := parseOOMCounters(tc.before, tc.failBefore), parseOOMCounters(tc.after, tc.failAfter)
			if got := oomKilled(b, a, tc.code); got != tc.want {
				t.Errorf("got %v, want %v (before %+v, after %+v)", got, tc.want, b, a)
			}
		})
	}
}
