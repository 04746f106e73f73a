package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// defaultGrace is Kubernetes' terminationGracePeriodSeconds default, for a
	// pod that has none (the API server defaults it; the agent's tests may not).
	defaultGrace = 30 * time.Second
	// minGraceAfterPreStop is kubelet's minimum time between SIGTERM and
	// SIGKILL when a preStop hook used up the grace period.
	minGraceAfterPreStop = 2 * time.Second
	// postStartTimeout bounds a postStart hook.
	postStartTimeout = 30 * time.Second
	// volumeRefresh is how often configMap and secret volumes are read again.
	volumeRefresh = 5 * time.Second
	// Restart back-off: doubles from backoffMin to backoffMax, and starts over
	// after a container ran for backoffReset.
	backoffMin   = time.Second
	backoffMax   = 30 * time.Second
	backoffReset = time.Minute
)

// ctr is one container (or init container) of a running pod.
type ctr struct {
	spec    corev1.Container
	init    bool
	sidecar bool
	state   containerState // guarded by podRunner.mu

	// Guarded by podRunner.mu: the current process, if any.
	cmd    *exec.Cmd
	pid    int
	exited chan struct{}
	env    []string
	exe    string
}

// podRunner runs one pod: its sandbox (network namespace, DNS files,
// volumes), its init containers in order, then its containers with restarts,
// probes and hooks, and finally its termination.
type podRunner struct {
	a      *agent
	nsName string
	dir    string
	log    *slog.Logger

	mu          sync.Mutex
	pod         *corev1.Pod // latest spec; Status is the last computed status
	st          podState
	init, ctrs  []*ctr
	volumes     map[string]string
	terminating bool
	finished    bool // completed: processes stopped, network released
	sandboxUp   bool

	ctx    context.Context // canceled when termination starts
	cancel context.CancelFunc
	dirty  chan struct{}
	wg     sync.WaitGroup // container supervisors
	done   chan struct{}  // closed when the pod is fully torn down
	once   sync.Once
}

func newPodRunner(a *agent, pod *corev1.Pod) *podRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &podRunner{
		a:      a,
		nsName: netnsName(string(pod.UID)),
		dir:    filepath.Join(a.cfg.stateDir, "pods", string(pod.UID)),
		log:    slog.With("pod", pod.Namespace+"/"+pod.Name),
		pod:    pod.DeepCopy(),
		ctx:    ctx,
		cancel: cancel,
		dirty:  make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	now := metav1.Now()
	r.st = podState{HostIP: a.cfg.nodeIP, StartTime: &now}
	if pod.Status.StartTime != nil {
		r.st.StartTime = pod.Status.StartTime
	}
	mk := func(c corev1.Container, init bool) *ctr {
		return &ctr{spec: c, init: init, sidecar: init && isSidecar(&c), state: containerState{
			Name: c.Name, Image: c.Image, ImageID: c.Image, State: waitingState("PodInitializing", ""),
		}}
	}
	for _, c := range pod.Spec.InitContainers {
		r.init = append(r.init, mk(c, true))
	}
	for _, c := range pod.Spec.Containers {
		r.ctrs = append(r.ctrs, mk(c, false))
	}
	for _, c := range r.ctrs {
		c.state.State = waitingState("ContainerCreating", "")
	}
	return r
}

// start launches the pod's lifecycle and status notifier.
func (r *podRunner) start() {
	go r.notifier()
	r.markDirty()
	go r.run()
}

// markDirty asks the notifier to publish the status.
func (r *podRunner) markDirty() {
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

// update changes the pod state under the lock and publishes the status.
func (r *podRunner) update(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	r.markDirty()
}

// completed reports whether nothing but sidecars will run again.
func (r *podRunner) completed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := workloadPhase(r.pod, r.stateLocked())
	return p == corev1.PodSucceeded || p == corev1.PodFailed
}

// stateLocked assembles the podState; r.mu must be held.
func (r *podRunner) stateLocked() podState {
	st := r.st
	st.Init, st.Containers = nil, nil
	for _, c := range r.init {
		st.Init = append(st.Init, c.state)
	}
	for _, c := range r.ctrs {
		st.Containers = append(st.Containers, c.state)
	}
	return st
}

