package main

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containerState is the agent's record of one container (or init container).
type containerState struct {
	Name         string
	Image        string
	ImageID      string
	ContainerID  string
	State        corev1.ContainerState
	LastState    corev1.ContainerState
	Ready        bool
	Started      bool
	RestartCount int32
}

// podState is what the agent knows about a pod; the pod status is computed
// from it.
type podState struct {
	// SandboxReady is true once the network namespace, DNS files and volumes
	// exist.
	SandboxReady bool
	HostIP       string
	PodIP        string
	StartTime    *metav1.Time
	Init         []containerState
	Containers   []containerState
	// Reason and Message explain a pod that cannot start (sandbox failure).
	Reason  string
	Message string
}

// waitingState is a Waiting container state.
func waitingState(reason, message string) corev1.ContainerState {
	return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
}

// isSidecar reports whether an init container is a restartable sidecar.
func isSidecar(c *corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// sidecarStarted reports whether a sidecar has started once (it no longer
// holds up the containers after it).
func sidecarStarted(c containerState) bool {
	return c.Started || c.State.Terminated != nil || c.LastState.Terminated != nil
}

// exitedOK reports whether a state is a termination with exit code 0.
func exitedOK(s corev1.ContainerState) bool {
	return s.Terminated != nil && s.Terminated.ExitCode == 0
}

// hasRun reports whether a container ran at least once.
func hasRun(c containerState) bool {
	return c.State.Running != nil || c.State.Terminated != nil || c.LastState.Terminated != nil
}

// podPhase derives the phase from the container states and the restart
// policy. A pod whose containers are done is terminal only once its sidecars
// have stopped too, as with the kubelet.
func podPhase(pod *corev1.Pod, st podState) corev1.PodPhase {
	p := workloadPhase(pod, st)
	if p == corev1.PodSucceeded || p == corev1.PodFailed {
		for _, c := range st.Init {
			if c.State.Running != nil && pod.Status.Phase != p {
				return corev1.PodRunning
			}
		}
	}
	return p
}

// workloadPhase is the phase the containers' states call for, sidecars
// aside: terminal means nothing will run again but sidecars.
func workloadPhase(pod *corev1.Pod, st podState) corev1.PodPhase {
	if p := pod.Status.Phase; p == corev1.PodSucceeded || p == corev1.PodFailed {
		return p // terminal phases never change
	}
	never := pod.Spec.RestartPolicy == corev1.RestartPolicyNever
	for i, c := range st.Init {
		if i < len(pod.Spec.InitContainers) && isSidecar(&pod.Spec.InitContainers[i]) {
			if !sidecarStarted(c) {
				return corev1.PodPending
			}
			continue
		}
		if exitedOK(c.State) {
			continue
		}
		if never && c.State.Terminated != nil {
			return corev1.PodFailed
		}
		return corev1.PodPending
	}
	if !st.SandboxReady {
		return corev1.PodPending
	}
	running, stopped, succeeded := 0, 0, 0
	for _, c := range st.Containers {
		switch {
		case c.State.Running != nil:
			running++
		case c.State.Terminated != nil:
			stopped++
			if c.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case c.LastState.Terminated != nil:
			// Waiting to be restarted after having run.
			stopped++
			if c.LastState.Terminated.ExitCode == 0 {
				succeeded++
			}
		default:
			return corev1.PodPending // never started yet
		}
	}
	switch {
	case running > 0:
		return corev1.PodRunning
	case stopped == 0:
		return corev1.PodPending
	case pod.Spec.RestartPolicy == corev1.RestartPolicyAlways || pod.Spec.RestartPolicy == "":
		return corev1.PodRunning // restarting
	case succeeded == stopped:
		return corev1.PodSucceeded
	case never:
		return corev1.PodFailed
	default:
		return corev1.PodRunning // OnFailure: failed containers restart
	}
}

// containerStatuses turns records into API container statuses.
func containerStatuses(cs []containerState) []corev1.ContainerStatus {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, 0, len(cs))
	for _, c := range cs {
		started := c.Started
		out = append(out, corev1.ContainerStatus{
			Name:                 c.Name,
			State:                c.State,
			LastTerminationState: c.LastState,
			Ready:                c.Ready,
			RestartCount:         c.RestartCount,
			Image:                c.Image,
			ImageID:              c.ImageID,
			ContainerID:          c.ContainerID,
			Started:              &started,
		})
	}
	return out
}

