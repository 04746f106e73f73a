//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// TestNetContourDropIn checks what a cluster moving from net-contour relies
// on besides routing: the KIngress status names each Envoy Service with its
// ClusterIP; the KIngress's annotations reach its serving proxies, and a
// change of them is applied without a probe round and without a request
// lost; a host of an ExternalIP rule in the cluster's domain is served by
// the internal fleet (and only there), through a rollout to a fresh
// backend under load.
func TestNetContourDropIn(t *testing.T) {
	ctx, c, ns := setup(t, "dropin")
	for _, b := range []string{"blue", "green"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	ext := "dropin." + ns + ".example.com"
	local := "dropin." + ns + ".svc.cluster.local"
	to := func(backend string) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, harness.Rule{Host: ext, Visibility: v1alpha1.IngressVisibilityExternalIP,
				Splits: []harness.Split{{Backend: backend, Percent: 100}}})
			// One ExternalIP rule for both hosts, as older Serving wrote them.
			ing.Spec.Rules[0].Hosts = []string{ext, local}
		}
	}
	ing := harness.KIngress(ns, "dropin")
	to("blue")(ing)
	ing.Annotations["example.com/team"] = "payments"
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.WaitReady(ctx, ns, "dropin", 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	// The load balancers: each fleet's Envoy Service, by name and ClusterIP.
	for _, lb := range []struct {
		fleet string
		st    *v1alpha1.LoadBalancerStatus
	}{{external, got.Status.PublicLoadBalancer}, {internal, got.Status.PrivateLoadBalancer}} {
		svc, err := c.Kube.CoreV1().Services(lb.fleet).Get(ctx, "envoy", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := v1alpha1.LoadBalancerIngressStatus{DomainInternal: "envoy." + lb.fleet + ".svc.cluster.local", IP: svc.Spec.ClusterIP}
		if lb.st == nil || len(lb.st.Ingress) != 1 || lb.st.Ingress[0] != want {
			t.Errorf("load balancer of %s: got %+v, want [%+v]", lb.fleet, lb.st, want)
		} else {
			t.Logf("load balancer of %s: %s %s", lb.fleet, want.DomainInternal, want.IP)
		}
	}
	checkProxies := func(team string) {
		t.Helper()
		ps, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{resources.LabelRole: resources.RoleServing}.String()})
		if err != nil {
			t.Fatal(err)
		}
		classes := map[string]string{}
		for _, p := range ps.Items {
			classes[p.Spec.VirtualHost.Fqdn] = p.Spec.IngressClassName
			if p.Annotations["example.com/team"] != team {
				t.Errorf("serving proxy %s carries example.com/team=%q, want %q", p.Name, p.Annotations["example.com/team"], team)
			}
		}
		want := map[string]string{ext: external, local: internal,
			"dropin." + ns + ".svc": internal, "dropin." + ns: internal}
		for h, class := range want {
			if classes[h] != class {
				t.Errorf("host %s is served by class %q, want %q (serving proxies: %v)", h, classes[h], class, classes)
			}
		}
	}
	checkProxies("payments")

	// Not on the external fleet: its Envoy has no such virtual host.
	stray := &harness.Load{Targets: c.MustFleetTargets(ctx, t, external, local), RPS: 50}
	stop := stray.Start(ctx)
	time.Sleep(time.Second)
	stop()
	if s := stray.Summarize(); s.Requests == 0 || s.ByCode[404] != s.Requests {
		t.Errorf("the cluster-domain host through the external fleet: %s, want every answer 404", s)
	}

	var targets []harness.Target
	targets = append(targets, c.MustFleetTargets(ctx, t, external, ext)...)
	for _, h := range []string{local, "dropin." + ns + ".svc", "dropin." + ns} {
		targets = append(targets, c.MustFleetTargets(ctx, t, internal, h)...)
	}
	rps := envInt("DROPIN_RPS", 200)
	load, stopLoad := startLoadOn(ctx, rps, targets, "blue")
	time.Sleep(2 * time.Second)

	// An annotation change: one update per proxy, no probe round, Ready
	// throughout (the status is never rewritten).
	readySince := got.Status.GetCondition(v1alpha1.IngressConditionReady).LastTransitionTime
	if err := c.Update(ctx, ns, "dropin", func(ing *v1alpha1.Ingress) { ing.Annotations["example.com/team"] = "ledger" }); err != nil {
		t.Fatal(err)
	}
	if err := waitProxies(ctx, c, ns, func(p *contourv1.HTTPProxy) bool { return p.Annotations["example.com/team"] == "ledger" }); err != nil {
		t.Fatal(err)
	}
	checkProxies("ledger")
	after, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "dropin", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cond := after.Status.GetCondition(v1alpha1.IngressConditionReady); !after.IsReady() || cond.LastTransitionTime != readySince {
		t.Errorf("an annotation change moved the KIngress's Ready condition: %+v", cond)
	}

	// A rollout to a fresh backend, both fleets at once.
	load.Allow("blue", "green")
	start := time.Now()
	if err := c.Update(ctx, ns, "dropin", to("green")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "dropin", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout to a fresh backend Ready in %v", time.Since(start).Round(time.Millisecond))
	load.Allow("green")
	time.Sleep(2 * time.Second)
	stopLoad()
	checkProxies("ledger")
	s := load.Summarize()
	t.Logf("under load through %d Envoy pods and hosts: %s", len(targets), s)
	if s.Failed() != 0 || s.Requests < rps*3 {
		t.Errorf("%d of %d requests failed or came from a backend not allowed then: %v", s.Failed(), s.Requests, s.Failures)
	}
}

// waitProxies waits until every serving proxy of a namespace satisfies ok.
func waitProxies(ctx context.Context, c *harness.Clients, ns string, ok func(*contourv1.HTTPProxy) bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		ps, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{resources.LabelRole: resources.RoleServing}.String()})
		if err != nil {
			return err
		}
		all := len(ps.Items) > 0
		var names []string
		for i := range ps.Items {
			if !ok(&ps.Items[i]) {
				all = false
				names = append(names, ps.Items[i].Name)
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serving proxies %s not updated after 1m", strings.Join(names, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
