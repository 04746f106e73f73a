//go:build e2e

package e2e

import (
	"context"
	"crypto/sha1" //nolint:gosec // net-contour's label, not security
	"fmt"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/ingress"
	"knative.dev/pkg/kmeta"
	"knative.dev/pkg/network"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// netContourClasses are the Contour classes of net-contour's default
// config-contour, the same as hitless's.
var netContourClasses = map[v1alpha1.IngressVisibility]string{
	v1alpha1.IngressVisibilityExternalIP:   external,
	v1alpha1.IngressVisibilityClusterLocal: internal,
}

// netContourProxies returns the HTTPProxies upstream net-contour keeps for a
// KIngress at rest, as its resources.MakeHTTPProxies writes them (read from
// knative-extensions/net-contour; its controller cannot be built here, the
// module proxy refuses every version of knative.dev/net-contour): one proxy
// per expanded host, named <kingress>-<class>-<host>, the class in the
// projectcontour.io/ingress.class annotation and label, its parent,
// generation and host-hash labels, a controller reference to the KIngress,
// the probe route of ingress.InsertProbe, two retries, websockets, and
// appendHeaders as request header policies before and after the split.
func netContourProxies(ing *v1alpha1.Ingress) []*contourv1.HTTPProxy {
	ing = ing.DeepCopy()
	ingress.InsertProbe(ing)
	var out []*contourv1.HTTPProxy
	for _, rule := range ing.Spec.Rules {
		class := netContourClasses[rule.Visibility]
		var routes []contourv1.Route
		for _, path := range rule.HTTP.Paths {
			pre := &contourv1.HeadersPolicy{}
			for k, v := range path.AppendHeaders {
				pre.Set = append(pre.Set, contourv1.HeaderValue{Name: k, Value: v})
			}
			sort.Slice(pre.Set, func(i, j int) bool { return pre.Set[i].Name < pre.Set[j].Name })
			var svcs []contourv1.Service
			for _, split := range path.Splits {
				svc := contourv1.Service{Name: split.ServiceName, Port: split.ServicePort.IntValue(), Weight: int64(split.Percent)}
				if len(split.AppendHeaders) > 0 {
					svc.RequestHeadersPolicy = &contourv1.HeadersPolicy{}
					for k, v := range split.AppendHeaders {
						svc.RequestHeadersPolicy.Set = append(svc.RequestHeadersPolicy.Set, contourv1.HeaderValue{Name: k, Value: v})
					}
				}
				svcs = append(svcs, svc)
			}
			var conds []contourv1.MatchCondition
			if path.Path != "" {
				conds = append(conds, contourv1.MatchCondition{Prefix: path.Path})
			}
			for h, m := range path.Headers {
				conds = append(conds, contourv1.MatchCondition{Header: &contourv1.HeaderMatchCondition{Name: h, Exact: m.Exact}})
			}
			routes = append(routes, contourv1.Route{
				Conditions:    conds,
				TimeoutPolicy: &contourv1.TimeoutPolicy{Response: "infinity", Idle: "infinity"},
				RetryPolicy: &contourv1.RetryPolicy{NumRetries: 2, RetryOn: []contourv1.RetryOn{
					"cancelled", "connect-failure", "refused-stream", "resource-exhausted", "retriable-status-codes", "reset"}},
				Services:             svcs,
				EnableWebsockets:     true,
				RequestHeadersPolicy: pre,
				PermitInsecure:       rule.Visibility == v1alpha1.IngressVisibilityClusterLocal,
			})
		}
		for _, original := range rule.Hosts {
			for _, host := range sets.List(ingress.ExpandedHosts(sets.New(original))) {
				c := class
				if strings.HasSuffix(original, network.GetClusterDomainName()) {
					c = netContourClasses[v1alpha1.IngressVisibilityClusterLocal]
				}
				out = append(out, &contourv1.HTTPProxy{
					ObjectMeta: metav1.ObjectMeta{
						Namespace: ing.Namespace,
						Name:      kmeta.ChildName(ing.Name+"-"+c+"-", host),
						Labels: map[string]string{
							"contour.networking.knative.dev/generation": fmt.Sprint(ing.Generation),
							resources.NetContourParentLabel:             ing.Name,
							resources.ContourClassAnnotation:            c,
							"contour.networking.knative.dev/domainHash": fmt.Sprintf("%x", sha1.Sum([]byte(host))),
						},
						Annotations:     map[string]string{resources.ContourClassAnnotation: c},
						OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
					},
					Spec: contourv1.HTTPProxySpec{VirtualHost: &contourv1.VirtualHost{Fqdn: host}, Routes: routes},
				})
			}
		}
	}
	return out
}

// netContourEndpointProbe is the child KIngress net-contour keeps while a
// rollout of ing is in flight: one reserved host per backend, the parent's
// labels and annotations (its class too) plus the endpointsProbe mark.
func netContourEndpointProbe(ing *v1alpha1.Ingress) *v1alpha1.Ingress {
	child := &v1alpha1.Ingress{ObjectMeta: metav1.ObjectMeta{
		Namespace:       ing.Namespace,
		Name:            ing.Name + "--ep",
		Labels:          ing.Labels,
		Annotations:     kmeta.UnionMaps(ing.Annotations, map[string]string{resources.NetContourEndpointsProbe: "true"}),
		OwnerReferences: []metav1.OwnerReference{*kmeta.NewControllerRef(ing)},
	}}
	for _, rule := range ing.Spec.Rules {
		for _, split := range rule.HTTP.Paths[0].Splits {
			child.Spec.Rules = append(child.Spec.Rules, v1alpha1.IngressRule{
				Hosts:      []string{fmt.Sprintf("%s.gen-%d.%s.%s.net-contour.invalid", split.ServiceName, ing.Generation, ing.Name, ing.Namespace)},
				Visibility: rule.Visibility,
				HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{Splits: []v1alpha1.IngressBackendSplit{{
					IngressBackend: split.IngressBackend, Percent: 100}}}}},
			})
		}
	}
	return child
}

