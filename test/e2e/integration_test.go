//go:build e2e

// Package e2e checks hitless end to end on the local stack: real
// kube-apiserver, Contour and Envoy pods, with the controller running. It
// needs KUBECONFIG (from `make stack-env`); it fails, never skips, when a
// component is missing.
package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

const (
	external = "contour-external"
	internal = "contour-internal"
)

// get sends one request for host straight to an Envoy pod.
func get(ip, host string) (int, string, error) {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, network, net.JoinHostPort(ip, "8080"))
			},
		},
	}
	resp, err := client.Get("http://" + host + "/")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func setup(t *testing.T, prefix string) (context.Context, *harness.Clients, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	t.Cleanup(cancel)
	c, ns := harness.TestNamespace(ctx, t, prefix)
	return ctx, c, ns
}

func TestKIngressServedThroughEveryEnvoyPod(t *testing.T) {
	ctx, c, ns := setup(t, "it")
	if err := c.CreateBackend(ctx, ns, "hello"); err != nil {
		t.Fatal(err)
	}
	ext := "hello." + ns + ".example.com"
	local := "hello." + ns + ".svc.cluster.local"
	split := []harness.Split{{Backend: "hello", Percent: 100}}
	ing := harness.KIngress(ns, "hello",
		harness.Rule{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: split},
		harness.Rule{Host: local, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: split})
	start := time.Now()
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create KIngress: %v", err)
	}
	if _, err := c.WaitReady(ctx, ns, "hello", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("KIngress Ready %v after creation", time.Since(start).Round(time.Millisecond))

	// Ready means served on every pod of both fleets, by the backend.
	for _, fleet := range []struct{ ns, host string }{{external, ext}, {internal, local}} {
		pods := c.EnvoyPods(ctx, fleet.ns)
		if len(pods) == 0 {
			t.Fatalf("fleet %s has no ready Envoy pod", fleet.ns)
		}
		for _, ip := range pods {
			code, body, err := get(ip, fleet.host)
			// The runtime image answers with the request it saw, Host included.
			if err != nil || code != http.StatusOK || !strings.Contains(body, fleet.host) {
				t.Errorf("GET %s via Envoy pod %s of %s = %d %q %v, want 200 from the runtime image", fleet.host, ip, fleet.ns, code, body, err)
			}
		}
		t.Logf("%s: 200 through each of %d Envoy pods", fleet.ns, len(pods))
	}
	// A host is served only by the fleet of its visibility.
	for _, ip := range c.EnvoyPods(ctx, internal) {
		if code, _, _ := get(ip, ext); code == http.StatusOK {
			t.Errorf("the internal Envoy pod %s serves the external host %s", ip, ext)
		}
	}

	// Deleting the KIngress removes every HTTPProxy it owned.
	if err := c.Net.NetworkingV1alpha1().Ingresses(ns).Delete(ctx, "hello", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete KIngress: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelIngress})
		return err == nil && len(list.Items) == 0, nil
	}); err != nil {
		t.Fatalf("HTTPProxies of the deleted KIngress are still there: %v", err)
	}
}
