package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	tEarlier = metav1.NewTime(time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC))
	tNow     = metav1.NewTime(time.Date(2026, 1, 1, 10, 5, 0, 0, time.UTC))
)

func statusPod(policy corev1.RestartPolicy, containers []string, inits ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	p.Spec.RestartPolicy = policy
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c, Image: "img"})
	}
	for _, c := range inits {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: c, Image: "img"})
	}
	return p
}

func running(name string, ready bool) containerState {
	return containerState{Name: name, Image: "img", Started: true, Ready: ready,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: tEarlier}}}
}

func exited(name string, code int32) containerState {
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	return containerState{Name: name, Image: "img",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
}

func backingOff(name string, code int32) containerState {
	c := exited(name, code)
	c.LastState, c.State = c.State, waitingState("CrashLoopBackOff", "back-off")
	c.RestartCount = 1
	return c
}

func creating(name string) containerState {
	return containerState{Name: name, Image: "img", State: waitingState("ContainerCreating", "")}
}

func cond(t corev1.PodConditionType, ok bool, reason, msg string, at metav1.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, Reason: reason, Message: msg, LastTransitionTime: at}
}

func TestPodPhase(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		st   podState
		want corev1.PodPhase
	}{
		{"sandbox not ready is pending", statusPod(corev1.RestartPolicyAlways, []string{"a"}),
			podState{Containers: []containerState{creating("a")}}, corev1.PodPending},
		{"running init container is pending", statusPod(corev1.RestartPolicyAlways, []string{"a"}, "i"),
			podState{SandboxReady: true, Init: []containerState{running("i", false)}, Containers: []containerState{creating("a")}}, corev1.PodPending},
		{"failed init with Never fails the pod", statusPod(corev1.RestartPolicyNever, []string{"a"}, "i"),
			podState{SandboxReady: true, Init: []containerState{exited("i", 1)}, Containers: []containerState{creating("a")}}, corev1.PodFailed},
		{"failed init with OnFailure stays pending", statusPod(corev1.RestartPolicyOnFailure, []string{"a"}, "i"),
			podState{SandboxReady: true, Init: []containerState{backingOff("i", 1)}, Containers: []containerState{creating("a")}}, corev1.PodPending},
		{"one container running is running", statusPod(corev1.RestartPolicyAlways, []string{"a", "b"}),
			podState{SandboxReady: true, Containers: []containerState{running("a", true), backingOff("b", 2)}}, corev1.PodRunning},
		{"a container not started yet keeps the pod pending", statusPod(corev1.RestartPolicyAlways, []string{"a", "b"}),
			podState{SandboxReady: true, Containers: []containerState{running("a", true), creating("b")}}, corev1.PodPending},
		{"crash looping with Always is running", statusPod(corev1.RestartPolicyAlways, []string{"a"}),
			podState{SandboxReady: true, Containers: []containerState{backingOff("a", 1)}}, corev1.PodRunning},
		{"all exited 0 with Never succeeds", statusPod(corev1.RestartPolicyNever, []string{"a", "b"}),
			podState{SandboxReady: true, Containers: []containerState{exited("a", 0), exited("b", 0)}}, corev1.PodSucceeded},
		{"one exited non-zero with Never fails", statusPod(corev1.RestartPolicyNever, []string{"a", "b"}),
			podState{SandboxReady: true, Containers: []containerState{exited("a", 0), exited("b", 3)}}, corev1.PodFailed},
		{"OnFailure restarting a failed container is running", statusPod(corev1.RestartPolicyOnFailure, []string{"a", "b"}),
			podState{SandboxReady: true, Containers: []containerState{exited("a", 0), backingOff("b", 3)}}, corev1.PodRunning},
		{"OnFailure with all succeeded succeeds", statusPod(corev1.RestartPolicyOnFailure, []string{"a"}),
			podState{SandboxReady: true, Containers: []containerState{exited("a", 0)}}, corev1.PodSucceeded},
		{"completed pod waits for its running sidecar", func() *corev1.Pod {
			p := statusPod(corev1.RestartPolicyNever, []string{"a"}, "side")
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers[0].RestartPolicy = &always
			return p
		}(), podState{SandboxReady: true, Init: []containerState{running("side", true)}, Containers: []containerState{exited("a", 0)}}, corev1.PodRunning},
		{"completed pod with its sidecar stopped succeeds", func() *corev1.Pod {
			p := statusPod(corev1.RestartPolicyNever, []string{"a"}, "side")
			always := corev1.ContainerRestartPolicyAlways
			p.Spec.InitContainers[0].RestartPolicy = &always
			return p
		}(), podState{SandboxReady: true, Init: []containerState{exited("side", 143)}, Containers: []containerState{exited("a", 0)}}, corev1.PodSucceeded},
		{"terminal phase never changes", func() *corev1.Pod {
			p := statusPod(corev1.RestartPolicyAlways, []string{"a"})
			p.Status.Phase = corev1.PodFailed
			return p
		}(), podState{SandboxReady: true, Containers: []containerState{running("a", true)}}, corev1.PodFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, podPhase(tc.pod, tc.st)); diff != "" {
				t.Errorf("podPhase() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComputePodStatus(t *testing.T) {
	yes, no := true, false
	readyPod := func() *corev1.Pod {
		p := statusPod(corev1.RestartPolicyAlways, []string{"app"})
		p.Status.QOSClass = corev1.PodQOSBestEffort
		p.Status.Conditions = []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true, "", "", tEarlier),
			cond(corev1.PodInitialized, true, "", "", tEarlier),
			cond(corev1.PodReady, true, "", "", tEarlier),
			cond(corev1.ContainersReady, true, "", "", tEarlier),
			cond(corev1.PodScheduled, true, "", "", tEarlier),
			cond("example.com/Foreign", true, "", "", tEarlier),
		}
		return p
	}
	runningApp := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: tEarlier}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		st   podState
		want corev1.PodStatus
	}{{
		name: "new pod waiting for its sandbox",
		pod:  statusPod(corev1.RestartPolicyAlways, []string{"app"}),
		st:   podState{HostIP: "10.244.0.1", StartTime: &tNow, Containers: []containerState{creating("app")}},
		want: corev1.PodStatus{
			Phase: corev1.PodPending, HostIP: "10.244.0.1", HostIPs: []corev1.HostIP{{IP: "10.244.0.1"}}, StartTime: &tNow,
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers, false, "", "", tNow),
				cond(corev1.PodInitialized, true, "", "", tNow),
				cond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.ContainersReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.PodScheduled, true, "", "", tNow),
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img", State: waitingState("ContainerCreating", ""), Started: &no}},
		},
	}, {
		name: "steady ready pod keeps transition times, qosClass and foreign conditions",
		pod:  readyPod(),
		st: podState{SandboxReady: true, HostIP: "10.244.0.1", PodIP: "10.244.0.9", StartTime: &tEarlier,
			Containers: []containerState{running("app", true)}},
		want: corev1.PodStatus{
			Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
			HostIP: "10.244.0.1", HostIPs: []corev1.HostIP{{IP: "10.244.0.1"}},
			PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}, StartTime: &tEarlier,
			Conditions:        readyPod().Status.Conditions,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img", State: runningApp, Ready: true, Started: &yes}},
		},
	}, {
		name: "readiness lost moves only the readiness conditions",
		pod:  readyPod(),
		st: podState{SandboxReady: true, HostIP: "10.244.0.1", PodIP: "10.244.0.9", StartTime: &tEarlier,
			Containers: []containerState{running("app", false)}},
		want: corev1.PodStatus{
			Phase: corev1.PodRunning, QOSClass: corev1.PodQOSBestEffort,
			HostIP: "10.244.0.1", HostIPs: []corev1.HostIP{{IP: "10.244.0.1"}},
			PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}, StartTime: &tEarlier,
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers, true, "", "", tEarlier),
				cond(corev1.PodInitialized, true, "", "", tEarlier),
				cond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.ContainersReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.PodScheduled, true, "", "", tEarlier),
				cond("example.com/Foreign", true, "", "", tEarlier),
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img", State: runningApp, Started: &yes}},
		},
	}, {
		name: "init container running leaves the pod uninitialized",
		pod:  statusPod(corev1.RestartPolicyAlways, []string{"app"}, "setup"),
		st: podState{SandboxReady: true, PodIP: "10.244.0.9",
			Init: []containerState{running("setup", false)}, Containers: []containerState{creating("app")}},
		want: corev1.PodStatus{
			Phase: corev1.PodPending, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}},
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers, true, "", "", tNow),
				cond(corev1.PodInitialized, false, "ContainersNotInitialized", "containers with incomplete status: [setup]", tNow),
				cond(corev1.PodReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.ContainersReady, false, "ContainersNotReady", "containers with unready status: [app]", tNow),
				cond(corev1.PodScheduled, true, "", "", tNow),
			},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup", Image: "img", State: runningApp, Started: &yes}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "app", Image: "img", State: waitingState("ContainerCreating", ""), Started: &no}},
		},
	}, {
		name: "completed pod is not ready with reason PodCompleted",
		pod:  statusPod(corev1.RestartPolicyNever, []string{"job"}),
		st:   podState{SandboxReady: true, PodIP: "10.244.0.9", Containers: []containerState{exited("job", 0)}},
		want: corev1.PodStatus{
			Phase: corev1.PodSucceeded, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}},
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers, false, "", "", tNow),
				cond(corev1.PodInitialized, true, "", "", tNow),
				cond(corev1.PodReady, false, "PodCompleted", "", tNow),
				cond(corev1.ContainersReady, false, "PodCompleted", "", tNow),
				cond(corev1.PodScheduled, true, "", "", tNow),
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "job", Image: "img", State: exited("job", 0).State, Started: &no}},
		},
	}, {
		name: "readiness gate not yet true holds the pod unready",
		pod: func() *corev1.Pod {
			p := statusPod(corev1.RestartPolicyAlways, []string{"app"})
			p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/Gate"}}
			return p
		}(),
		st: podState{SandboxReady: true, PodIP: "10.244.0.9", Containers: []containerState{running("app", true)}},
		want: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}},
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers, true, "", "", tNow),
				cond(corev1.PodInitialized, true, "", "", tNow),
				cond(corev1.PodReady, false, "ReadinessGatesNotReady",
					`corresponding condition of pod readiness gate "example.com/Gate" does not exist or is not True`, tNow),
				cond(corev1.ContainersReady, true, "", "", tNow),
				cond(corev1.PodScheduled, true, "", "", tNow),
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "img", State: runningApp, Ready: true, Started: &yes}},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := computePodStatus(tc.pod, tc.st, tNow)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("computePodStatus() (-want +got):\n%s", diff)
			}
		})
	}
}