// snapshot computes the current status into r.pod and returns a copy.
func (r *podRunner) snapshot() *corev1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	status := computePodStatus(r.pod, r.stateLocked(), metav1.Now())
	if !apiequality.Semantic.DeepEqual(status, r.pod.Status) {
		r.pod.Status = status
	}
	return r.pod.DeepCopy()
}

// notifier publishes status changes to the pod controller, coalescing bursts.
func (r *podRunner) notifier() {
	var last *corev1.PodStatus
	for {
		select {
		case <-r.dirty:
		case <-r.done:
			return
		}
		p := r.snapshot()
		if last != nil && apiequality.Semantic.DeepEqual(*last, p.Status) {
			continue
		}
		last = p.Status.DeepCopy()
		r.a.publish(p)
		if r.completed() {
			r.finish()
		}
	}
}

// run sets up the sandbox, runs init containers, then starts containers.
func (r *podRunner) run() {
	if !r.setupSandboxWithRetry() {
		return
	}
	r.startVolumeRefresh()
	for _, c := range r.init {
		if c.sidecar {
			if !r.startSupervisor(c) {
				return
			}
			continue
		}
		if !r.runInitToCompletion(c) {
			return
		}
	}
	for _, c := range r.ctrs {
		if !r.startSupervisor(c) {
			return
		}
	}
}

// startVolumeRefresh keeps the pod's configMap and secret volumes current
// while it runs, as kubelet does (there within about a minute; here within
// volumeRefresh): programs that watch their mounted configuration, like
// Knative Serving's configmimic test image, see a patched ConfigMap.
func (r *podRunner) startVolumeRefresh() {
	var vols []corev1.Volume
	r.mu.Lock()
	ns := r.pod.Namespace
	for _, v := range r.pod.Spec.Volumes {
		if v.ConfigMap != nil || v.Secret != nil {
			vols = append(vols, v)
		}
	}
	if len(vols) == 0 || r.terminating || r.finished {
		r.mu.Unlock()
		return
	}
	r.wg.Add(1) // teardown waits for it, so nothing is written into a removed pod
	dirs := r.volumes
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		t := time.NewTicker(volumeRefresh)
		defer t.Stop()
		for {
			select {
			case <-r.ctx.Done():
				return
			case <-t.C:
			}
			for _, v := range vols {
				files, ok := refreshedFiles(ns, r.a, v)
				if !ok || r.ctx.Err() != nil {
					continue
				}
				if err := syncVolume(dirs[v.Name], files); err != nil {
					r.log.Warn("volume refresh failed", "volume", v.Name, "err", err)
				}
			}
		}
	}()
}

