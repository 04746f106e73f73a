package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// initArg is the hidden first argument that makes the agent binary act as a
// container's init helper.
const initArg = "__container-init"

// launchSpec tells the init helper how to build a container's view of the
// filesystem before it execs the container's process.
type launchSpec struct {
	// Scratch is an empty host directory; the helper mounts a tmpfs there and
	// builds the container's root in it.
	Scratch string `json:"scratch"`
	// Hostname is set in the container's UTS namespace ("" keeps the host's).
	Hostname string `json:"hostname,omitempty"`
	// Sysfs mounts a fresh /sys that shows the pod's network interfaces.
	Sysfs      bool        `json:"sysfs,omitempty"`
	Mounts     []mountSpec `json:"mounts,omitempty"`
	WorkingDir string      `json:"workingDir"`
	Argv       []string    `json:"argv"`
	Env        []string    `json:"env"`
	// Cgroup is the container's memory cgroup ("" for none), joined before
	// anything else.
	Cgroup string `json:"cgroup,omitempty"`
}

// mountSpec binds a host path (a volume, a DNS file) at a container path.
type mountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// startContainerProcess starts the init helper for spec in a new mount (and,
// with a hostname, UTS) namespace inside the network namespace at nsPath (""
// for the host's), with stdout and stderr to out. It returns once the helper
// has exec'd the container's program, or with the helper's setup error.
func startContainerProcess(spec launchSpec, specFile, nsPath string, out *os.File) (*exec.Cmd, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(specFile, raw, 0o600); err != nil {
		return nil, fmt.Errorf("failed to write launch spec: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	cmd := exec.Command("/proc/self/exe", initArg, specFile)
	cmd.Args[0] = "hitless-container-init"
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{statusW}
	flags := uintptr(syscall.CLONE_NEWNS)
	if spec.Hostname != "" {
		flags |= syscall.CLONE_NEWUTS
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
	err = startInNetns(cmd, nsPath)
	statusW.Close()
	if err != nil {
		return nil, err
	}
	// The pipe is close-on-exec in the helper: EOF with no message means the
	// container's program is running.
	msg, _ := io.ReadAll(statusR)
	if len(msg) > 0 {
		cmd.Wait()
		return nil, errors.New(strings.TrimSpace(string(msg)))
	}
	return cmd, nil
}

// startInNetns starts cmd from a thread switched into the network namespace at
// nsPath, so the child is born there.
func startInNetns(cmd *exec.Cmd, nsPath string) error {
	if nsPath == "" {
		return cmd.Start()
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return fmt.Errorf("failed to open netns %s: %w", nsPath, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("failed to get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("failed to enter netns %s: %w", nsPath, err)
	}
	startErr := cmd.Start()
	if err := netns.Set(orig); err != nil {
		// Keep the thread locked so it dies with this goroutine.
		return errors.Join(startErr, fmt.Errorf("failed to return to the host netns: %w", err))
	}
	runtime.UnlockOSThread()
	return startErr
}

// containerInitMain is the helper's main: it runs in the container's new
// mount namespace, builds the root, then execs the program. Setup errors are
// written to the status pipe (fd 3) and to stderr.
func containerInitMain(specFile string) {
	status := os.NewFile(3, "status")
	syscall.CloseOnExec(3)
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "hitless-container-init: %v\n", err)
		fmt.Fprintf(status, "%v\n", err)
		os.Exit(128)
	}
	raw, err := os.ReadFile(specFile)
	if err != nil {
		fail(err)
	}
	var spec launchSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		fail(err)
	}
	// The helper joins the container's cgroup itself, before it execs or
	// forks anything: whatever the program starts is then inside. Had the
	// agent moved the PID after starting the helper, the program could have
	// forked (and its children escaped the limit) before the move.
	if spec.Cgroup != "" {
		if err := joinCgroup(spec.Cgroup); err != nil {
			fail(fmt.Errorf("join memory cgroup: %w", err))
		}
	}
	argv0, err := buildContainerRoot(spec)
	if err != nil {
		fail(err)
	}
	if err := syscall.Exec(argv0, spec.Argv, spec.Env); err != nil {
		fail(fmt.Errorf("exec %s: %w", spec.Argv[0], err))
	}
}

// buildContainerRoot makes the container's filesystem view and chroots into it:
// a tmpfs root holding a recursive bind of every top-level host directory (so
// host programs and libraries are there as on the host), a fresh /sys, the
// volume and DNS file mounts at their container paths, and the working dir.
// A mount point that does not exist under a host directory is created in an
// overlay of that directory whose upper layer lives in memory, so the host
// filesystem is never changed. It returns the resolved program path.
func buildContainerRoot(spec launchSpec) (string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", fmt.Errorf("make mounts private: %w", err)
	}
	// The copy of the host's mount table holds the bind mounts of every pod's
	// network namespace; drop them so deleted namespaces are freed.
	detachNsfsMounts()
	if err := unix.Mount("tmpfs", spec.Scratch, "tmpfs", 0, "mode=755"); err != nil {
		return "", fmt.Errorf("mount tmpfs at %s: %w", spec.Scratch, err)
	}
	// Unbindable: the recursive binds of host directories below must not copy
	// the root being built into itself.
	if err := unix.Mount("", spec.Scratch, "", unix.MS_UNBINDABLE, ""); err != nil {
		return "", fmt.Errorf("make %s unbindable: %w", spec.Scratch, err)
	}
	root := filepath.Join(spec.Scratch, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		src, dst := "/"+e.Name(), filepath.Join(root, e.Name())
		switch t := e.Type(); {
		case t&os.ModeSymlink != 0:
			link, err := os.Readlink(src)
			if err != nil {
				return "", err
			}
			if err := os.Symlink(link, dst); err != nil {
				return "", err
			}
		case t.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return "", err
			}
			if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return "", fmt.Errorf("bind %s: %w", src, err)
			}
		case t.IsRegular():
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return "", err
			}
			if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
				return "", fmt.Errorf("bind %s: %w", src, err)
			}
		}
	}
	if err := unix.Chroot(root); err != nil {
		return "", fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return "", err
	}
	if spec.Sysfs {
		// Best effort: a sysfs mounted from the pod's network namespace.
		_ = unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_NODEV, "")
	}
	mp := mountPoints{safe: []string{"/"}}
	if err := os.Mkdir("/.hitless", 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("tmpfs", "/.hitless", "tmpfs", 0, "mode=700"); err != nil {
		return "", fmt.Errorf("mount overlay scratch: %w", err)
	}
	for _, m := range spec.Mounts {
		fi, err := os.Stat(m.Source)
		if err != nil {
			return "", fmt.Errorf("mount source: %w", err)
		}
		if err := mp.ensure(m.Target, fi.IsDir()); err != nil {
			return "", fmt.Errorf("mount point %s: %w", m.Target, err)
		}
		if err := unix.Mount(m.Source, m.Target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("bind %s at %s: %w", m.Source, m.Target, err)
		}
		if m.ReadOnly {
			if err := unix.Mount("", m.Target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
				return "", fmt.Errorf("read-only %s: %w", m.Target, err)
			}
		}
		if fi.IsDir() {
			mp.safe = append(mp.safe, m.Target)
		}
	}
	if err := mp.ensure(spec.WorkingDir, true); err != nil {
		return "", fmt.Errorf("working dir %s: %w", spec.WorkingDir, err)
	}
	// Overlays hold their own references to the scratch tmpfs.
	_ = unix.Unmount("/.hitless", unix.MNT_DETACH)
	_ = os.Remove("/.hitless")
	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return "", fmt.Errorf("sethostname: %w", err)
		}
	}
	if err := os.Chdir(spec.WorkingDir); err != nil {
		return "", err
	}
	return lookPath(spec.Argv[0], spec.Env)
}

