package main

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/util/retry"
)

// nodeCapacity is what the node offers the scheduler.
func nodeCapacity(cfg config) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(cfg.cpu),
		corev1.ResourceMemory:           resource.MustParse(cfg.memory),
		corev1.ResourcePods:             resource.MustParse(strconv.Itoa(cfg.maxPods)),
		corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
	}
}

// buildNode is the Node object the agent registers: Ready, untainted, with
// the bridge address as InternalIP and the pod CIDR.
func buildNode(cfg config, version string) *corev1.Node {
	capacity := nodeCapacity(cfg)
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: cfg.nodeName,
			Labels: map[string]string{
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     runtime.GOARCH,
				"kubernetes.io/hostname": cfg.nodeName,
				"type":                   "hitless-nodeagent",
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: cfg.podCIDR, PodCIDRs: []string{cfg.podCIDR}},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "hitless node agent is ready"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
				cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", "pods attach to the CNI bridge"),
			},
			Addresses: []corev1.NodeAddress{
				// No Hostname address: the API server would prefer it for
				// logs and exec, and the node name does not resolve.
				{Type: corev1.NodeInternalIP, Address: cfg.nodeIP},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(cfg.kubeletPort)}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         "linux",
				Architecture:            runtime.GOARCH,
				KubeletVersion:          version,
				KubeProxyVersion:        version,
				ContainerRuntimeVersion: "hitless://processes",
			},
		},
	}
}

// nodeProvider keeps the node Ready: its Ping never fails while the agent
// runs.
type nodeProvider struct{}

func (nodeProvider) Ping(ctx context.Context) error                       { return ctx.Err() }
func (nodeProvider) NotifyNodeStatus(context.Context, func(*corev1.Node)) {}

// conditionTaints are the taints the API server's TaintNodesByCondition
// admission puts on a new node; the node lifecycle controller, which would
// remove them once the node is Ready, does not run in the local stack.
var conditionTaints = map[string]bool{
	"node.kubernetes.io/not-ready":   true,
	"node.kubernetes.io/unreachable": true,
}

// untaintNode removes the condition taints from the node now and whenever they
// come back, until ctx ends.
func untaintNode(ctx context.Context, nodes typedcorev1.NodeInterface, name string) {
	for {
		if err := removeConditionTaints(ctx, nodes, name); err != nil && ctx.Err() == nil {
			slog.Warn("could not remove condition taints", "node", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
}

func removeConditionTaints(ctx context.Context, nodes typedcorev1.NodeInterface, name string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		kept := make([]corev1.Taint, 0, len(n.Spec.Taints))
		for _, t := range n.Spec.Taints {
			if !conditionTaints[t.Key] {
				kept = append(kept, t)
			}
		}
		if len(kept) == len(n.Spec.Taints) {
			return nil
		}
		n.Spec.Taints = kept
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}