// startSupervisor runs a container under supervision and waits for its first
// start attempt; false when the pod is stopping.
func (r *podRunner) startSupervisor(c *ctr) bool {
	r.mu.Lock()
	if r.terminating || r.finished {
		r.mu.Unlock()
		return false
	}
	r.wg.Add(1) // under the lock: terminate waits on wg only after setting terminating
	r.mu.Unlock()
	attempted := make(chan struct{})
	go r.supervise(c, attempted)
	select {
	case <-attempted:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// setupSandboxWithRetry retries the sandbox until it is up or the pod ends.
func (r *podRunner) setupSandboxWithRetry() bool {
	delay := backoffMin
	for {
		err := r.setupSandbox()
		if err == nil {
			r.update(func() { r.st.Reason, r.st.Message = "", "" })
			return true
		}
		r.log.Warn("pod sandbox not ready", "err", err)
		r.update(func() {
			for _, c := range append(append([]*ctr{}, r.init...), r.ctrs...) {
				if c.state.State.Waiting != nil {
					c.state.State = waitingState(c.state.State.Waiting.Reason, err.Error())
				}
			}
		})
		select {
		case <-time.After(delay):
		case <-r.ctx.Done():
			return false
		}
		delay = min(2*delay, backoffMax)
	}
}

// setupSandbox creates the pod's network namespace and address, its DNS files
// and its volumes.
func (r *podRunner) setupSandbox() error {
	r.mu.Lock()
	pod := r.pod.DeepCopy()
	r.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(r.dir, "work"), 0o755); err != nil {
		return err
	}
	rec := podRecord{UID: string(pod.UID), Namespace: pod.Namespace, Name: pod.Name,
		Netns: r.nsName, HostNetwork: pod.Spec.HostNetwork}
	if r.a.cg != nil {
		rec.Cgroup = r.a.cg.podDir(string(pod.UID))
	}
	if err := r.a.writeRecord(r.dir, rec); err != nil {
		return err
	}
	podIP := r.a.cfg.nodeIP
	if !pod.Spec.HostNetwork && !r.sandboxUp {
		ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		defer cancel()
		ip, err := r.a.net.add(ctx, r.nsName, pod.Namespace, pod.Name, string(pod.UID))
		if err != nil {
			// Release whatever part of the attachment was made before retrying.
			_ = r.a.net.del(context.Background(), r.nsName, pod.Namespace, pod.Name, string(pod.UID))
			return fmt.Errorf("failed to set up pod network: %w", err)
		}
		podIP = ip
	} else if r.sandboxUp {
		podIP = r.st.PodIP
	}
	r.mu.Lock()
	r.sandboxUp = true
	r.st.PodIP = podIP
	r.mu.Unlock()
	etc := r.etcDir()
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return err
	}
	files := map[string]string{
		"resolv.conf": resolvConf(pod, r.a.cfg.dnsIP, r.a.cfg.clusterDomain, r.a.hostResolv),
		"hosts":       hostsFile(pod, podIP, r.a.cfg.clusterDomain, r.a.hostHosts),
		"hostname":    podHostname(pod) + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	vols, err := materializeVolumes(r.ctx, r.envContext(pod, podIP), r.a, filepath.Join(r.dir, "volumes"))
	if err != nil {
		return fmt.Errorf("failed to mount volumes: %w", err)
	}
	r.update(func() {
		r.volumes = vols
		r.st.SandboxReady = true
	})
	return nil
}

// etcDir holds the pod's resolv.conf, hosts and hostname: /etc/netns/<netns>
// (where `ip netns exec` finds them too) or, for host network pods, the pod
// directory.
func (r *podRunner) etcDir() string {
	if r.pod.Spec.HostNetwork {
		return filepath.Join(r.dir, "etc")
	}
	return filepath.Join("/etc/netns", r.nsName)
}

func (r *podRunner) envContext(pod *corev1.Pod, podIP string) envContext {
	return envContext{
		pod: pod, podIP: podIP, hostIP: r.a.cfg.nodeIP, nodeAllocatable: r.a.allocatable, objects: r.a,
		kubernetesHost: r.a.cfg.kubernetesHost, kubernetesPort: r.a.cfg.kubernetesPort,
	}
}

// runInitToCompletion runs an init container until it exits 0; false means
// the pod failed or is terminating.
func (r *podRunner) runInitToCompletion(c *ctr) bool {
	delay := backoffMin
	for {
		code, ran, ok := r.runOnce(c, nil)
		if !ok {
			return false
		}
		if code == 0 && ran {
			return true
		}
		if r.pod.Spec.RestartPolicy == corev1.RestartPolicyNever && ran {
			return false // the pod has failed
		}
		if !r.backoff(c, &delay, 0, ran) {
			return false
		}
	}
}

// supervise runs a container, restarting it per the restart policy (always
// for sidecars). attempted is closed after the first start attempt.
func (r *podRunner) supervise(c *ctr, attempted chan struct{}) {
	defer r.wg.Done()
	delay := backoffMin
	for {
		startedAt := time.Now()
		code, ran, ok := r.runOnce(c, attempted)
		attempted = nil
		if !ok {
			return
		}
		policy := r.pod.Spec.RestartPolicy
		restart := c.sidecar || !ran || policy == corev1.RestartPolicyAlways || policy == "" ||
			(policy == corev1.RestartPolicyOnFailure && code != 0)
		if !restart {
			r.markDirty()
			return
		}
		if !r.backoff(c, &delay, time.Since(startedAt), ran) {
			return
		}
	}
}

// backoff waits before the next start; false when the pod is terminating.
func (r *podRunner) backoff(c *ctr, delay *time.Duration, ranFor time.Duration, ran bool) bool {
	if ranFor >= backoffReset {
		*delay = backoffMin
	}
	if ran {
		r.update(func() {
			c.state.LastState = c.state.State
			c.state.State = waitingState("CrashLoopBackOff",
				fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)", *delay, c.spec.Name, r.pod.Name, r.pod.Namespace, r.pod.UID))
		})
	}
	select {
	case <-time.After(*delay):
	case <-r.ctx.Done():
		return false
	}
	*delay = min(2**delay, backoffMax)
	return true
}

// terminate stops every container (preStop, SIGTERM, SIGKILL after grace),
// tears the sandbox down and publishes the final status. Only the first call
// does the work; every call waits for it.
func (r *podRunner) terminate(grace time.Duration) {
	r.once.Do(func() {
		r.mu.Lock()
		r.terminating = true
		r.mu.Unlock()
		r.stopAll(grace)
		// Anything the containers left behind in the pod's network namespace.
		for _, pid := range pidsInNetns(r.nsName) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		waitTimeout(&r.wg, 5*time.Second)
		r.teardownSandbox()
		r.update(func() {
			for _, c := range append(append([]*ctr{}, r.init...), r.ctrs...) {
				if c.state.State.Terminated == nil {
					c.state.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
						ExitCode: 137, Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was terminated",
						FinishedAt: metav1.Now()}}
				}
				c.state.Ready, c.state.Started = false, false
			}
			r.st.SandboxReady = false
		})
		// Publish the final status before the notifier stops.
		r.a.publish(r.snapshot())
		close(r.done)
	})
	<-r.done
}