// detachNsfsMounts lazily unmounts every namespace file bind mount.
func detachNsfsMounts() {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options... - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if !ok || len(fields) < 5 || !strings.HasPrefix(post, "nsfs ") {
			continue
		}
		targets = append(targets, unescapeMountPath(fields[4]))
	}
	for _, t := range targets {
		_ = unix.Unmount(t, unix.MNT_DETACH)
	}
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountPoints creates missing mount points inside the container's root
// without writing to host directories.
type mountPoints struct {
	// safe are directories whose contents belong to the container (the tmpfs
	// root's own entries, overlays, pod volumes): creating entries there does
	// not touch the host.
	safe     []string
	overlays int
}

// ensure makes p exist as a directory (or an empty file).
func (m *mountPoints) ensure(p string, dir bool) error {
	p = filepath.Clean(p)
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() != dir {
			return fmt.Errorf("exists and is not a %s", map[bool]string{true: "directory", false: "file"}[dir])
		}
		return nil
	}
	parent := filepath.Dir(p)
	if err := m.ensure(parent, true); err != nil {
		return err
	}
	if !m.isSafe(parent) {
		if err := m.overlay(parent); err != nil {
			return err
		}
	}
	if dir {
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
		// Made here, in the tmpfs root or an overlay: the container's own, so
		// deeper mount points are created in it directly. (An overlay on it
		// would fail: /does/not/matter, a path Serving's volume tests use,
		// needs /does and then /does/not.)
		m.safe = append(m.safe, p)
		return nil
	}
	return os.WriteFile(p, nil, 0o644)
}

// isSafe reports whether new entries may be created in dir. The root itself
// is safe only for its direct entries, which live in the tmpfs.
func (m *mountPoints) isSafe(dir string) bool {
	resolved, err := filepath.EvalSymlinks(dir)
	if err == nil {
		dir = resolved
	}
	if dir == "/" {
		return true
	}
	for _, s := range m.safe[1:] {
		if dir == s || strings.HasPrefix(dir, s+"/") {
			return true
		}
	}
	return false
}

// overlay covers dir with an overlay whose upper layer is in memory.
func (m *mountPoints) overlay(dir string) error {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	m.overlays++
	base := fmt.Sprintf("/.hitless/%d", m.overlays)
	upper, work := base+"/upper", base+"/work"
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Keep the directory's own mode in the upper layer's root.
	if fi, err := os.Stat(resolved); err == nil {
		os.Chmod(upper, fi.Mode().Perm())
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", resolved, upper, work)
	if err := unix.Mount("overlay", resolved, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on %s: %w", resolved, err)
	}
	m.safe = append(m.safe, resolved)
	return nil
}

// lookPath resolves a program name with the PATH in env.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path, _ := envLookup(env)("PATH")
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH %q", name, path)
}
