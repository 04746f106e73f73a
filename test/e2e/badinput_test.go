//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/test/harness"
)

// TestFaultBadInput feeds the controller, one case at a time, the input a
// user or an operator gets wrong, while a KIngress with an external and a
// cluster-local host is served under load through every Envoy pod. Each
// case must end in a condition a human can act on (its reason, and a
// message naming the object at fault), or be served when the input is odd
// but valid (duplicate hosts, extreme names); none may cost the served
// KIngress a request.
func TestFaultBadInput(t *testing.T) {
	ctx, c, ns := setup(t, "bad")
	ext, local := servedOnTwoHosts(ctx, t, c, ns, "good", "good")
	load, stopLoad := startLoad(ctx, t, c, envInt("FAULT_RPS", 100), ext, local, "good")
	begin := time.Now()
	var slowest time.Duration

	// one runs a case: its own load line counts the requests sent meanwhile.
	one := func(name string, f func(t *testing.T) time.Duration) {
		before := load.Summarize()
		t.Run(name, func(t *testing.T) {
			took := f(t)
			slowest = max(slowest, took)
			after := load.Summarize()
			t.Logf("fault: name=bad-input/%s requests=%d failed=%d converge_s=%.1f",
				name, after.Requests-before.Requests, after.Failed()-before.Failed(), took.Seconds())
		})
	}
	// create makes a KIngress of hitless's class that the case deletes after.
	create := func(t *testing.T, ing *v1alpha1.Ingress) time.Time {
		t.Helper()
		start := time.Now()
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create KIngress %s: %v", ing.Name, err)
		}
		t.Cleanup(func() {
			_ = c.Net.NetworkingV1alpha1().Ingresses(ns).Delete(context.Background(), ing.Name, metav1.DeleteOptions{})
		})
		return start
	}
	// refused waits for a condition that is not True with the reason, whose
	// message names every one of names.
	refused := func(t *testing.T, ing *v1alpha1.Ingress, reason string, names ...string) time.Duration {
		t.Helper()
		start := create(t, ing)
		got, err := c.WaitFor(ctx, ns, ing.Name, time.Minute, "want reason "+reason, func(ing *v1alpha1.Ingress) bool {
			if ing.Status.ObservedGeneration != ing.Generation || ing.IsReady() {
				return false
			}
			for _, cond := range ing.Status.Conditions {
				if cond.Status != corev1.ConditionTrue && cond.Reason == reason && containsAll(cond.Message, names) {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		for _, cond := range got.Status.Conditions {
			if cond.Reason == reason {
				t.Logf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
				break
			}
		}
		return took
	}
	// served waits for Ready and checks that every Envoy pod of the
	// external fleet serves host from the good backend.
	served := func(t *testing.T, ing *v1alpha1.Ingress, host string) time.Duration {
		t.Helper()
		start := create(t, ing)
		if _, err := c.WaitReady(ctx, ns, ing.Name, time.Minute); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		for _, ip := range c.EnvoyPods(ctx, external) {
			if b, _, err := servedBy(ip, host); err != nil || b != "good" {
				t.Errorf("Envoy pod %s: %s served by %q, %v; want good", ip, host, b, err)
			}
		}
		return took
	}
	// refusedUpdate applies change to the served KIngress (good) as an
	// update and waits for a condition that is not True with the reason,
	// at the new generation, whose message names field. The previous
	// generation must keep serving throughout: every external Envoy pod
	// still answers from good, and the load loses no request. The spec is
	// then put back and Ready awaited, for the next case. A Knative
	// webhook, where Serving is installed, may refuse the update at the
	// door instead (what it validates: percents, httpOption); its error
	// must then name webhookField.
	goodSpec := func() v1alpha1.IngressSpec {
		ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "good", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return *ing.Spec.DeepCopy()
	}()
	refusedUpdate := func(t *testing.T, reason, field, webhookField string, change func(*v1alpha1.Ingress)) time.Duration {
		t.Helper()
		before := load.Summarize()
		start := time.Now()
		err := c.Update(ctx, ns, "good", change)
		switch {
		case err != nil && strings.Contains(err.Error(), "admission webhook") && strings.Contains(err.Error(), webhookField):
			t.Logf("refused by admission: %v", err)
			return time.Since(start)
		case err != nil:
			t.Fatalf("update KIngress good: %v", err)
		}
		t.Cleanup(func() {
			if err := c.Update(ctx, ns, "good", func(ing *v1alpha1.Ingress) { ing.Spec = *goodSpec.DeepCopy() }); err != nil {
				t.Errorf("put the served spec back: %v", err)
				return
			}
			if _, err := c.WaitReady(ctx, ns, "good", time.Minute); err != nil {
				t.Error(err)
			}
		})
		got, err := c.WaitFor(ctx, ns, "good", time.Minute, "want reason "+reason, func(ing *v1alpha1.Ingress) bool {
			if ing.Status.ObservedGeneration != ing.Generation {
				return false
			}
			for _, cond := range ing.Status.Conditions {
				if cond.Status != corev1.ConditionTrue && cond.Reason == reason && strings.Contains(cond.Message, field) {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		for _, cond := range got.Status.Conditions {
			if cond.Reason == reason {
				t.Logf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message)
				break
			}
		}
		for _, ip := range c.EnvoyPods(ctx, external) {
			if b, _, err := servedBy(ip, ext); err != nil || b != "good" {
				t.Errorf("Envoy pod %s: %s served by %q, %v; want good (the previous generation)", ip, ext, b, err)
			}
		}
		if after := load.Summarize(); after.Failed() != before.Failed() {
			t.Errorf("%d requests failed while the bad update was refused", after.Failed()-before.Failed())
		}
		return took
	}
	// path0 is the field path of the served external host's only path.
	const path0 = "spec.rules[0].http.paths[0]"
	editPath0 := func(f func(p *v1alpha1.HTTPIngressPath)) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) { f(&ing.Spec.Rules[0].HTTP.Paths[0]) }
	}
	to := func(backend string, port int) []harness.Split {
		return []harness.Split{{Backend: backend, Percent: 100}}
	}
	extRule := func(host, backend string) harness.Rule {
		return harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: to(backend, 80)}
	}

	one("invalid-host", func(t *testing.T) time.Duration {
		host := "not_a_host." + ns + ".example.com"
		return refused(t, harness.KIngress(ns, "invalid-host", extRule(host, "good")), "InvalidHost", host)
	})
	one("host-over-253-characters", func(t *testing.T) time.Duration {
		host := strings.Repeat(strings.Repeat("h", 60)+".", 4) + ns + ".example.com"
		return refused(t, harness.KIngress(ns, "long-host", extRule(host, "good")), "InvalidHost", host)
	})
	one("duplicate-hosts-are-merged", func(t *testing.T) time.Duration {
		host := "dup." + ns + ".example.com"
		ing := harness.KIngress(ns, "dup", extRule(host, "good"), extRule(host, "good"))
		ing.Spec.Rules[0].Hosts = []string{host, host}
		took := served(t, ing, host)
		proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range proxies.Items {
			if p.Spec.VirtualHost != nil && p.Spec.VirtualHost.Fqdn == host {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d HTTPProxies serve %s, want 1", n, host)
		}
		return took
	})
	one("253-character-name", func(t *testing.T) time.Duration {
		name := strings.Repeat("long-name.", 24) + "end-of-it-all"
		name = name[:253]
		host := "long-name." + ns + ".example.com"
		return served(t, harness.KIngress(ns, name, extRule(host, "good")), host)
	})
	one("one-character-name", func(t *testing.T) time.Duration {
		host := "a." + ns + ".example.com"
		return served(t, harness.KIngress(ns, "a", extRule(host, "good")), host)
	})
	one("host-of-another-kingress", func(t *testing.T) time.Duration {
		return refused(t, harness.KIngress(ns, "thief", extRule(ext, "good")), "HostConflict", ext, "the KIngress "+ns+"/good")
	})
	one("host-of-a-users-httpproxy", func(t *testing.T) time.Duration {
		host := "users-own." + ns + ".example.com"
		user := &contourv1.HTTPProxy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "users-own"},
			Spec: contourv1.HTTPProxySpec{
				IngressClassName: external,
				VirtualHost:      &contourv1.VirtualHost{Fqdn: host},
				Routes: []contourv1.Route{{
					Conditions:           []contourv1.MatchCondition{{Prefix: "/"}},
					DirectResponsePolicy: &contourv1.HTTPDirectResponsePolicy{StatusCode: 200, Body: "the user's own"},
				}},
			},
		}
		if _, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Create(ctx, user, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Contour.ProjectcontourV1().HTTPProxies(ns).Delete(context.Background(), "users-own", metav1.DeleteOptions{})
		})
		usersOwn := func(ctx context.Context) (bool, error) {
			for _, ip := range c.EnvoyPods(ctx, external) {
				if code, body, err := get(ip, host); err != nil || code != 200 || body != "the user's own" {
					return false, nil
				}
			}
			return true, nil
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, usersOwn); err != nil {
			t.Fatalf("the user's HTTPProxy is not served by every Envoy pod: %v", err)
		}
		took := refused(t, harness.KIngress(ns, "squatter", extRule(host, "good")), "HostConflict", host, "HTTPProxy "+ns+"/users-own")
		// The user's proxy still serves: Contour never saw a duplicate.
		if ok, _ := usersOwn(ctx); !ok {
			t.Error("the user's HTTPProxy is no longer served by every Envoy pod")
		}
		return took
	})
	one("missing-service", func(t *testing.T) time.Duration {
		return refused(t, harness.KIngress(ns, "missing", extRule("missing."+ns+".example.com", "nothere")),
			"ServiceNotFound", "Service "+ns+"/nothere")
	})
	one("externalname-to-localhost", func(t *testing.T) time.Duration {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "to-localhost"},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(80)}}},
		}
		if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Contour refuses it whatever enableExternalNameService says.
		return refused(t, harness.KIngress(ns, "external-name", extRule("external-name."+ns+".example.com", "to-localhost")),
			"HTTPProxyInvalid", ns+"/to-localhost", "localhost")
	})
	one("tls-without-secret-name", func(t *testing.T) time.Duration {
		host := "tls-empty." + ns + ".example.com"
		ing := harness.KIngress(ns, "tls-empty", extRule(host, "good"))
		ing.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{host}}}
		// With Knative Serving installed, its webhook refuses this at the
		// door, naming the field: as actionable as our condition.
		start := time.Now()
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			_ = c.Net.NetworkingV1alpha1().Ingresses(ns).Delete(ctx, ing.Name, metav1.DeleteOptions{})
			return refused(t, ing, "InvalidTLS", host, "secretName")
		}
		if !strings.Contains(err.Error(), "admission webhook") || !strings.Contains(err.Error(), "secretName") {
			t.Fatalf("create KIngress %s: %v", ing.Name, err)
		}
		t.Logf("refused by admission: %v", err)
		return time.Since(start)
	})
	one("tls-secret-that-does-not-exist", func(t *testing.T) time.Duration {
		host := "tls-missing." + ns + ".example.com"
		ing := harness.KIngress(ns, "tls-missing", extRule(host, "good"))
		ing.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{host}, SecretName: "no-such-cert", SecretNamespace: ns}}
		return refused(t, ing, "HTTPProxyInvalid", "no-such-cert")
	})
	one("split-to-a-port-the-service-lacks", func(t *testing.T) time.Duration {
		ing := harness.KIngress(ns, "bad-port", extRule("bad-port."+ns+".example.com", "good"))
		ing.Spec.Rules[0].HTTP.Paths[0].Splits[0].ServicePort = intstr.FromInt(8081)
		return refused(t, ing, "ServicePortNotFound", "Service "+ns+"/good", "8081")
	})
	// While the bad updates below are refused, a second KIngress rolls out
	// back and forth under load: a refusal must hold up no one else.
	stopRoller := startRoller(ctx, t, c, ns)
	one("update-newline-in-header-value", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidHeader", path0+`.appendHeaders["X-Evil"]`, "appendHeaders",
			editPath0(func(p *v1alpha1.HTTPIngressPath) { p.AppendHeaders = map[string]string{"X-Evil": "a\nb"} }))
	})
	one("update-colon-in-header-name", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidHeader", path0+`.appendHeaders["X:Evil"]`, "appendHeaders",
			editPath0(func(p *v1alpha1.HTTPIngressPath) { p.AppendHeaders = map[string]string{"X:Evil": "v"} }))
	})
	one("update-space-in-header-name", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidHeader", path0+`.splits[0].appendHeaders["X Evil"]`, "appendHeaders",
			editPath0(func(p *v1alpha1.HTTPIngressPath) { p.Splits[0].AppendHeaders["X Evil"] = "v" }))
	})
	one("update-empty-header-name", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidHeader", path0+`.appendHeaders[""]`, "appendHeaders",
			editPath0(func(p *v1alpha1.HTTPIngressPath) { p.AppendHeaders = map[string]string{"": "v"} }))
	})
	one("update-space-in-rewrite-host", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidRewriteHost", path0+".rewriteHost", "rewriteHost",
			editPath0(func(p *v1alpha1.HTTPIngressPath) { p.RewriteHost = "a b.example.com" }))
	})
	one("update-percents-150-and-minus-50", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidSplit", path0+".splits[0].percent", "percent",
			editPath0(func(p *v1alpha1.HTTPIngressPath) {
				second := *p.Splits[0].DeepCopy()
				p.Splits[0].Percent, second.Percent = 150, -50
				p.Splits = append(p.Splits, second)
			}))
	})
	one("update-unknown-http-option", func(t *testing.T) time.Duration {
		return refusedUpdate(t, "InvalidHTTPOption", "spec.httpOption", "httpOption",
			func(ing *v1alpha1.Ingress) { ing.Spec.HTTPOption = "Disabled" })
	})
	stopRoller()
	one("another-ingress-class", func(t *testing.T) time.Duration {
		ing := harness.KIngress(ns, "not-ours", extRule("not-ours."+ns+".example.com", "good"))
		ing.Annotations[networking.IngressClassAnnotationKey] = "istio.ingress.networking.knative.dev"
		start := create(t, ing)
		// Nothing to wait for but time: long enough for several reconciles
		// of a KIngress of our class (a second or less each here).
		time.Sleep(5 * time.Second)
		got, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "not-ours", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Status, v1alpha1.IngressStatus{}) {
			t.Errorf("status of a KIngress of another class was written: %+v", got.Status)
		}
		proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range proxies.Items {
			if metav1.IsControlledBy(&p, got) {
				t.Errorf("HTTPProxy %s was written for a KIngress of another class", p.Name)
			}
		}
		return time.Since(start)
	})
	one("malformed-config-contour", func(t *testing.T) time.Duration {
		before := metav1.Now().Rfc3339Copy() // events carry whole seconds
		changeConfigContour(ctx, t, c, func(data map[string]string) {
			data[config.VisibilityKey] = "ExternalIP: [this is not a map"
		})
		// An operator sees the rejection on the ConfigMap itself: a Warning
		// event naming the key.
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			evs, err := c.Kube.CoreV1().Events(leaseNamespace).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.kind=ConfigMap,involvedObject.name=" + config.ContourConfigName})
			if err != nil {
				return false, nil
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == "InvalidConfig" && strings.Contains(e.Message, config.VisibilityKey) &&
					!e.LastTimestamp.Before(&before) {
					t.Logf("event on %s: %s", config.ContourConfigName, e.Message)
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			t.Errorf("no Warning event InvalidConfig naming %q on ConfigMap %s/%s", config.VisibilityKey, leaseNamespace, config.ContourConfigName)
		}
		// The last valid configuration stays in force: a KIngress created
		// now is served as before, and so is the one under load.
		host := "during-bad-config." + ns + ".example.com"
		return served(t, harness.KIngress(ns, "during-bad-config", extRule(host, "good")), host)
	})

	stopLoad()
	reportFault(t, "bad-input", load.Summarize(), slowest)
	t.Logf("bad input: every case in %v", time.Since(begin).Round(time.Second))
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// startRoller serves a KIngress of its own (roller) under load and rolls it
// between two fresh backends, each rollout awaited Ready, until the
// returned func is called; that func checks that every rollout went Ready
// and no request of its load failed.
func startRoller(ctx context.Context, t *testing.T, c *harness.Clients, ns string) func() {
	t.Helper()
	for _, b := range []string{"roll-a", "roll-b"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	host := "roller." + ns + ".example.com"
	to := func(b string) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
				Splits: []harness.Split{{Backend: b, Percent: 100}}})
		}
	}
	ing := harness.KIngress(ns, "roller")
	to("roll-a")(ing)
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "roller", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	load, stopLoad := startLoadOn(ctx, 50, c.MustFleetTargets(ctx, t, external, host), "roll-a", "roll-b")
	stop := make(chan struct{})
	done := make(chan error, 1)
	rollouts := 0
	go func() {
		next := "roll-b"
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := c.Update(ctx, ns, "roller", to(next)); err != nil {
				done <- err
				return
			}
			if _, err := c.WaitReady(ctx, ns, "roller", time.Minute); err != nil {
				done <- err
				return
			}
			rollouts++
			next = map[string]string{"roll-a": "roll-b", "roll-b": "roll-a"}[next]
			time.Sleep(300 * time.Millisecond)
		}
	}()
	return func() {
		t.Helper()
		close(stop)
		err := <-done
		time.Sleep(time.Second)
		stopLoad()
		s := load.Summarize()
		t.Logf("the second KIngress meanwhile: %d rollouts, each Ready; its load: %s", rollouts, s)
		if err != nil {
			t.Errorf("the second KIngress's rollouts: %v", err)
		}
		if rollouts == 0 || s.Requests == 0 || s.Failed() != 0 {
			t.Errorf("the second KIngress: %d rollouts, %d of %d requests failed: %v", rollouts, s.Failed(), s.Requests, s.Failures)
		}
	}
}