// stopAll cancels the pod's loops and stops every container at once, each
// with the given grace period.
func (r *podRunner) stopAll(grace time.Duration) {
	r.cancel()
	var wg sync.WaitGroup
	for _, c := range append(append([]*ctr{}, r.ctrs...), r.init...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.stopProcess(c, grace)
		}()
	}
	wg.Wait()
}

// finish stops what still runs of a pod that has completed (sidecars) and
// releases its network, as the kubelet stops a completed pod's sandbox. The
// pod directory stays until the pod is deleted.
func (r *podRunner) finish() {
	r.mu.Lock()
	if r.terminating || r.finished {
		r.mu.Unlock()
		return
	}
	r.finished = true
	r.mu.Unlock()
	go func() {
		r.stopAll(r.graceFor(nil))
		waitTimeout(&r.wg, 5*time.Second)
		r.teardownNetwork()
	}()
}

// teardownNetwork runs CNI DEL and removes the network namespace.
func (r *podRunner) teardownNetwork() {
	r.mu.Lock()
	up := r.sandboxUp
	r.sandboxUp = false
	r.mu.Unlock()
	if !up || r.pod.Spec.HostNetwork {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.a.net.del(ctx, r.nsName, r.pod.Namespace, r.pod.Name, string(r.pod.UID)); err != nil {
		r.log.Warn("network teardown", "err", err)
	}
}

// teardownSandbox removes everything the pod had on the node but its logs.
func (r *podRunner) teardownSandbox() {
	if r.a.cg != nil {
		// Kills anything left in the containers' cgroups (a host network
		// pod's stray processes have no netns to be found by).
		if err := removeCgroupTree(r.a.cg.podDir(string(r.pod.UID))); err != nil {
			r.log.Warn("removing pod cgroup", "err", err)
		}
	}
	r.teardownNetwork()
	if !r.pod.Spec.HostNetwork {
		os.RemoveAll(r.etcDir())
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.log.Warn("removing pod directory", "err", err)
	}
}

// waitTimeout waits for wg at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
	case <-time.After(d):
	}
}
