//go:build e2e

// Package integration checks the controller end to end on the local stack:
// real kube-apiserver, Contour and Envoy pods. It needs KUBECONFIG (from
// `make stack-env`) and a running controller; it fails, never skips, when a
// component is missing.
package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclientset "knative.dev/networking/pkg/client/clientset/versioned"

	contourclientset "github.com/hitless/hitless/pkg/client/clientset/versioned"
	"github.com/hitless/hitless/pkg/resources"
)

type clients struct {
	kube    kubernetes.Interface
	net     netclientset.Interface
	contour contourclientset.Interface
}

func newClients(t *testing.T) clients {
	t.Helper()
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		t.Fatal("KUBECONFIG is not set: run `eval $(make stack-env)` (or `make test`, which brings the stack up)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", path, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return clients{
		kube:    kubernetes.NewForConfigOrDie(cfg),
		net:     netclientset.NewForConfigOrDie(cfg),
		contour: contourclientset.NewForConfigOrDie(cfg),
	}
}

// backend creates a Pod of the networking test image `runtime` and a
// Service in front of it, and waits until the Service has a ready endpoint.
func backend(ctx context.Context, t *testing.T, c clients, ns, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:           "app",
			Image:          "ko.local/runtime",
			Env:            []corev1.EnvVar{{Name: "PORT", Value: "8080"}},
			Ports:          []corev1.ContainerPort{{ContainerPort: 8080}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(8080)}}, PeriodSeconds: 1},
		}}},
	}
	if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt(8080),
		}}},
	}
	if _, err := c.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(readyIPs(ctx, c, ns, name)) > 0, nil
	}); err != nil {
		t.Fatalf("service %s/%s never got a ready endpoint: %v", ns, name, err)
	}
}

// readyIPs lists the ready endpoint addresses of a Service.
func readyIPs(ctx context.Context, c clients, ns, svc string) []string {
	slices, err := c.kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				out = append(out, e.Addresses...)
			}
		}
	}
	return out
}

// get sends a request for host to one Envoy pod directly.
func get(ip, host, path string) (int, string, error) {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, net.JoinHostPort(ip, "8080"))
			},
		},
	}
	resp, err := client.Get("http://" + host + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func TestKIngressServedThroughEveryEnvoyPod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newClients(t)

	ns := fmt.Sprintf("it-%d", time.Now().UnixNano()%1_000_000)
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = c.kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})

	backend(ctx, t, c, ns, "hello")

	external := "hello." + ns + ".example.com"
	local := "hello." + ns + ".svc.cluster.local"
	split := []v1alpha1.IngressBackendSplit{{
		IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "hello", ServicePort: intstr.FromInt(80)},
		Percent:        100,
	}}
	ing := &v1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hello", Annotations: map[string]string{
			networking.IngressClassAnnotationKey: "contour.ingress.networking.knative.dev",
		}},
		Spec: v1alpha1.IngressSpec{Rules: []v1alpha1.IngressRule{{
			Hosts: []string{external}, Visibility: v1alpha1.IngressVisibilityExternalIP,
			HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{Splits: split}}},
		}, {
			Hosts: []string{local}, Visibility: v1alpha1.IngressVisibilityClusterLocal,
			HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{Splits: split}}},
		}}},
	}
	if _, err := c.net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create KIngress: %v", err)
	}

	start := time.Now()
	var last *v1alpha1.Ingress
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = got
		return got.IsReady(), nil
	}); err != nil {
		t.Fatalf("KIngress never Ready (is the controller running?): %v; last status: %+v", err, last.Status)
	}
	t.Logf("KIngress Ready %v after creation", time.Since(start).Round(time.Millisecond))

	// Ready must be true on every pod of both fleets, with the backend's answer.
	for _, fleet := range []struct{ ns, host string }{{"contour-external", external}, {"contour-internal", local}} {
		pods := readyIPs(ctx, c, fleet.ns, "envoy")
		if len(pods) == 0 {
			t.Fatalf("fleet %s has no ready Envoy pod", fleet.ns)
		}
		for _, ip := range pods {
			code, body, err := get(ip, fleet.host, "/")
			// The runtime image answers with the request it saw, Host included.
			if err != nil || code != http.StatusOK || !strings.Contains(body, fleet.host) {
				t.Errorf("GET %s via Envoy pod %s of %s = %d %q %v, want 200 from the runtime image", fleet.host, ip, fleet.ns, code, body, err)
			}
		}
		t.Logf("%s: 200 through each of %d Envoy pods", fleet.ns, len(pods))
	}

	// The external host must not be served by the internal fleet, and vice versa.
	for _, ip := range readyIPs(ctx, c, "contour-internal", "envoy") {
		if code, _, _ := get(ip, external, "/"); code == http.StatusOK {
			t.Errorf("the internal Envoy pod %s serves the external host %s", ip, external)
		}
	}

	// Deleting the KIngress removes every HTTPProxy it owned.
	if err := c.net.NetworkingV1alpha1().Ingresses(ns).Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete KIngress: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelIngress})
		if err != nil && !apierrs.IsNotFound(err) {
			return false, err
		}
		return len(list.Items) == 0, nil
	}); err != nil {
		t.Fatalf("HTTPProxies of the deleted KIngress are still there: %v", err)
	}
}
