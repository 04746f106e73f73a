package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
)

// Hidden subcommands the self test runs as container programs.
const (
	selftestServerArg = "__selftest-server"
	selftestWriteArg  = "__selftest-write"
	selftestExitArg   = "__selftest-exit"
)

const (
	selftestBridge = "hitless-test0"
	selftestSubnet = "10.250.0.0/24"
	selftestGW     = "10.250.0.1"
)

// selftestPrograms runs a hidden test program and reports whether args named one.
func selftestPrograms(args []string) bool {
	if len(args) < 2 {
		return false
	}
	switch args[1] {
	case selftestServerArg:
		selftestServer(args[2:])
	case selftestWriteArg:
		if err := os.WriteFile(args[2], []byte(args[3]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case selftestExitArg:
		var code int
		fmt.Sscan(args[2], &code)
		fmt.Println("exiting with", code)
		os.Exit(code)
	default:
		return false
	}
	return true
}

// selftestServer answers / with what the container sees, and /healthz only
// when the probe sends its header.
func selftestServer(args []string) {
	fs := flag.NewFlagSet("server", flag.ExitOnError)
	port := fs.String("port", "8080", "")
	fs.Parse(args)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Probe") != "selftest" {
			http.Error(w, "missing probe header", http.StatusBadRequest)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		host, _ := os.Hostname()
		wd, _ := os.Getwd()
		read := func(p string) string {
			b, err := os.ReadFile(p)
			if err != nil {
				return "ERR " + err.Error()
			}
			return string(b)
		}
		json.NewEncoder(w).Encode(map[string]string{
			"hostname": host, "wd": wd,
			"POD_NAME": os.Getenv("POD_NAME"), "POD_IP": os.Getenv("POD_IP"), "MESSAGE": os.Getenv("MESSAGE"),
			"init": read("/selftest/nested/data/init.txt"), "labels": read("/etc/podinfo/labels"),
			"resolv": read("/etc/resolv.conf"), "hosts": read("/etc/hosts"),
		})
	})
	fmt.Println("listening on", *port)
	if err := http.ListenAndServe(":"+*port, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// selftestPod is a pod whose containers run the agent's own test programs.
func selftestPod(name string, policy corev1.RestartPolicy, init []corev1.Container, containers ...corev1.Container) *corev1.Pod {
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "selftest", UID: types.UID(fmt.Sprintf("selftest-%s-%s", name, rand.String(6))),
			Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName: "hitless-node", RestartPolicy: policy, TerminationGracePeriodSeconds: &grace,
			InitContainers: init, Containers: containers,
			Volumes: []corev1.Volume{
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			},
		},
	}
}

func serverPod(name string) *corev1.Pod {
	// a mount path whose parents are absent on the host, two levels deep
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: "/selftest/nested/data"}, {Name: "podinfo", MountPath: "/etc/podinfo", ReadOnly: true}}
	init := corev1.Container{Name: "setup", Image: "example.local/hitless/selftest:latest",
		Args: []string{selftestWriteArg, "/selftest/nested/data/init.txt", "hello from init of $(POD_NAME)"}, VolumeMounts: mounts,
		Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}
	server := corev1.Container{Name: "server", Image: "example.local/hitless/selftest:latest@sha256:0000",
		Args: []string{selftestServerArg, "--port", "8080"}, VolumeMounts: mounts,
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			{Name: "MESSAGE", Value: "I am $(POD_NAME) at $(POD_IP)"},
		},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/healthz", Port: intstr.FromString("http"), HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "selftest"}}}}},
	}
	return selftestPod(name, corev1.RestartPolicyAlways, []corev1.Container{init}, server)
}