// condition builds a pod condition, keeping the previous transition time when
// the status did not change.
func condition(prev []corev1.PodCondition, t corev1.PodConditionType, ok bool, reason, msg string, now metav1.Time) corev1.PodCondition {
	status := corev1.ConditionFalse
	if ok {
		status = corev1.ConditionTrue
		reason, msg = "", ""
	}
	c := corev1.PodCondition{Type: t, Status: status, Reason: reason, Message: msg, LastTransitionTime: now}
	for _, p := range prev {
		if p.Type == t && p.Status == status {
			c.LastTransitionTime = p.LastTransitionTime
		}
	}
	return c
}

// managedConditions are the condition types the agent owns.
var managedConditions = map[corev1.PodConditionType]bool{
	corev1.PodReadyToStartContainers: true,
	corev1.PodInitialized:            true,
	corev1.PodReady:                  true,
	corev1.ContainersReady:           true,
	corev1.PodScheduled:              true,
}

// computePodStatus renders the status of pod from the agent's podState. Fields
// the agent does not own (qosClass, foreign conditions) are kept from
// pod.Status; condition transition times move only when a condition changes.
func computePodStatus(pod *corev1.Pod, st podState, now metav1.Time) corev1.PodStatus {
	prev := pod.Status.Conditions
	s := *pod.Status.DeepCopy()
	s.Phase = podPhase(pod, st)
	s.Reason, s.Message = st.Reason, st.Message
	s.HostIP = st.HostIP
	s.HostIPs = nil
	if st.HostIP != "" {
		s.HostIPs = []corev1.HostIP{{IP: st.HostIP}}
	}
	s.PodIP = st.PodIP
	s.PodIPs = nil
	if st.PodIP != "" {
		s.PodIPs = []corev1.PodIP{{IP: st.PodIP}}
	}
	if st.StartTime != nil {
		s.StartTime = st.StartTime
	}
	s.InitContainerStatuses = containerStatuses(st.Init)
	s.ContainerStatuses = containerStatuses(st.Containers)
	terminal := s.Phase == corev1.PodSucceeded || s.Phase == corev1.PodFailed
	if terminal {
		for i := range s.ContainerStatuses {
			s.ContainerStatuses[i].Ready = false
		}
	}

	var notInit, notReady []string
	for i, c := range st.Init {
		sidecar := i < len(pod.Spec.InitContainers) && isSidecar(&pod.Spec.InitContainers[i])
		if (sidecar && !sidecarStarted(c)) || (!sidecar && !exitedOK(c.State)) {
			notInit = append(notInit, c.Name)
		}
		if sidecar && !c.Ready {
			notReady = append(notReady, c.Name)
		}
	}
	for _, c := range s.ContainerStatuses {
		if !c.Ready {
			notReady = append(notReady, c.Name)
		}
	}
	initialized := len(notInit) == 0 || terminal && s.Phase == corev1.PodSucceeded
	containersReady := len(notReady) == 0 && !terminal
	readyReason, readyMsg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(notReady, " "))
	if terminal {
		readyReason, readyMsg = "PodCompleted", ""
	}
	podReady, gateReason, gateMsg := containersReady, "", ""
	for _, g := range pod.Spec.ReadinessGates {
		if !conditionTrue(prev, g.ConditionType) {
			podReady = false
			gateReason = "ReadinessGatesNotReady"
			gateMsg = fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist or is not True", g.ConditionType)
		}
	}
	podReadyReason, podReadyMsg := readyReason, readyMsg
	if containersReady && !podReady {
		podReadyReason, podReadyMsg = gateReason, gateMsg
	}

	conds := []corev1.PodCondition{
		condition(prev, corev1.PodReadyToStartContainers, st.SandboxReady && !terminal, "", "", now),
		condition(prev, corev1.PodInitialized, initialized, "ContainersNotInitialized",
			fmt.Sprintf("containers with incomplete status: [%s]", strings.Join(notInit, " ")), now),
		condition(prev, corev1.PodReady, podReady, podReadyReason, podReadyMsg, now),
		condition(prev, corev1.ContainersReady, containersReady, readyReason, readyMsg, now),
		condition(prev, corev1.PodScheduled, true, "", "", now),
	}
	for _, c := range prev {
		if !managedConditions[c.Type] {
			conds = append(conds, c)
		}
	}
	s.Conditions = conds
	return s
}

// conditionTrue reports whether conds has condition t with status True.
func conditionTrue(conds []corev1.PodCondition, t corev1.PodConditionType) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
