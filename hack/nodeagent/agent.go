package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// config is the agent's command line.
type config struct {
	kubeconfig     string
	nodeName       string
	nodeIP         string
	podCIDR        string
	cniConf        string
	cniBinDir      string
	imageMapFile   string
	stateDir       string
	logDir         string
	dnsIP          string
	clusterDomain  string
	kubernetesHost string
	kubernetesPort string
	cpu, memory    string
	maxPods        int
	kubeletPort    int
}

// agent is the virtual-kubelet provider that runs pods as local processes.
type agent struct {
	cfg         config
	client      kubernetes.Interface
	net         *network
	hostResolv  []byte
	hostHosts   []byte
	allocatable corev1.ResourceList
	// cg places containers in memory cgroups; nil when no writable memory
	// cgroup is available (limits are then not enforced).
	cg *memCgroups

	mu     sync.Mutex
	pods   map[string]*podRunner // by namespace/name
	notify func(*corev1.Pod)
}

var (
	_ node.PodLifecycleHandler = (*agent)(nil)
	_ node.PodNotifier         = (*agent)(nil)
)

func newAgent(cfg config, client kubernetes.Interface, net *network) *agent {
	a := &agent{cfg: cfg, client: client, net: net, pods: map[string]*podRunner{}, allocatable: nodeCapacity(cfg)}
	a.hostResolv, _ = os.ReadFile("/etc/resolv.conf")
	a.hostHosts, _ = os.ReadFile("/etc/hosts")
	cg, err := detectMemoryCgroups()
	if err != nil {
		slog.Warn("no writable memory cgroup: container memory limits are NOT enforced", "err", err)
	} else {
		a.cg = cg
		slog.Info("container memory limits enforced", "cgroup", cg.root, "v2", cg.v2)
	}
	return a
}

func podKey(namespace, name string) string { return namespace + "/" + name }

// images reads the image map; it is re-read at every container start, so the
// stack can extend it without restarting the agent.
func (a *agent) images() (imageMap, error) { return loadImageMap(a.cfg.imageMapFile) }

// logPath is where a container's stdout and stderr go.
func (a *agent) logPath(pod *corev1.Pod, container string) string {
	return filepath.Join(a.cfg.logDir, fmt.Sprintf("%s_%s_%s.log", pod.Namespace, pod.Name, container))
}

// publish hands a pod with a new status to the pod controller.
func (a *agent) publish(p *corev1.Pod) {
	a.mu.Lock()
	cb := a.notify
	a.mu.Unlock()
	if cb != nil {
		cb(p)
	}
}

// NotifyPods registers the pod controller's status callback.
func (a *agent) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	a.mu.Lock()
	a.notify = cb
	a.mu.Unlock()
}

// CreatePod starts running a pod; the work happens in the background.
func (a *agent) CreatePod(_ context.Context, pod *corev1.Pod) error {
	key := podKey(pod.Namespace, pod.Name)
	a.mu.Lock()
	if old, ok := a.pods[key]; ok && old.pod.UID == pod.UID {
		a.mu.Unlock()
		return nil
	}
	r := newPodRunner(a, pod)
	a.pods[key] = r
	a.mu.Unlock()
	r.log.Info("creating pod", "uid", pod.UID)
	r.start()
	return nil
}

// UpdatePod takes the new labels and annotations; other changes the API
// allows (images, tolerations, deadlines) are not acted on.
func (a *agent) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	r := a.runner(pod.Namespace, pod.Name)
	if r == nil || r.pod.UID != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not running here", pod.Namespace, pod.Name)
	}
	r.update(func() {
		r.pod.Labels, r.pod.Annotations = pod.Labels, pod.Annotations
		for i := range r.pod.Spec.Containers {
			if i < len(pod.Spec.Containers) {
				r.pod.Spec.Containers[i].Image = pod.Spec.Containers[i].Image
			}
		}
		r.pod.Spec.Tolerations = pod.Spec.Tolerations
		r.pod.Spec.ActiveDeadlineSeconds = pod.Spec.ActiveDeadlineSeconds
	})
	return nil
}