// runSelftest exercises the agent without an API server: two server pods on a
// test bridge (init container, emptyDir and downwardAPI volumes at paths that
// do not exist on the host, env with fieldRefs and $(VAR), an httpGet
// readiness probe with a header), a failing Never pod, an unmapped image and,
// with memory cgroups, containers allocating 200 MB under a 64Mi limit (OOM
// killed), a 512Mi one and none; it checks them from the host, deletes them
// and removes everything it made.
func runSelftest(ctx context.Context, cfg config) (err error) {
	if cfg.cniBinDir == "" {
		return errors.New("--cni-bin-dir is required")
	}
	tmp, err := os.MkdirTemp("", "hitless-selftest-")
	if err != nil {
		return err
	}
	defer func() {
		// Remove the bridge and the IPAM state.
		exec.Command("ip", "link", "del", selftestBridge).Run()
		os.RemoveAll(tmp)
		if out, _ := exec.Command("ip", "-o", "link", "show", selftestBridge).CombinedOutput(); len(out) > 0 && !strings.Contains(string(out), "does not exist") {
			err = errors.Join(err, fmt.Errorf("bridge %s still exists", selftestBridge))
		}
	}()
	// The bridge carries the gateway address before the plugin adopts it, so
	// isGateway stays false and no sysctl (ip_forward) is changed.
	for _, args := range [][]string{
		{"link", "add", selftestBridge, "type", "bridge"},
		{"addr", "add", selftestGW + "/24", "dev", selftestBridge},
		{"link", "set", selftestBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
	}
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"hitless-selftest","plugins":[
 {"type":"bridge","bridge":%q,"isGateway":false,"ipMasq":false,"hairpinMode":true,
  "ipam":{"type":"host-local","ranges":[[{"subnet":%q,"gateway":%q}]],"dataDir":%q}},
 {"type":"loopback"}]}`, selftestBridge, selftestSubnet, selftestGW, filepath.Join(tmp, "ipam"))
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.cniConf = filepath.Join(tmp, "selftest.conflist")
	cfg.imageMapFile = filepath.Join(tmp, "images.json")
	cfg.stateDir = filepath.Join(tmp, "state")
	cfg.logDir = filepath.Join(tmp, "logs")
	cfg.nodeIP, cfg.dnsIP, cfg.nodeName = selftestGW, selftestGW, "hitless-node"
	// "python" maps to nothing: its command runs as given from the host.
	images, _ := json.Marshal(imageMap{"selftest": exe, "python": ""})
	for f, content := range map[string][]byte{cfg.cniConf: []byte(conf), cfg.imageMapFile: images} {
		if err := os.WriteFile(f, content, 0o644); err != nil {
			return err
		}
	}
	os.MkdirAll(cfg.logDir, 0o755)
	netw, err := newNetwork(cfg.cniConf, cfg.cniBinDir, filepath.Join(cfg.stateDir, "cni-cache"))
	if err != nil {
		return err
	}
	a := newAgent(cfg, nil, netw)
	defer a.shutdown(time.Second)

	pods := []*corev1.Pod{serverPod("web-a"), serverPod("web-b"),
		selftestPod("job", corev1.RestartPolicyNever, nil, corev1.Container{Name: "main", Image: "selftest", Args: []string{selftestExitArg, "3"}}),
		selftestPod("unmapped", corev1.RestartPolicyAlways, nil, corev1.Container{Name: "main", Image: "docker.io/library/nginx:1.27"}),
	}
	// Memory limits: a 64Mi container allocating 200 MB is OOM-killed; the
	// same allocation under a 512Mi limit, or with no limit, runs on.
	_, pyErr := exec.LookPath("python3")
	memoryPods := a.cg != nil && pyErr == nil
	if memoryPods {
		pods = append(pods, memoryPod("oom", "64Mi"), memoryPod("roomy", "512Mi"), memoryPod("nolimit", ""))
	}
	t0 := time.Now()
	for _, p := range pods {
		if err := a.CreatePod(ctx, p); err != nil {
			return err
		}
	}
	waitFor := func(what string, cond func() bool) error {
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	get := func(name string) *corev1.Pod {
		p, _ := a.GetPod(ctx, "selftest", name)
		return p
	}
	var failures []string
	checks := 0
	check := func(ok bool, format string, args ...any) {
		checks++
		status := "ok  "
		if !ok {
			status = "FAIL"
			failures = append(failures, fmt.Sprintf(format, args...))
		}
		fmt.Printf("%s %s\n", status, fmt.Sprintf(format, args...))
	}
	for _, name := range []string{"web-a", "web-b"} {
		err := waitFor(name+" ready", func() bool { p := get(name); return p != nil && conditionTrue(p.Status.Conditions, corev1.PodReady) })
		check(err == nil, "%s Running and Ready after %s", name, time.Since(t0).Round(time.Millisecond))
	}
	err = waitFor("job failed", func() bool { p := get("job"); return p != nil && p.Status.Phase == corev1.PodFailed })
	check(err == nil, "job with restartPolicy Never exiting 3 is Failed")
	if p := get("job"); p != nil && len(p.Status.ContainerStatuses) == 1 {
		t := p.Status.ContainerStatuses[0].State.Terminated
		check(t != nil && t.ExitCode == 3, "job container terminated with exit code 3: %+v", p.Status.ContainerStatuses[0].State)
	}
	err = waitFor("unmapped image", func() bool {
		p := get("unmapped")
		return p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "ErrImagePull"
	})
	check(err == nil, "unmapped image waits with reason ErrImagePull: %s", func() string {
		if p := get("unmapped"); p != nil && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil {
			return p.Status.ContainerStatuses[0].State.Waiting.Message
		}
		return ""
	}())

	if memoryPods {
		checkMemoryPods(a, get, waitFor, check)
	} else {
		fmt.Printf("skip memory limit checks: cgroups available %v, python3: %v\n", a.cg != nil, pyErr)
	}

	ips := map[string]string{}
	for _, name := range []string{"web-a", "web-b"} {
		p := get(name)
		if p == nil {
			continue
		}
		ips[name] = p.Status.PodIP
		resp, err := http.Get("http://" + p.Status.PodIP + ":8080/")
		if err != nil {
			check(false, "GET %s from the host: %v", name, err)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got map[string]string
		json.Unmarshal(body, &got)
		check(got["hostname"] == name, "%s: GET http://%s:8080/ answered from hostname %q", name, p.Status.PodIP, got["hostname"])
		check(got["POD_IP"] == p.Status.PodIP && got["MESSAGE"] == fmt.Sprintf("I am %s at %s", name, p.Status.PodIP),
			"%s: env POD_IP=%q MESSAGE=%q", name, got["POD_IP"], got["MESSAGE"])
		check(got["init"] == "hello from init of "+name, "%s: init container wrote /selftest/nested/data/init.txt: %q", name, got["init"])
		check(got["labels"] == fmt.Sprintf("app=%q", name), "%s: downwardAPI /etc/podinfo/labels: %q", name, got["labels"])
		check(strings.HasPrefix(got["resolv"], "nameserver "+selftestGW+"\nsearch selftest.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5"),
			"%s: /etc/resolv.conf is the pod's: %q", name, got["resolv"])
		check(strings.Contains(got["hosts"], p.Status.PodIP+"\t"+name), "%s: /etc/hosts names the pod", name)
		check(strings.HasPrefix(got["wd"], cfg.stateDir), "%s: working dir %s is under the state dir", name, got["wd"])
	}
	check(ips["web-a"] != "" && ips["web-a"] != ips["web-b"], "pods have distinct IPs: %v", ips)
	for _, p := range []string{"/selftest", "/etc/podinfo"} {
		_, err := os.Stat(p)
		check(os.IsNotExist(err), "host filesystem untouched: %s does not exist on the host", p)
	}
	if r := a.runner("selftest", "web-a"); r != nil {
		code, out, err := r.execIn(ctx, r.ctrs[0], []string{"cat", "/etc/podinfo/labels"})
		check(err == nil && code == 0 && string(out) == `app="web-a"`, "exec in web-a: cat /etc/podinfo/labels = %q (code %d, err %v)", out, code, err)
	}

	var netnsNames []string
	for _, p := range pods {
		netnsNames = append(netnsNames, netnsName(string(p.UID)))
	}
	t1 := time.Now()
	for _, p := range pods {
		now := metav1.Now()
		p.DeletionTimestamp = &now
		a.DeletePod(ctx, p)
	}
	err = waitFor("pods gone", func() bool { ps, _ := a.GetPods(ctx); return len(ps) == 0 })
	check(err == nil, "all pods terminated and cleaned up after %s", time.Since(t1).Round(time.Millisecond))
	for _, n := range netnsNames {
		_, err := os.Stat(netnsPath(n))
		check(os.IsNotExist(err), "netns %s removed", n)
		_, err = os.Stat(filepath.Join("/etc/netns", n))
		check(os.IsNotExist(err), "/etc/netns/%s removed", n)
	}
	for name, ip := range ips {
		c := http.Client{Timeout: 500 * time.Millisecond}
		_, err := c.Get("http://" + ip + ":8080/")
		check(err != nil, "%s no longer answers at %s", name, ip)
	}
	if memoryPods {
		for _, p := range pods {
			_, err := os.Stat(a.cg.podDir(string(p.UID)))
			check(os.IsNotExist(err), "pod cgroup %s removed", a.cg.podDir(string(p.UID)))
		}
	}
	wantLogs := 5
	if memoryPods {
		wantLogs += 3
	}
	logs, _ := filepath.Glob(filepath.Join(cfg.logDir, "*.log"))
	check(len(logs) == wantLogs, "container logs written: %d files", len(logs))
	fmt.Printf("%d passed, %d failed\n", checks-len(failures), len(failures))
	if len(failures) > 0 {
		slog.Error("selftest failed", "failures", failures)
		return errors.New("selftest failed")
	}
	return nil
}

// memoryPod runs python3 from the host, allocating 200 MB and then sleeping,
// with a memory limit ("" for none). The pod never restarts, so an OOM kill
// leaves it Failed.
func memoryPod(name, limit string) *corev1.Pod {
	c := corev1.Container{Name: "main", Image: "example.local/python:3",
		Command: []string{"python3", "-c", "b = bytearray(200*1024*1024); print('allocated', len(b), flush=True); import time; time.sleep(30)"}}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
	}
	return selftestPod(name, corev1.RestartPolicyNever, nil, c)
}

// checkMemoryPods checks the memory pods while they run.
func checkMemoryPods(a *agent, get func(string) *corev1.Pod, waitFor func(string, func() bool) error, check func(bool, string, ...any)) {
	state := func(name string) corev1.ContainerState {
		if p := get(name); p != nil && len(p.Status.ContainerStatuses) == 1 {
			return p.Status.ContainerStatuses[0].State
		}
		return corev1.ContainerState{}
	}
	err := waitFor("oom terminated", func() bool { return state("oom").Terminated != nil })
	t := state("oom").Terminated
	check(err == nil && t != nil && t.Reason == "OOMKilled" && t.ExitCode == 137,
		"container with a 64Mi limit allocating 200 MB is Terminated OOMKilled with exit code 137: %+v", t)
	if p := get("oom"); p != nil {
		check(p.Status.Phase == corev1.PodFailed, "OOM-killed pod with restartPolicy Never is Failed: %s", p.Status.Phase)
	}
	for _, name := range []string{"roomy", "nolimit"} {
		r := a.runner("selftest", name)
		if r == nil {
			check(false, "%s runs", name)
			continue
		}
		err := waitFor(name+" allocated", func() bool {
			b, _ := os.ReadFile(a.logPath(r.pod, "main"))
			return strings.Contains(string(b), "allocated")
		})
		check(err == nil && state(name).Running != nil, "%s: 200 MB allocated and still running: %+v", name, state(name))
		dir := filepath.Join(a.cg.podDir(string(r.pod.UID)), "main")
		limit, _ := os.ReadFile(filepath.Join(dir, a.cg.limitFile()))
		want := "536870912"
		if name == "nolimit" {
			want = "unlimited"
		}
		got := strings.TrimSpace(string(limit))
		if n, err := strconv.ParseInt(got, 10, 64); got == "max" || err == nil && n >= 1<<62 {
			got = "unlimited" // v2 says max, v1 the largest multiple of the page size
		}
		check(got == want, "%s: %s/%s is %s", name, dir, a.cg.limitFile(), got)
		r.mu.Lock()
		pid := r.ctrs[0].pid
		r.mu.Unlock()
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		check(pid != 0 && slices.Contains(strings.Fields(string(procs)), strconv.Itoa(pid)),
			"%s: container process %d is in its cgroup", name, pid)
	}
}
