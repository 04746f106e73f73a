//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// TestHTTPSOnlyEnvoyService: the external fleet behind an Envoy Service
// with port 443 alone, as behind a load balancer that takes HTTPS only
// (net-contour#712). A host with a certificate goes Ready, probed over
// HTTPS, and rolls to fresh backends under HTTPS load on every Envoy pod
// without dropping a request, its backends warmed through a warm proxy that
// terminates TLS; a host without one waits in NoProbePort, naming the host
// and the Service.
func TestHTTPSOnlyEnvoyService(t *testing.T) {
	ctx, c, ns := setup(t, "httpsonly")
	swaps := envInt("HTTPS_ONLY_SWAPS", 5)
	rps := envInt("ROLLOUT_RPS", 100)

	// A second Service over the external fleet's Envoy pods, with the
	// HTTPS port only; config-contour names it for ExternalIP.
	const svcName = "envoy-https-only"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: external, Name: svcName},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "envoy"},
			Ports:    []corev1.ServicePort{{Name: "https", Port: 443, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8443)}},
		},
	}
	if _, err := c.Kube.CoreV1().Services(external).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Kube.CoreV1().Services(external).Delete(context.Background(), svcName, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete Service %s/%s: %v", external, svcName, err)
		}
	})
	pods := c.EnvoyPods(ctx, external)
	deadline := time.Now().Add(time.Minute)
	for len(c.ReadyIPs(ctx, external, svcName)) != len(pods) {
		if time.Now().After(deadline) {
			t.Fatalf("Service %s/%s has %d ready endpoints, want the %d Envoy pods", external, svcName, len(c.ReadyIPs(ctx, external, svcName)), len(pods))
		}
		time.Sleep(200 * time.Millisecond)
	}
	changeConfigContour(ctx, t, c, func(data map[string]string) {
		data["visibility"] = fmt.Sprintf("ExternalIP:\n  class: %s\n  service: %s/%s\nClusterLocal:\n  class: %s\n  service: %s/envoy\n",
			external, external, svcName, internal, internal)
	})

	// A host without a certificate: nothing can probe it. Waiting for this
	// verdict also shows the controller reads the new configuration.
	if err := c.CreateBackend(ctx, ns, "b0"); err != nil {
		t.Fatal(err)
	}
	plainHost := "plain." + ns + ".example.com"
	plain := harness.KIngress(ns, "plain", harness.Rule{Host: plainHost, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "b0", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.WaitFor(ctx, ns, "plain", time.Minute, "LoadBalancerReady NoProbePort", func(ing *v1alpha1.Ingress) bool {
		_, reason, _ := condition(ing, v1alpha1.IngressConditionLoadBalancerReady)
		return reason == "NoProbePort"
	})
	if err != nil {
		t.Fatal(err)
	}
	_, _, msg := condition(got, v1alpha1.IngressConditionLoadBalancerReady)
	t.Logf("a host without a certificate: %s", msg)
	for _, want := range []string{plainHost, external + "/" + svcName} {
		if !strings.Contains(msg, want) {
			t.Errorf("NoProbePort message %q does not name %s", msg, want)
		}
	}
	if status, _, _ := condition(got, apis.ConditionReady); status == "True" {
		t.Error("a KIngress no Envoy pod was asked about is Ready")
	}

	// A host with a certificate: Ready, then rollouts under HTTPS load.
	host := "secure." + ns + ".example.com"
	if err := c.CreateTLSSecret(ctx, ns, "cert", host); err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("b%d", i) }
	secure := func(backend string) []harness.Rule {
		return []harness.Rule{{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: []harness.Split{{Backend: backend, Percent: 100}}}}
	}
	ing := harness.KIngress(ns, "secure", secure(name(0))...)
	ing.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{host}, SecretName: "cert", SecretNamespace: ns}}
	start := time.Now()
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "secure", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("a host with a certificate: Ready after %v", time.Since(start).Round(time.Millisecond))

	var targets []harness.Target
	for _, ip := range pods {
		targets = append(targets, harness.Target{Addr: ip + ":8443", Host: host, TLS: true})
	}
	load, stopLoad := startLoadOn(ctx, rps, targets, name(0))
	time.Sleep(time.Second)
	var ready []time.Duration
	warmTLS := 0
	cur := 0
	for i := 1; i <= swaps; i++ {
		if err := c.CreateBackend(ctx, ns, name(i)); err != nil {
			t.Fatal(err)
		}
		load.Allow(name(cur), name(i))
		start := time.Now()
		if err := c.Update(ctx, ns, "secure", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, secure(name(i))...) }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitReady(ctx, ns, "secure", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		ready = append(ready, time.Since(start))
		load.Allow(name(i))
		// The warm proxy stays for the release hold after Ready.
		proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleWarm})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies.Items {
			if p.Spec.VirtualHost != nil && p.Spec.VirtualHost.TLS != nil && p.Spec.VirtualHost.TLS.SecretName != "" {
				warmTLS++
				break
			}
		}
		if err := c.DeleteBackend(ctx, ns, name(cur)); err != nil {
			t.Fatal(err)
		}
		cur = i
	}
	time.Sleep(2 * time.Second)
	stopLoad()

	s := load.Summarize()
	sort.Slice(ready, func(i, j int) bool { return ready[i] < ready[j] })
	t.Logf("load over HTTPS: %s over %d Envoy pods; rollout Ready p50=%v max=%v over %d swaps; warm proxies terminating TLS seen after %d of them",
		s, len(targets), ready[len(ready)/2].Round(time.Millisecond), ready[len(ready)-1].Round(time.Millisecond), len(ready), warmTLS)
	for _, f := range s.Failures {
		t.Log(f)
	}
	if warmTLS == 0 {
		t.Error("no warm proxy terminating TLS was seen: the fresh backends were not warmed over HTTPS")
	}
	if s.Failed() != 0 {
		t.Errorf("%d of %d requests failed or came from a backend not allowed then", s.Failed(), s.Requests)
	}
	if s.Requests < rps*5 {
		t.Errorf("only %d requests were sent: the load did not run", s.Requests)
	}
}