// serveAsNetContour creates a KIngress with hitless stopped and leaves the
// cluster as net-contour would: its proxies valid in Contour, served by every
// Envoy pod, and the KIngress marked Ready.
func serveAsNetContour(ctx context.Context, t *testing.T, c *harness.Clients, ing *v1alpha1.Ingress) *v1alpha1.Ingress {
	t.Helper()
	got, err := c.Net.NetworkingV1alpha1().Ingresses(ing.Namespace).Create(ctx, ing, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := netContourProxies(got)
	for _, p := range ps {
		if _, err := c.Contour.ProjectcontourV1().HTTPProxies(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range ps {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := c.Contour.ProjectcontourV1().HTTPProxies(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			return err == nil && got.Status.CurrentStatus == "valid", nil
		}); err != nil {
			t.Fatalf("net-contour's proxy %s never valid: %v", p.Name, err)
		}
	}
	got.Status.InitializeConditions()
	got.Status.MarkNetworkConfigured()
	got.Status.MarkLoadBalancerReady(
		[]v1alpha1.LoadBalancerIngressStatus{{DomainInternal: network.GetServiceHostname("envoy", external)}},
		[]v1alpha1.LoadBalancerIngressStatus{{DomainInternal: network.GetServiceHostname("envoy", internal)}})
	got.Status.ObservedGeneration = got.Generation
	got, err = c.Net.NetworkingV1alpha1().Ingresses(got.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// servedEverywhere waits until each target answers 200 for its host.
func servedEverywhere(ctx context.Context, t *testing.T, targets []harness.Target) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, tg := range targets {
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tg.Addr+"/", nil)
			req.Host = tg.Host
			resp, err := client.Do(req)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			t.Fatalf("%s never served by Envoy %s: %v", tg.Host, tg.Addr, err)
		}
	}
}

// takenOver waits until hitless serves the KIngress alone: Ready, and every
// proxy it controls carries hitless's role, the serving ones valid.
func takenOver(ctx context.Context, c *harness.Clients, ns, name string) error {
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		serving := 0
		for _, p := range list.Items {
			if !metav1.IsControlledBy(&p, ing) {
				continue
			}
			// hitless's serving proxies carry net-contour's labels too
			// (the way back); a proxy without hitless's role is one of
			// net-contour's not taken over yet.
			if p.Labels[resources.LabelRole] == "" {
				last = "net-contour's proxy " + p.Name + " not taken over"
				return false, nil
			}
			if p.Labels[resources.LabelRole] == resources.RoleServing {
				serving++
				if p.Status.CurrentStatus != "valid" {
					last = fmt.Sprintf("proxy %s is %s: %s", p.Name, p.Status.CurrentStatus, p.Status.Description)
					return false, nil
				}
			}
		}
		last = fmt.Sprintf("%d serving proxies, ready=%v", serving, ing.IsReady())
		return serving > 0 && ing.IsReady() && ing.Status.ObservedGeneration == ing.Generation, nil
	}); err != nil {
		return fmt.Errorf("%s/%s not taken over by hitless: %w (%s)", ns, name, err, last)
	}
	return nil
}

