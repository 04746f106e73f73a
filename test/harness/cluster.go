// Package harness drives the local stack for the end-to-end tests and the
// benchmarks: clients from KUBECONFIG, backends of the networking test
// image, KIngresses, the Envoy pods of each fleet, and a load generator
// that sends requests to every Envoy pod and classifies every answer.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	netclientset "knative.dev/networking/pkg/client/clientset/versioned"

	contourclientset "github.com/hitless/hitless/pkg/client/clientset/versioned"
)

// Class is the KIngress class hitless serves.
const Class = "contour.ingress.networking.knative.dev"

// Clients talk to the local stack.
type Clients struct {
	Kube    kubernetes.Interface
	Net     netclientset.Interface
	Contour contourclientset.Interface
	// Config is what they were built from, for other clients.
	Config *rest.Config
}

// NewClients builds clients from $KUBECONFIG.
func NewClients() (*Clients, error) {
	path := os.Getenv("KUBECONFIG")
	if path == "" {
		return nil, errors.New("KUBECONFIG is not set: run `eval \"$(make -s stack-env)\"` with the stack up (make stack-up)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	return &Clients{
		Kube:    kubernetes.NewForConfigOrDie(cfg),
		Net:     netclientset.NewForConfigOrDie(cfg),
		Contour: contourclientset.NewForConfigOrDie(cfg),
		Config:  cfg,
	}, nil
}

// TestNamespace gives a test clients and a namespace of its own, deleted
// when the test ends.
func TestNamespace(ctx context.Context, t testing.TB, prefix string) (*Clients, string) {
	t.Helper()
	c, err := NewClients()
	if err != nil {
		t.Fatal(err)
	}
	ns, cleanup, err := c.CreateNamespace(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return c, ns
}

// CreateNamespace makes a namespace; the returned func deletes it.
func (c *Clients) CreateNamespace(ctx context.Context, prefix string) (string, func(), error) {
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return "", nil, fmt.Errorf("create namespace %s: %w", ns, err)
	}
	// Pods are refused until the controller manager has made the
	// namespace's default ServiceAccount, which lags after the API server
	// restarted (TestFaultAPIServerDownMidRollout runs before others).
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		return "", nil, fmt.Errorf("namespace %s has no default ServiceAccount after a minute: %w", ns, err)
	}
	return ns, func() { _ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }, nil
}

// CreateBackend starts a Pod of the networking test image `runtime`
// (it answers with the request it saw) behind a Service of the same name,
// and waits until the Service has a ready endpoint.
func (c *Clients) CreateBackend(ctx context.Context, ns, name string) error {
	if err := c.CreateBackendPod(ctx, ns, name); err != nil {
		return err
	}
	if err := c.CreateBackendService(ctx, ns, name); err != nil {
		return err
	}
	return c.WaitBackendReady(ctx, ns, name)
}

// CreateBackendPod starts the Pod of a backend (see CreateBackend) without
// waiting for it.
func (c *Clients) CreateBackendPod(ctx context.Context, ns, name string) error {
	grace := int64(5)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: backendLabels(name)},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "ko.local/runtime",
				Env:   []corev1.EnvVar{{Name: "PORT", Value: "8080"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt(8080)}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// CreateBackendService creates the Service of a backend (port 80 to the
// Pod's 8080). Alone, it is a backend without ready endpoints.
func (c *Clients) CreateBackendService(ctx context.Context, ns, name string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: backendLabels(name), Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt(8080),
		}}},
	}
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s/%s: %w", ns, name, err)
	}
	return nil
}

// WaitBackendReady waits until the Service of a backend has a ready endpoint.
func (c *Clients) WaitBackendReady(ctx context.Context, ns, name string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return len(c.ReadyIPs(ctx, ns, name)) > 0, nil
	})
}

func backendLabels(name string) map[string]string { return map[string]string{"app": name} }