// DeletePod terminates a pod in the background: containers get their grace
// period, then the sandbox is removed and the pod is deleted from the API with
// grace 0 and a UID precondition, so that deletion does not wait out the
// pod controller's own grace-period timer.
func (a *agent) DeletePod(_ context.Context, pod *corev1.Pod) error {
	r := a.runner(pod.Namespace, pod.Name)
	if r == nil || r.pod.UID != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not running here", pod.Namespace, pod.Name)
	}
	grace := r.graceFor(pod.DeletionGracePeriodSeconds)
	go func() {
		t0 := time.Now()
		r.terminate(grace)
		a.mu.Lock()
		if a.pods[podKey(pod.Namespace, pod.Name)] == r {
			delete(a.pods, podKey(pod.Namespace, pod.Name))
		}
		a.mu.Unlock()
		if pod.DeletionTimestamp == nil || a.client == nil {
			return
		}
		opts := metav1.DeleteOptions{GracePeriodSeconds: new(int64), Preconditions: metav1.NewUIDPreconditions(string(pod.UID))}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.log.Warn("final pod delete failed", "err", err)
		}
		r.log.Info("pod deleted", "took", time.Since(t0).Round(time.Millisecond))
	}()
	return nil
}

func (a *agent) runner(namespace, name string) *podRunner {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[podKey(namespace, name)]
}

// GetPod returns the pod with the status the agent computed.
func (a *agent) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	r := a.runner(namespace, name)
	if r == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not known", namespace, name)
	}
	return r.snapshot(), nil
}

// GetPodStatus returns the computed status.
func (a *agent) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	p, err := a.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &p.Status, nil
}

// GetPods lists the pods the agent runs.
func (a *agent) GetPods(context.Context) ([]*corev1.Pod, error) {
	a.mu.Lock()
	runners := make([]*podRunner, 0, len(a.pods))
	for _, r := range a.pods {
		runners = append(runners, r)
	}
	a.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(runners))
	for _, r := range runners {
		out = append(out, r.snapshot())
	}
	return out, nil
}

// shutdown stops every pod (SIGTERM, SIGKILL after grace) and removes their
// sandboxes; pods stay in the API.
func (a *agent) shutdown(grace time.Duration) {
	a.mu.Lock()
	runners := make([]*podRunner, 0, len(a.pods))
	for _, r := range a.pods {
		runners = append(runners, r)
	}
	a.pods = map[string]*podRunner{}
	a.notify = nil
	a.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.terminate(min(grace, r.graceFor(nil)))
			a.reportStopped(r.snapshot())
		}()
	}
	wg.Wait()
	if a.cg != nil {
		// Only if empty: pods of another agent sharing the cgroup stay.
		_ = unix.Rmdir(a.cg.root)
	}
}

// reportStopped writes the status of a pod stopped by the agent's shutdown
// (containers terminated, not ready) straight to the API, the pod controller
// being stopped already: its endpoints must not stay ready while no node
// agent runs it.
func (a *agent) reportStopped(p *corev1.Pod) {
	if a.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods := a.client.CoreV1().Pods(p.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || cur.UID != p.UID {
			return err
		}
		cur.Status = p.Status
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		slog.Warn("could not report a stopped pod", "pod", p.Namespace+"/"+p.Name, "err", err)
	}
}

// secret reads a Secret from the API.
func (a *agent) secret(namespace, name string) (*corev1.Secret, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// configMap reads a ConfigMap from the API.
func (a *agent) configMap(namespace, name string) (*corev1.ConfigMap, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
}

// serviceAccountToken requests a pod-bound token through the TokenRequest API.
func (a *agent) serviceAccountToken(ctx context.Context, pod *corev1.Pod, audience string, exp *int64) (string, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := a.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, tokenRequest(pod, audience, exp), metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for service account %s: %w", sa, err)
	}
	return tr.Status.Token, nil
}

