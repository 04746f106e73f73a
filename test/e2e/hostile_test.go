//go:build e2e

package e2e

// The attacks a client or a tenant can make on what hitless writes, each
// sent as the attacker would send it, to every Envoy pod, through real
// Contour and Envoy. Bad input that would take a host or a fleet down is in
// badinput_test.go (TestFaultBadInput).

import (
	"context"
	"strings"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/resources/names"
	"github.com/hitless/hitless/test/harness"
)

// proberHeaders is every header hitless's prober sends, with the given
// token in place of the one only the controller can compute.
func proberHeaders(token string) map[string]string {
	return map[string]string{
		header.UserAgentKey: header.IngressReadinessUserAgent,
		header.ProbeKey:     header.ProbeValue,
		header.HashKey:      header.HashValueOverride,
		probekey.Header:     token,
	}
}

// tenantToken is the probe token a tenant can learn: it serves a host of its
// own from a namespace of its own and reads the token off a route of its own
// serving proxy (tenants may read the HTTPProxies of their namespace).
func tenantToken(ctx context.Context, t *testing.T, c *harness.Clients) string {
	t.Helper()
	ns, cleanup, err := c.CreateNamespace(ctx, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	if err := c.CreateBackend(ctx, ns, "own"); err != nil {
		t.Fatal(err)
	}
	ing := harness.KIngress(ns, "own", harness.Rule{Host: "own." + ns + ".example.com", Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "own", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "own", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies.Items {
		for _, r := range p.Spec.Routes {
			for _, cond := range r.Conditions {
				if cond.Header != nil && cond.Header.Name == probekey.Header {
					return cond.Header.Exact
				}
			}
		}
	}
	t.Fatalf("no route of namespace %s's proxies matches %s", ns, probekey.Header)
	return ""
}

// burst sends requests to every target for a second and summarizes them.
func burst(ctx context.Context, targets []harness.Target, allowed ...string) harness.Summary {
	l := &harness.Load{Targets: targets, RPS: 20 * len(targets)}
	l.Allow(allowed...)
	stop := l.Start(ctx)
	time.Sleep(time.Second)
	stop()
	return l.Summarize()
}

// TestAttackProbeHeadersPastAuthorization: a client without the
// authorization server's credential sends every header hitless's prober
// sends (Knative's probe headers and user agent, and a probe token: none,
// forged, or the one a tenant reads off its own namespace's proxies) to
// every path of a host behind an ExtensionService. Before, during and after a
// rollout to a fresh backend, on every Envoy pod: 401 over HTTPS, 301 over
// plain HTTP, never the application; the KIngress still goes Ready, and the
// authorization server lets no probe through (it checks only its token).
func TestAttackProbeHeadersPastAuthorization(t *testing.T) {
	ctx, c, ns := setup(t, "atk-authz")
	a, host, to := servedBehindAuthorization(ctx, t, c, ns)
	stolen := tenantToken(ctx, t, c)

	pods := c.EnvoyPods(ctx, external)
	if len(pods) == 0 {
		t.Fatalf("fleet %s has no ready Envoy pod", external)
	}
	var secure, plain, legit []harness.Target
	for _, ip := range pods {
		legit = append(legit, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Header: map[string]string{"Authorization": "Bearer " + a.token}})
		for _, path := range []string{"/", "/healthz", "/any/path"} {
			for _, token := range []string{"", "forged-0123456789abcdef", stolen} {
				secure = append(secure, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Path: path, Header: proberHeaders(token)})
				plain = append(plain, harness.Target{Addr: ip + ":8080", Host: host, Path: path, Header: proberHeaders(token)})
			}
		}
	}
	check := func(when string, s, p harness.Summary) {
		t.Helper()
		t.Logf("%s: over HTTPS with the prober's headers: %s", when, s)
		t.Logf("%s: over plain HTTP with the prober's headers: %s", when, p)
		if s.Requests == 0 || s.ByCode[401] != s.Requests {
			t.Errorf("%s: %d of %d requests with the prober's headers over HTTPS were not refused (401): %v", when, s.Requests-s.ByCode[401], s.Requests, s.Failures)
		}
		if p.Requests == 0 || p.ByCode[301] != p.Requests {
			t.Errorf("%s: %d of %d requests with the prober's headers over plain HTTP were not redirected (301)", when, p.Requests-p.ByCode[301], p.Requests)
		}
	}
	check("before the rollout", burst(ctx, secure), burst(ctx, plain))

	rps := envInt("AUTHZ_RPS", 100)
	good, stopGood := startLoadOn(ctx, rps, legit, "blue")
	atk := &harness.Load{Targets: secure, RPS: rps}
	stopAtk := atk.Start(ctx)
	atkPlain := &harness.Load{Targets: plain, RPS: rps / 2}
	stopAtkPlain := atkPlain.Start(ctx)
	time.Sleep(time.Second)
	good.Allow("blue", "green")
	if err := c.Update(ctx, ns, "authz", to("green")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.WaitReady(ctx, ns, "authz", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout to a fresh backend under attack Ready in %v", time.Since(start).Round(time.Millisecond))
	good.Allow("green")
	time.Sleep(time.Second)
	stopGood()
	stopAtk()
	stopAtkPlain()
	sg := good.Summarize()
	t.Logf("during the rollout, with the credential: %s", sg)
	if sg.Failed() != 0 || sg.Requests == 0 {
		t.Errorf("with the credential: %d of %d failed: %v", sg.Failed(), sg.Requests, sg.Failures)
	}
	check("during the rollout", atk.Summarize(), atkPlain.Summarize())
	check("after the rollout", burst(ctx, secure), burst(ctx, plain))
	t.Logf("authorization server: %d allowed, %d denied, %d requests with K-Network-Probe (all a client's)", a.allowed.Load(), a.denied.Load(), a.probe.Load())
}

// TestAttackProbeRouteSkipsRedirectOrHeaderMatch: Knative's probe header
// (K-Network-Hash: override), which anyone may send, gets a client nothing
// the user routes would not serve it: not the application over plain HTTP on
// a host that redirects to HTTPS, and not a path's backend without that
// path's header match. Knative's contract still holds over HTTPS: the probe
// answers 200.
func TestAttackProbeRouteSkipsRedirectOrHeaderMatch(t *testing.T) {
	ctx, c, ns := setup(t, "atk-probe")
	for _, b := range []string{"blue", "green"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	host := "redirected." + ns + ".example.com"
	if err := c.CreateTLSSecret(ctx, ns, "cert", host); err != nil {
		t.Fatal(err)
	}
	split := func(b string) []v1alpha1.IngressBackendSplit {
		return []v1alpha1.IngressBackendSplit{{
			IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: b, ServicePort: intstr.FromInt(80)},
			Percent:        100,
			AppendHeaders:  map[string]string{"X-Backend": b},
		}}
	}
	ing := harness.KIngress(ns, "redirected")
	ing.Spec.Rules = []v1alpha1.IngressRule{{
		Hosts:      []string{host},
		Visibility: v1alpha1.IngressVisibilityExternalIP,
		HTTP: &v1alpha1.HTTPIngressRuleValue{Paths: []v1alpha1.HTTPIngressPath{{
			// Only requests that carry the secret reach green.
			Path:    "/private",
			Headers: map[string]v1alpha1.HeaderMatch{"X-Token": {Exact: "s3cret"}},
			Splits:  split("green"),
		}, {
			Splits: split("blue"),
		}}},
	}}
	ing.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{host}, SecretName: "cert", SecretNamespace: ns}}
	ing.Spec.HTTPOption = v1alpha1.HTTPOptionRedirected
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "redirected", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	knative := map[string]string{header.ProbeKey: header.ProbeValue, header.HashKey: header.HashValueOverride}
	var plain, noSecret, withSecret, contract []harness.Target
	for _, ip := range c.EnvoyPods(ctx, external) {
		for _, path := range []string{"/", "/private", "/healthz"} {
			plain = append(plain, harness.Target{Addr: ip + ":8080", Host: host, Path: path, Header: knative})
		}
		noSecret = append(noSecret, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Path: "/private", Header: map[string]string{header.HashKey: header.HashValueOverride}})
		withSecret = append(withSecret, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Path: "/private", Header: map[string]string{"X-Token": "s3cret"}})
		contract = append(contract, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Header: knative})
	}

	if s := burst(ctx, plain); s.Requests == 0 || s.ByCode[301] != s.Requests {
		t.Errorf("plain HTTP with Knative's probe headers on a Redirected host: %s, want every answer a redirect (301)", s)
	} else {
		t.Logf("plain HTTP with Knative's probe headers: %s", s)
	}
	// green must not answer without the secret: blue (the / route) does.
	if s := burst(ctx, noSecret, "blue"); s.Requests == 0 || s.Failed() != 0 {
		t.Errorf("/private with K-Network-Hash: override and no X-Token: %s, want every answer from blue (green needs the header)", s)
	} else {
		t.Logf("/private with K-Network-Hash: override and no X-Token: %s", s)
	}
	if s := burst(ctx, withSecret, "green"); s.Requests == 0 || s.Failed() != 0 {
		t.Errorf("/private with X-Token: %s, want every answer from green", s)
	}
	// Knative's probe handler (the runtime image's) answers it, so the
	// answer names no backend: 200 is the contract.
	if s := burst(ctx, contract); s.Requests == 0 || s.ByCode[200] != s.Requests {
		t.Errorf("Knative's probe over HTTPS: %s, want every answer 200", s)
	}
}

