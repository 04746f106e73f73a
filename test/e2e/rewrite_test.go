//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/test/types"

	"github.com/hitless/hitless/test/harness"
)

// TestRewriteHostReachesAPrivateKIngress is the behaviour of Knative's
// host-rewrite conformance test (a vanity host whose KIngress rewrites Host
// to a cluster-local host and sends to the internal load balancer, the way
// DomainMapping does) without the ExternalName Service that test needs and
// that Contour refuses unless told otherwise: the way to the internal Envoy
// pods is a Service of the test's own namespace with explicit endpoints.
//
// It then moves the vanity KIngress to a second such Service: a new backend
// that only answers a probe sent with the rewritten Host, so Ready proves the
// warm round went through that Host too. Requests sent to every external
// Envoy pod throughout must all reach the private backend.
func TestRewriteHostReachesAPrivateKIngress(t *testing.T) {
	ctx, c, ns := setup(t, "rewrite")
	if err := c.CreateBackend(ctx, ns, "hello"); err != nil {
		t.Fatal(err)
	}
	private := "private." + ns + ".svc.cluster.local"
	ing := harness.KIngress(ns, "private", harness.Rule{Host: private, Visibility: v1alpha1.IngressVisibilityClusterLocal,
		Splits: []harness.Split{{Backend: "hello", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "private", 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	internalPods := c.EnvoyPods(ctx, internal)
	if len(internalPods) == 0 {
		t.Fatalf("fleet %s has no ready Envoy pod", internal)
	}
	for _, name := range []string{"lb-a", "lb-b"} {
		if err := createServiceTo(ctx, c, ns, name, internalPods); err != nil {
			t.Fatal(err)
		}
	}

	vanity := "vanity." + ns + ".example.com"
	toLB := func(name string) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, harness.Rule{Host: vanity, Visibility: v1alpha1.IngressVisibilityExternalIP,
				Splits: []harness.Split{{Backend: name, Percent: 100}}})
			ing.Spec.Rules[0].HTTP.Paths[0].RewriteHost = private
		}
	}
	ing = harness.KIngress(ns, "vanity")
	toLB("lb-a")(ing)
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "vanity", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	externalPods := c.EnvoyPods(ctx, external)
	if len(externalPods) == 0 {
		t.Fatalf("fleet %s has no ready Envoy pod", external)
	}
	for _, ip := range externalPods {
		if err := viaRewrite(ip, vanity, private); err != nil {
			t.Errorf("Envoy pod %s: %v", ip, err)
		}
	}

	// Move to a fresh way in, under requests to every external Envoy pod.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, failed := 0, 0
	for _, ip := range externalPods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := viaRewrite(ip, vanity, private)
				mu.Lock()
				sent++
				if err != nil {
					failed++
					if failed <= 5 {
						t.Errorf("during the move, Envoy pod %s: %v", ip, err)
					}
				}
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	start := time.Now()
	if err := c.Update(ctx, ns, "vanity", toLB("lb-b")); err != nil {
		t.Fatal(err)
	}
	// Ready is at the new generation (IsReady compares observedGeneration).
	if _, err := c.WaitReady(ctx, ns, "vanity", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("moved to a new backend behind the rewritten Host: Ready after %v", time.Since(start).Round(time.Millisecond))
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("%d requests during the move, %d failed", sent, failed)
	if sent == 0 {
		t.Error("no request was sent during the move")
	}
}

// createServiceTo makes a Service without selector whose endpoints are the
// given Envoy pods' HTTP port: a way to another ingress that needs no
// ExternalName Service.
func createServiceTo(ctx context.Context, c *harness.Clients, ns, name string, ips []string) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt(8080),
		}}},
	}
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create service %s/%s: %w", ns, name, err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name,
			discoveryv1.LabelManagedBy:   "hitless-e2e",
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for _, ip := range ips {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		})
	}
	if _, err := c.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create EndpointSlice %s/%s: %w", ns, name, err)
	}
	return nil
}

// viaRewrite asks one Envoy pod for host and checks that the runtime backend
// behind the private KIngress answered, having seen the rewritten Host.
func viaRewrite(ip, host, rewritten string) error {
	code, body, err := get(ip, host)
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("GET %s = %d %q, want 200", host, code, body)
	}
	var ri types.RuntimeInfo
	if err := json.Unmarshal([]byte(body), &ri); err != nil || ri.Request == nil {
		return fmt.Errorf("GET %s: not an answer of the runtime image: %q", host, body)
	}
	if ri.Request.Host != rewritten {
		return fmt.Errorf("GET %s reached the backend with Host %q, want %q", host, ri.Request.Host, rewritten)
	}
	return nil
}