// podRecord is what the state dir keeps about a pod, so that a restarted
// agent can clean up after a crash.
type podRecord struct {
	UID         string `json:"uid"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Netns       string `json:"netns"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	// Cgroup is the pod's memory cgroup dir (its containers' are below),
	// absolute because a restarted agent may run in another cgroup.
	Cgroup    string         `json:"cgroup,omitempty"`
	Processes []processStamp `json:"processes,omitempty"`
}

// processStamp identifies a process across PID reuse by its start time.
type processStamp struct {
	PID   int    `json:"pid"`
	Start string `json:"start"`
}

var recordMu sync.Mutex

func (a *agent) writeRecord(dir string, rec podRecord) error {
	recordMu.Lock()
	defer recordMu.Unlock()
	if old, err := readRecord(dir); err == nil {
		rec.Processes = old.Processes
	}
	return writeRecordFile(dir, rec)
}

func writeRecordFile(dir string, rec podRecord) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, _ := json.Marshal(rec)
	tmp := filepath.Join(dir, "record.json.tmp")
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "record.json"))
}

func readRecord(dir string) (podRecord, error) {
	var rec podRecord
	raw, err := os.ReadFile(filepath.Join(dir, "record.json"))
	if err != nil {
		return rec, err
	}
	return rec, json.Unmarshal(raw, &rec)
}

// recordProcess adds a started process to the pod's record.
func (a *agent) recordProcess(dir string, pid int) {
	recordMu.Lock()
	defer recordMu.Unlock()
	rec, err := readRecord(dir)
	if err != nil {
		return
	}
	rec.Processes = append(rec.Processes, processStamp{PID: pid, Start: processStart(pid)})
	_ = writeRecordFile(dir, rec)
}

// processStart is field 22 of /proc/<pid>/stat (start time in clock ticks).
func processStart(pid int) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// cleanupLeftovers removes what a previous run left in the state dir: it kills
// the recorded processes and everything in the recorded network namespaces
// and memory cgroups, runs CNI DEL, deletes the namespaces, the cgroups and
// the pod directories.
func (a *agent) cleanupLeftovers(ctx context.Context) {
	dirs, _ := filepath.Glob(filepath.Join(a.cfg.stateDir, "pods", "*"))
	for _, dir := range dirs {
		rec, err := readRecord(dir)
		if err != nil {
			os.RemoveAll(dir)
			continue
		}
		log := slog.With("pod", rec.Namespace+"/"+rec.Name, "netns", rec.Netns)
		killed := 0
		for _, p := range rec.Processes {
			if p.Start != "" && processStart(p.PID) == p.Start {
				_ = syscall.Kill(-p.PID, syscall.SIGKILL)
				_ = syscall.Kill(p.PID, syscall.SIGKILL)
				killed++
			}
		}
		if !rec.HostNetwork {
			for _, pid := range pidsInNetns(rec.Netns) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				killed++
			}
			if killed > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			if err := a.net.del(ctx, rec.Netns, rec.Namespace, rec.Name, rec.UID); err != nil {
				log.Warn("leftover network teardown", "err", err)
			}
			os.RemoveAll(filepath.Join("/etc/netns", rec.Netns))
		}
		if rec.Cgroup != "" {
			// Also kills what the container programs forked.
			if err := removeCgroupTree(rec.Cgroup); err != nil {
				log.Warn("leftover cgroup", "err", err)
			}
			// The killed agent's hitless cgroup, if it ran in another cgroup
			// and nothing else is left in it (rmdir fails otherwise).
			if parent := filepath.Dir(rec.Cgroup); filepath.Base(parent) == "hitless" &&
				(a.cg == nil || parent != a.cg.root) && isCgroupDir(parent) {
				_ = unix.Rmdir(parent)
			}
		}
		os.RemoveAll(dir)
		log.Info("cleaned up leftover pod", "killed", killed)
	}
}

// logTail returns the end of what a container wrote since offset: at most
// maxBytes and maxLines.
func logTail(file string, offset int64, maxBytes int64, maxLines int) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	end, _ := f.Seek(0, io.SeekEnd)
	start := max(offset, end-maxBytes)
	buf := make([]byte, end-start)
	if _, err := f.ReadAt(buf, start); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}
