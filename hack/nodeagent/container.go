package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// runOnce starts a container once and waits for it to exit. ran is false when
// it could not be started for a reason that is retried without counting as a
// restart (unmapped image, unresolved env); ok is false when the pod is
// terminating.
func (r *podRunner) runOnce(c *ctr, attempted chan struct{}) (code int, ran, ok bool) {
	signal := func() {
		if attempted != nil {
			close(attempted)
			attempted = nil
		}
	}
	defer signal()
	if r.ctx.Err() != nil {
		return 0, false, false
	}
	r.mu.Lock()
	pod := r.pod.DeepCopy()
	podIP := r.st.PodIP
	volumes := r.volumes
	r.mu.Unlock()

	images, err := r.a.images()
	if err != nil {
		r.setWaiting(c, "ImageMapUnreadable", err.Error())
		return 0, false, true
	}
	exe, found := images.resolve(c.spec.Image)
	if !found {
		// kubelet's reason for an image it cannot pull: Knative Serving (and
		// kubectl users) read it off the container status
		r.setWaiting(c, "ErrImagePull", fmt.Sprintf("image %q is not in the node agent's image map %s (short name %q)",
			c.spec.Image, r.a.cfg.imageMapFile, imageShortName(c.spec.Image)))
		return 0, false, true
	}
	env, err := containerEnv(r.envContext(pod, podIP), &c.spec)
	if err != nil {
		r.setWaiting(c, "CreateContainerConfigError", err.Error())
		return 0, false, true
	}
	lookup := envLookup(env)
	expandAll := func(in []string) []string {
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = expandVars(s, lookup)
		}
		return out
	}
	argv, err := containerArgv(c.spec.Image, exe, expandAll(c.spec.Command), expandAll(c.spec.Args))
	if err != nil {
		r.setWaiting(c, "CreateContainerConfigError", err.Error())
		return 0, false, true
	}
	mounts, err := r.mounts(c, volumes, lookup)
	if err != nil {
		r.setWaiting(c, "CreateContainerConfigError", err.Error())
		return 0, false, true
	}
	workDir := c.spec.WorkingDir
	if workDir == "" {
		workDir = filepath.Join(r.dir, "work")
	}
	scratch := filepath.Join(r.dir, "rootfs", c.spec.Name)
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		r.setWaiting(c, "CreateContainerError", err.Error())
		return 0, false, true
	}
	spec := launchSpec{Scratch: scratch, Mounts: mounts, WorkingDir: workDir, Argv: argv, Env: env}
	nsPath := ""
	if !pod.Spec.HostNetwork {
		spec.Hostname, spec.Sysfs, nsPath = podHostname(pod), true, netnsPath(r.nsName)
	}
	logFile, err := os.OpenFile(r.a.logPath(pod, c.spec.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		r.setWaiting(c, "CreateContainerError", err.Error())
		return 0, false, true
	}
	logStart, _ := logFile.Seek(0, 2)
	var cg *ctrCgroup
	if r.a.cg != nil {
		// A fresh cgroup each run, so that its OOM counters are this run's.
		cg, err = r.a.cg.create(string(pod.UID), c.spec.Name, memoryLimitBytes(&c.spec))
		if err != nil {
			logFile.Close()
			r.setWaiting(c, "CreateContainerError", fmt.Sprintf("memory cgroup: %v", err))
			return 0, false, true
		}
		spec.Cgroup = cg.dir
	}
	removeCgroup := func() {
		if cg == nil {
			return
		}
		if err := cg.remove(); err != nil {
			r.log.Warn("removing container cgroup", "container", c.spec.Name, "err", err)
		}
	}
	var oomBefore oomCounters
	if cg != nil {
		oomBefore = cg.oomCounters()
	}

	// Start under the lock so that termination sees either no process or
	// this one.
	r.mu.Lock()
	if r.terminating {
		r.mu.Unlock()
		logFile.Close()
		removeCgroup()
		return 0, false, false
	}
	cmd, startErr := startContainerProcess(spec, filepath.Join(r.dir, "rootfs", c.spec.Name+".json"), nsPath, logFile)
	now := metav1.Now()
	if startErr != nil {
		r.mu.Unlock()
		logFile.Close()
		removeCgroup()
		r.log.Warn("container failed to start", "container", c.spec.Name, "err", startErr)
		r.update(func() {
			c.state.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 128, Reason: "StartError", Message: startErr.Error(), StartedAt: now, FinishedAt: now}}
			c.state.Ready, c.state.Started = false, false
		})
		return 128, true, r.ctx.Err() == nil
	}
	exited := make(chan struct{})
	c.cmd, c.pid, c.exited, c.env, c.exe = cmd, cmd.Process.Pid, exited, env, exe
	if c.state.State.Running == nil && (c.state.State.Terminated != nil || c.state.LastState.Terminated != nil) {
		c.state.RestartCount++
	}
	c.state.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}
	c.state.ContainerID = fmt.Sprintf("hitless://%d", c.pid)
	c.state.Started = c.spec.StartupProbe == nil
	c.state.Ready = c.spec.ReadinessProbe == nil && c.state.Started && (!c.init || c.sidecar)
	r.mu.Unlock()
	r.markDirty()
	r.a.recordProcess(r.dir, c.pid)
	r.log.Info("container started", "container", c.spec.Name, "pid", c.pid, "argv", argv)

	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	runCtx, stopProbes := context.WithCancel(r.ctx)
	r.startProbes(runCtx, c, podIP)
	if h := c.spec.Lifecycle; h != nil && h.PostStart != nil {
		if ok, msg := r.runHook(runCtx, c, h.PostStart, podIP, postStartTimeout); !ok {
			r.log.Warn("postStart hook failed, killing container", "container", c.spec.Name, "msg", msg)
			go r.stopProcess(c, 0)
		}
	}
	signal()
	<-exited
	stopProbes()

	code = exitCode(cmd, waitErr)
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	if cg != nil {
		if oomKilled(oomBefore, cg.oomCounters(), code) {
			reason = "OOMKilled"
		}
		// As when a container's PID namespace loses its init: what the
		// program left running goes with it.
		removeCgroup()
	}
	var msg string
	if code != 0 && c.spec.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		msg = logTail(r.a.logPath(pod, c.spec.Name), logStart, 2048, 80)
	}
	finished := metav1.Now()
	r.update(func() {
		c.cmd, c.pid = nil, 0
		c.state.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: reason, Message: msg, StartedAt: now, FinishedAt: finished,
			ContainerID: c.state.ContainerID}}
		c.state.Ready, c.state.Started = false, false
	})
	r.log.Info("container exited", "container", c.spec.Name, "code", code)
	return code, true, r.ctx.Err() == nil
}

