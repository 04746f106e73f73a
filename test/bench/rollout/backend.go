package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hitless/hitless/test/harness"
)

var (
	// backendKind says how backend pods are made (see the -backend flag).
	backendKind string
	// via says where the load is sent (see the -via flag).
	via string
)

// createBackend makes a backend's Pod and Service (port 80) and waits for a
// ready endpoint.
func createBackend(ctx context.Context, c *harness.Clients, ns, name string) error {
	if backendKind != "conformance" {
		return c.CreateBackend(ctx, ns, name)
	}
	// As knative.dev/networking/test/conformance/ingress CreateRuntimeService
	// makes them: the kubelet's defaults for everything it leaves unset.
	port := 8000 + rand.IntN(100)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "app",
			Image: "ko.local/runtime",
			Env:   []corev1.EnvVar{{Name: "PORT", Value: strconv.Itoa(port)}},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: "/healthz", Port: intstr.FromInt(port),
			}}},
		}}},
	}
	if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt(port),
		}}},
	}
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s/%s: %w", ns, name, err)
	}
	return c.WaitBackendReady(ctx, ns, name)
}