// TestAttackWarmProxyFromPublicNames: a warm proxy's host and paths are
// computable from public names (namespace, KIngress, Service, port), it has
// no TLS and no authorization, and it routes to the backends of the host.
// While one exists (a rollout held in Warming by a backend with no
// endpoints), requests built from those names with Knative's probe headers
// and a forged, empty or another namespace's token get nothing from a plain
// Service backend on any Envoy pod (404); the prober's own token gets
// through, so the route was there to be attacked.
func TestAttackWarmProxyFromPublicNames(t *testing.T) {
	ctx, c, ns := setup(t, "atk-warm")
	if err := c.CreateBackend(ctx, ns, "blue"); err != nil {
		t.Fatal(err)
	}
	// A Service no pod backs: the rollout to it waits in Warming.
	if err := c.CreateBackendService(ctx, ns, "never"); err != nil {
		t.Fatal(err)
	}
	host := "warm." + ns + ".example.com"
	ing := harness.KIngress(ns, "warm", harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "blue", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "warm", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	stolen := tenantToken(ctx, t, c)
	if err := c.Update(ctx, ns, "warm", func(ing *v1alpha1.Ingress) {
		harness.SetRules(ing, harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
			Splits: []harness.Split{{Backend: "never", Percent: 100}}})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitFor(ctx, ns, "warm", time.Minute, "Warming", func(ing *v1alpha1.Ingress) bool {
		cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
		return cond != nil && cond.Reason == "Warming"
	}); err != nil {
		t.Fatal(err)
	}

	// What the attacker computes: the warm host of the KIngress on the
	// external class and blue's path on it.
	warmHost := names.WarmHost(ns, "warm", external)
	bluePath := names.BackendPath(resources.Backend{Namespace: ns, Name: "blue", Port: 80}.Key())
	var token string
	proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range proxies.Items {
		if p.Spec.VirtualHost != nil && p.Spec.VirtualHost.Fqdn == warmHost {
			token = tokenOf(p.Spec.Routes)
		}
	}
	if token == "" {
		t.Fatalf("no warm proxy for %s in %s: the rollout has nothing to attack", warmHost, ns)
	}

	var attacks, prober []harness.Target
	for _, ip := range c.EnvoyPods(ctx, external) {
		for _, path := range []string{bluePath, bluePath + "/healthz", "/"} {
			for _, tok := range []string{"", "forged-0123456789abcdef", stolen} {
				attacks = append(attacks, harness.Target{Addr: ip + ":8080", Host: warmHost, Path: path, Header: proberHeaders(tok)})
			}
			attacks = append(attacks, harness.Target{Addr: ip + ":8080", Host: warmHost, Path: path})
		}
		prober = append(prober, harness.Target{Addr: ip + ":8080", Host: warmHost, Path: bluePath + "/healthz", Header: proberHeaders(token)})
	}
	s := burst(ctx, attacks)
	t.Logf("requests built from public names to the warm host: %s", s)
	if s.Requests == 0 || s.ByCode[404] != s.Requests {
		t.Errorf("the warm host answered %d of %d requests built from public names with something else than 404: %v", s.Requests-s.ByCode[404], s.Requests, s.Failures)
	}
	// The control: the route exists on every pod, for the prober alone.
	if p := burst(ctx, prober); p.Requests == 0 || p.ByCode[200] != p.Requests {
		t.Errorf("the prober's own request to the warm route: %s, want 200 on every pod (else the attack above proved nothing)", p)
	}
}

// tokenOf reads the probe token a route list matches.
func tokenOf(routes []contourv1.Route) string {
	for _, r := range routes {
		for _, cond := range r.Conditions {
			if cond.Header != nil && cond.Header.Name == probekey.Header {
				return cond.Header.Exact
			}
		}
	}
	return ""
}

// TestAttackClaimAnotherNamespacesHost: a KIngress in one namespace claims
// the in-cluster names of a Service of another (victim.<ns>.svc.cluster.local
// and its short forms), hoping to be first and take its in-cluster traffic.
// It is refused with a condition naming the host, nothing is written, and
// the real owner's KIngress goes Ready and is served by its own backend on
// every internal Envoy pod.
func TestAttackClaimAnotherNamespacesHost(t *testing.T) {
	ctx, c, attacker := setup(t, "atk-claim")
	victim, cleanup, err := c.CreateNamespace(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	if err := c.CreateBackend(ctx, attacker, "thief"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateBackend(ctx, victim, "owner"); err != nil {
		t.Fatal(err)
	}
	for i, h := range []string{"app." + victim + ".svc.cluster.local", "app." + victim + ".svc", "app." + victim} {
		name := "steal-" + string(rune('a'+i))
		ing := harness.KIngress(attacker, name, harness.Rule{Host: h, Visibility: v1alpha1.IngressVisibilityClusterLocal,
			Splits: []harness.Split{{Backend: "thief", Percent: 100}}})
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(attacker).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := c.WaitFor(ctx, attacker, name, time.Minute, "refused", func(ing *v1alpha1.Ingress) bool {
			cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
			return cond != nil && cond.IsFalse() && cond.Reason == "HostOfAnotherNamespace"
		})
		if err != nil {
			t.Fatal(err)
		}
		msg := got.Status.GetCondition(v1alpha1.IngressConditionReady).Message
		t.Logf("claim of %s from %s: %s", h, attacker, msg)
		if !strings.Contains(msg, victim) {
			t.Errorf("the condition does not name the host's namespace %s: %s", victim, msg)
		}
	}
	if l, err := c.Contour.ProjectcontourV1().HTTPProxies(attacker).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	} else if len(l.Items) != 0 {
		t.Errorf("the refused claims wrote %d HTTPProxies", len(l.Items))
	}

	host := "app." + victim + ".svc.cluster.local"
	owner := harness.KIngress(victim, "app", harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityClusterLocal,
		Splits: []harness.Split{{Backend: "owner", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(victim).Create(ctx, owner, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, victim, "app", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	var targets []harness.Target
	for _, ip := range c.EnvoyPods(ctx, internal) {
		for _, h := range []string{host, "app." + victim + ".svc", "app." + victim} {
			targets = append(targets, harness.Target{Addr: ip + ":8080", Host: h})
		}
	}
	// The owner's backend alone answers (X-Backend, set by its route).
	l := &harness.Load{Targets: targets, RPS: 20 * len(targets)}
	l.Allow("owner")
	stop := l.Start(ctx)
	time.Sleep(time.Second)
	stop()
	if s := l.Summarize(); s.Requests == 0 || s.Failed() != 0 {
		t.Errorf("the owner's host on the internal fleet: %s, want every answer from %s's backend owner", s, victim)
	} else {
		t.Logf("the owner's host on the internal fleet: %s", s)
	}
}