// DeleteBackend deletes the Pod and Service of a backend.
func (c *Clients) DeleteBackend(ctx context.Context, ns, name string) error {
	if err := c.Kube.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrs.IsNotFound(err) {
		return err
	}
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrs.IsNotFound(err) {
		return err
	}
	return nil
}

// ReadyIPs lists the ready endpoint addresses of a Service.
func (c *Clients) ReadyIPs(ctx context.Context, ns, svc string) []string {
	slices, err := c.Kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
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

// EnvoyPods lists the ready Envoy pods of a fleet (its namespace).
func (c *Clients) EnvoyPods(ctx context.Context, fleet string) []string {
	return c.ReadyIPs(ctx, fleet, "envoy")
}

// Split is one backend of a KIngress path; its name is set as the
// X-Backend request header after the split, so every answer says who
// served it.
type Split struct {
	Backend string
	Percent int
}

// Rule is one host of a KIngress and where it sends traffic.
type Rule struct {
	Host       string
	Visibility v1alpha1.IngressVisibility
	Splits     []Split
	// Headers are set before the split (appendHeaders of the path).
	Headers map[string]string
}

// KIngress builds a KIngress of hitless's class.
func KIngress(ns, name string, rules ...Rule) *v1alpha1.Ingress {
	ing := &v1alpha1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{
			networking.IngressClassAnnotationKey: Class,
		}},
	}
	SetRules(ing, rules...)
	return ing
}

// SetRules replaces the rules of a KIngress.
func SetRules(ing *v1alpha1.Ingress, rules ...Rule) {
	ing.Spec.Rules = nil
	for _, r := range rules {
		path := v1alpha1.HTTPIngressPath{AppendHeaders: r.Headers}
		for _, s := range r.Splits {
			path.Splits = append(path.Splits, v1alpha1.IngressBackendSplit{
				IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: ing.Namespace, ServiceName: s.Backend, ServicePort: intstr.FromInt(80)},
				Percent:        s.Percent,
				AppendHeaders:  map[string]string{"X-Backend": s.Backend},
			})
		}
		ing.Spec.Rules = append(ing.Spec.Rules, v1alpha1.IngressRule{
			Hosts:      []string{r.Host},
			Visibility: r.Visibility,
			HTTP:       &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{path}},
		})
	}
}

// WaitReady waits until the KIngress is Ready at its current generation and
// returns it; on timeout the error carries its last conditions.
func (c *Clients) WaitReady(ctx context.Context, ns, name string, timeout time.Duration) (*v1alpha1.Ingress, error) {
	var last *v1alpha1.Ingress
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = got
		return got.IsReady(), nil
	})
	if err != nil && last != nil {
		return last, fmt.Errorf("KIngress %s/%s not Ready (is the controller running?): %w; conditions: %+v", ns, name, err, last.Status.Conditions)
	}
	return last, err
}

// WaitFor waits until done holds for the KIngress and returns it; on
// timeout the error carries its last conditions. Errors reading it (an API
// server that is away) are retried until the timeout.
func (c *Clients) WaitFor(ctx context.Context, ns, name string, timeout time.Duration, what string, done func(*v1alpha1.Ingress) bool) (*v1alpha1.Ingress, error) {
	var last *v1alpha1.Ingress
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		return done(got), nil
	})
	if err != nil && last != nil {
		return last, fmt.Errorf("KIngress %s/%s: %s: %w; conditions: %+v", ns, name, what, err, last.Status.Conditions)
	}
	return last, err
}

// Update applies a change to a KIngress, retrying on conflicts.
func (c *Clients) Update(ctx context.Context, ns, name string, change func(*v1alpha1.Ingress)) error {
	for {
		ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ing)
		_, err = c.Net.NetworkingV1alpha1().Ingresses(ns).Update(ctx, ing, metav1.UpdateOptions{})
		if !apierrs.IsConflict(err) {
			return err
		}
	}
}