// setWaiting marks a container that cannot start yet, and waits a little
// before the caller retries.
func (r *podRunner) setWaiting(c *ctr, reason, msg string) {
	r.update(func() { c.state.State = waitingState(reason, msg) })
	select {
	case <-time.After(2 * time.Second):
	case <-r.ctx.Done():
	}
}

// mounts lists a container's bind mounts: its volumeMounts and the pod's
// /etc/hosts, /etc/hostname and /etc/resolv.conf.
func (r *podRunner) mounts(c *ctr, volumes map[string]string, lookup func(string) (string, bool)) ([]mountSpec, error) {
	var out []mountSpec
	for _, vm := range c.spec.VolumeMounts {
		src, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volume %q of mount %s not found", vm.Name, vm.MountPath)
		}
		sub := vm.SubPath
		if vm.SubPathExpr != "" {
			sub = expandVars(vm.SubPathExpr, lookup)
		}
		if sub != "" {
			src = filepath.Join(src, filepath.Clean("/"+sub))
			if _, err := os.Stat(src); os.IsNotExist(err) {
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, mountSpec{Source: src, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	etc := r.etcDir()
	for _, f := range []string{"hosts", "hostname", "resolv.conf"} {
		out = append(out, mountSpec{Source: filepath.Join(etc, f), Target: "/etc/" + f})
	}
	return out, nil
}

// exitCode is the process's exit code, 128+signal when killed by a signal.
func exitCode(cmd *exec.Cmd, err error) int {
	if cmd.ProcessState == nil {
		return 128
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) || err == nil {
		return cmd.ProcessState.ExitCode()
	}
	return 128
}

// statusSyncPeriod is how often a kubelet syncs a starting pod's status (its
// PLEG relists every second); each sync re-runs a readiness probe that has
// no verdict yet.
const statusSyncPeriod = time.Second

// startProbes starts the container's startup, readiness and liveness probers.
func (r *podRunner) startProbes(ctx context.Context, c *ctr, podIP string) {
	target := r.probeTarget(c, podIP)
	readiness := func() {
		if p := c.spec.ReadinessProbe; p != nil && (!c.init || c.sidecar) {
			go runProber(ctx, p, target, probeFailure, statusSyncPeriod, func(ok bool, msg string) bool {
				if !ok {
					r.log.Info("readiness probe failed", "container", c.spec.Name, "msg", msg)
				}
				r.update(func() { c.state.Ready = ok })
				return false
			})
		}
	}
	liveness := func() {
		if p := c.spec.LivenessProbe; p != nil && (!c.init || c.sidecar) {
			go runProber(ctx, p, target, probeSuccess, 0, func(ok bool, msg string) bool {
				if ok {
					return false
				}
				r.log.Warn("liveness probe failed, restarting container", "container", c.spec.Name, "msg", msg)
				go r.stopProcess(c, r.graceFor(nil))
				return true
			})
		}
	}
	p := c.spec.StartupProbe
	if p == nil || (c.init && !c.sidecar) {
		readiness()
		liveness()
		return
	}
	go runProber(ctx, p, target, probeUnknown, 0, func(ok bool, msg string) bool {
		if !ok {
			r.log.Warn("startup probe failed, restarting container", "container", c.spec.Name, "msg", msg)
			go r.stopProcess(c, r.graceFor(nil))
			return true
		}
		r.update(func() {
			c.state.Started = true
			c.state.Ready = c.spec.ReadinessProbe == nil
		})
		readiness()
		liveness()
		return true
	})
}

// probeTarget addresses a container for probes and hooks.
func (r *podRunner) probeTarget(c *ctr, podIP string) probeTarget {
	return probeTarget{ip: podIP, container: &c.spec, exec: func(ctx context.Context, cmd []string) (int, []byte, error) {
		return r.execIn(ctx, c, cmd)
	}}
}

// runHook runs a lifecycle hook (exec, httpGet, sleep) with a deadline.
func (r *podRunner) runHook(ctx context.Context, c *ctr, h *corev1.LifecycleHandler, podIP string, timeout time.Duration) (bool, string) {
	if h.Sleep != nil {
		select {
		case <-time.After(time.Duration(h.Sleep.Seconds) * time.Second):
		case <-ctx.Done():
		}
		return true, ""
	}
	return runHandler(ctx, corev1.ProbeHandler{Exec: h.Exec, HTTPGet: h.HTTPGet, TCPSocket: h.TCPSocket}, timeout, r.probeTarget(c, podIP))
}

// execIn runs a command in a running container's namespaces and root with
// the container's environment; a first word naming the image's entrypoint
// runs the mapped executable.
func (r *podRunner) execIn(ctx context.Context, c *ctr, command []string) (int, []byte, error) {
	cmd, err := r.execCommand(ctx, c, command)
	if err != nil {
		return -1, nil, err
	}
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		return -1, out, err
	}
	return cmd.ProcessState.ExitCode(), out, nil
}

// execCommand prepares nsenter into a container's namespaces and root.
func (r *podRunner) execCommand(ctx context.Context, c *ctr, command []string) (*exec.Cmd, error) {
	r.mu.Lock()
	pid, env, exe := c.pid, c.env, c.exe
	r.mu.Unlock()
	if pid == 0 {
		return nil, fmt.Errorf("container %s is not running", c.spec.Name)
	}
	if len(command) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	argv, err := containerArgv(c.spec.Image, exe, command, nil)
	if err != nil {
		return nil, err
	}
	args := []string{"-t", fmt.Sprint(pid), "-m", "-n", "-r", "-w"}
	if !r.pod.Spec.HostNetwork {
		args = append(args, "-u")
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(args, "--"), argv...)...)
	cmd.Env = env
	return cmd, nil
}

// graceFor is the termination grace period: the deletion's, else the pod's,
// else Kubernetes' default. Not capped, as kubelet does not cap it: Knative
// Serving gives its pods the Revision's timeout (300 s by default) so that
// the user container's preStop can wait out queue-proxy's 30 s drain and
// still get its SIGTERM, and its connections a clean close, after it.
func (r *podRunner) graceFor(deletionGrace *int64) time.Duration {
	g := defaultGrace
	if deletionGrace != nil {
		g = time.Duration(*deletionGrace) * time.Second
	} else if t := r.pod.Spec.TerminationGracePeriodSeconds; t != nil {
		g = time.Duration(*t) * time.Second
	}
	return g
}

// stopProcess stops a container's current process: preStop hook, SIGTERM,
// then SIGKILL to its process group after grace. As kubelet does, a preStop
// that used up the grace still leaves the process minGraceAfterPreStop
// between SIGTERM and SIGKILL.
func (r *podRunner) stopProcess(c *ctr, grace time.Duration) {
	r.mu.Lock()
	cmd, exited, podIP := c.cmd, c.exited, r.st.PodIP
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	deadline := time.Now().Add(grace)
	if h := c.spec.Lifecycle; h != nil && h.PreStop != nil && grace > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		if ok, msg := r.runHook(ctx, c, h.PreStop, podIP, time.Until(deadline)); !ok {
			r.log.Warn("preStop hook failed", "container", c.spec.Name, "msg", msg)
		}
		cancel()
		if least := time.Now().Add(minGraceAfterPreStop); least.After(deadline) {
			deadline = least
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	kill := time.NewTimer(time.Until(deadline))
	defer kill.Stop()
	select {
	case <-exited:
		return
	case <-kill.C:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		r.log.Error("container did not exit after SIGKILL", "container", c.spec.Name)
	}
}