// TestMigrateFromNetContour moves two KIngresses that net-contour serves to
// hitless under load to every Envoy pod of both fleets: a Knative Service's
// shape (an external and a cluster-local host) and a 50/50 split caught
// mid-rollout (net-contour's endpoint probe child still there). hitless is
// started with the same class as net-contour's stopped controller would
// have been. No request may fail; afterwards nothing of net-contour's is
// left, and hitless rolls both on as its own.
func TestMigrateFromNetContour(t *testing.T) {
	ctx, c, ns := setup(t, "mig")
	controller(t, "stop")
	t.Cleanup(func() { _ = exec.Command("../../hack/controller.sh", "start").Run() })
	for _, b := range []string{"a", "b", "c"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}

	ext, local := "ksvc."+ns+".example.com", "ksvc."+ns+".svc.cluster.local"
	sext, slocal := "split."+ns+".example.com", "split."+ns+".svc.cluster.local"
	splitRules := func(splits ...harness.Split) []harness.Rule {
		return []harness.Rule{
			{Host: sext, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: splits},
			{Host: slocal, Visibility: v1alpha1.IngressVisibilityClusterLocal, Splits: splits},
		}
	}
	serveAsNetContour(ctx, t, c, harness.KIngress(ns, "ksvc", twoHosts(ext, local, "a")...))
	split := serveAsNetContour(ctx, t, c, harness.KIngress(ns, "split", splitRules(
		harness.Split{Backend: "a", Percent: 50}, harness.Split{Backend: "b", Percent: 50})...))
	child, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, netContourEndpointProbe(split), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	childProxies := netContourProxies(child)
	for _, p := range childProxies {
		if _, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	var targets []harness.Target
	for fleet, hosts := range map[string][]string{external: {ext, sext}, internal: {local, slocal}} {
		for _, h := range hosts {
			targets = append(targets, c.MustFleetTargets(ctx, t, fleet, h)...)
		}
	}
	servedEverywhere(ctx, t, targets)
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 100), targets, "a", "b")
	time.Sleep(2 * time.Second)

	start := time.Now()
	controller(t, "start")
	for _, name := range []string{"ksvc", "split"} {
		if err := takenOver(ctx, c, ns, name); err != nil {
			stopLoad()
			reportFault(t, "migrate-from-net-contour", load.Summarize(), time.Since(start))
			t.Fatal(err)
		}
	}
	converge := time.Since(start)
	t.Logf("taken over by hitless %v after its start", converge.Round(time.Millisecond))
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, child.Name, metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("net-contour's endpoint probe KIngress %s left behind: %v", child.Name, err)
	}
	time.Sleep(2 * time.Second)

	// hitless now rolls both as its own: a fresh backend, a shift.
	load.Allow("a", "b", "c")
	if err := c.Update(ctx, ns, "ksvc", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, "c")...) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, "split", func(ing *v1alpha1.Ingress) {
		harness.SetRules(ing, splitRules(harness.Split{Backend: "b", Percent: 100})...)
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ksvc", "split"} {
		if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// As Knative does once the route is Ready: the old revision goes.
	load.Allow("b", "c")
	if err := c.DeleteBackend(ctx, ns, "a"); err != nil {
		t.Fatal(err)
	}
	waitWarmReleased(ctx, t, c, ns)
	time.Sleep(2 * time.Second)
	stopLoad()

	list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if _, ok := p.Labels[resources.LabelRole]; !ok {
			t.Errorf("HTTPProxy %s is not hitless's after the migration (labels %v)", p.Name, p.Labels)
		}
	}
	t.Logf("%d proxies in %s, all hitless's; load over %d targets", len(list.Items), ns, len(load.Targets))
	reportFault(t, "migrate-from-net-contour", load.Summarize(), converge)
}
