//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// netContour runs hack/netcontour.sh with the given verb: the real peer,
// built from its vendored source into the cache.
func netContour(t *testing.T, verb string) {
	t.Helper()
	out, err := exec.Command("../../hack/netcontour.sh", verb).CombinedOutput()
	if err != nil {
		t.Fatalf("hack/netcontour.sh %s: %v\n%s", verb, err, out)
	}
}

// needNetContour skips, loudly, a test that runs net-contour itself when its
// source is not on this machine (hack/netcontour.sh available says where it
// looks): its module cannot be fetched through the module proxy.
func needNetContour(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("../../hack/netcontour.sh", "available").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: this test runs the real net-contour and %s", strings.TrimSpace(string(out)))
	}
}

// withNetContour stops hitless and starts net-contour for the test; hitless
// is started again (and net-contour stopped) when the test ends.
func withNetContour(t *testing.T) {
	t.Helper()
	needNetContour(t)
	controller(t, "stop")
	t.Cleanup(func() {
		_ = exec.Command("../../hack/netcontour.sh", "stop").Run()
		_ = exec.Command("../../hack/controller.sh", "start").Run()
	})
	netContour(t, "start")
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

// TestMigrateFromNetContour moves two KIngresses that the real net-contour
// serves to hitless under load to every Envoy pod of both fleets: a Knative
// Service's shape (an external and a cluster-local host), and a split whose
// rollout to a fresh backend net-contour had begun when it was stopped (its
// endpoint probe child KIngress written, its proxies still at the old
// generation). hitless is started with the same class. No request may fail;
// afterwards nothing of net-contour's is left, and hitless rolls both on as
// its own.
func TestMigrateFromNetContour(t *testing.T) {
	ctx, c, ns := setup(t, "mig")
	withNetContour(t)
	for _, b := range []string{"a", "b", "c", "d"} {
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
	for _, ing := range []*v1alpha1.Ingress{
		harness.KIngress(ns, "ksvc", twoHosts(ext, local, "a")...),
		harness.KIngress(ns, "split", splitRules(harness.Split{Backend: "a", Percent: 50}, harness.Split{Backend: "b", Percent: 50})...),
	} {
		if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"ksvc", "split"} {
		if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatalf("net-contour never made %s Ready: %v", name, err)
		}
	}

	var targets []harness.Target
	for fleet, hosts := range map[string][]string{external: {ext, sext}, internal: {local, slocal}} {
		for _, h := range hosts {
			targets = append(targets, c.MustFleetTargets(ctx, t, fleet, h)...)
		}
	}
	servedEverywhere(ctx, t, targets)
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 100), targets, "a", "b", "c", "d")
	time.Sleep(2 * time.Second)

	// net-contour begins a rollout of split to the fresh backend c: it
	// writes its endpoint probe child first and switches only once the
	// child is Ready. It is stopped as soon as the child exists.
	if err := c.Update(ctx, ns, "split", func(ing *v1alpha1.Ingress) {
		harness.SetRules(ing, splitRules(harness.Split{Backend: "b", Percent: 50}, harness.Split{Backend: "c", Percent: 50})...)
	}); err != nil {
		t.Fatal(err)
	}
	child := "split--ep"
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, child, metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("net-contour wrote no endpoint probe KIngress %s for the rollout: %v", child, err)
	}
	netContour(t, "stop")
	proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("net-contour stopped mid-rollout with %d HTTPProxies in %s", len(proxies.Items), ns)

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
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, child, metav1.GetOptions{})
		return apierrs.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("net-contour's endpoint probe KIngress %s left behind: %v", child, err)
	}
	time.Sleep(2 * time.Second)

	// hitless now rolls both as its own: a fresh backend, a shift.
	if err := c.Update(ctx, ns, "ksvc", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, "d")...) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, "split", func(ing *v1alpha1.Ingress) {
		harness.SetRules(ing, splitRules(harness.Split{Backend: "c", Percent: 100})...)
	}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ksvc", "split"} {
		if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// As Knative does once the route is Ready: the old revisions go.
	load.Allow("c", "d")
	for _, b := range []string{"a", "b"} {
		if err := c.DeleteBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
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

// TestMigrateBackToNetContour is the way back the README describes, with
// the real net-contour, under load to every Envoy pod of both fleets: a
// KIngress hitless rolled to a fresh backend (its warm proxies may still
// be there) is Ready; hitless is stopped, net-contour started, and the warm
// proxies deleted by their label. net-contour must find hitless's serving
// proxies by its labels and update them in place (no second proxy for a
// host, no probe of its own), and no request may fail.
func TestMigrateBackToNetContour(t *testing.T) {
	ctx, c, ns := setup(t, "back")
	needNetContour(t)
	for _, b := range []string{"a", "b"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	ext, local := "ksvc."+ns+".example.com", "ksvc."+ns+".svc.cluster.local"
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, "ksvc", twoHosts(ext, local, "a")...), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "ksvc", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	targets := append(c.MustFleetTargets(ctx, t, external, ext), c.MustFleetTargets(ctx, t, internal, local)...)
	load, stopLoad := startLoadOn(ctx, envInt("FAULT_RPS", 100), targets, "a", "b")
	time.Sleep(2 * time.Second)
	if err := c.Update(ctx, ns, "ksvc", func(ing *v1alpha1.Ingress) { harness.SetRules(ing, twoHosts(ext, local, "b")...) }); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "ksvc", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	load.Allow("b")
	warm, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleWarm})
	if err != nil {
		t.Fatal(err)
	}
	// one serving proxy per expanded host; net-contour must keep exactly
	// these, updated in place
	serving, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleServing})
	if err != nil {
		t.Fatal(err)
	}
	servingUIDs := sets.New[string]()
	for _, p := range serving.Items {
		servingUIDs.Insert(string(p.UID))
	}

	// The README's steps.
	start := time.Now()
	withNetContour(t)
	ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "ksvc", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		served := 0
		for _, p := range list.Items {
			if !metav1.IsControlledBy(&p, ing) || p.Labels[resources.LabelRole] == resources.RoleWarm {
				continue
			}
			// net-contour writes its own labels in place of hitless's.
			if p.Labels[resources.LabelRole] != "" {
				last = "proxy " + p.Name + " not taken back by net-contour yet"
				return false, nil
			}
			if p.Status.CurrentStatus != "valid" {
				last = fmt.Sprintf("proxy %s is %s: %s", p.Name, p.Status.CurrentStatus, p.Status.Description)
				return false, nil
			}
			if !servingUIDs.Has(string(p.UID)) {
				last = "net-contour wrote a proxy of its own, " + p.Name + ", beside hitless's"
				return false, nil
			}
			served++
		}
		last = fmt.Sprintf("%d proxies of net-contour's where hitless served with %d", served, len(serving.Items))
		return served == len(serving.Items), nil
	}); err != nil {
		stopLoad()
		reportFault(t, "migrate-back-to-net-contour", load.Summarize(), time.Since(start))
		t.Fatalf("net-contour did not take ksvc back: %v (%s)", err, last)
	}
	converge := time.Since(start)
	t.Logf("taken back by net-contour %v after hitless stopped: its %d proxies are hitless's %d serving ones, updated in place; %d warm proxies of hitless's to delete",
		converge.Round(time.Millisecond), len(serving.Items), len(serving.Items), len(warm.Items))
	if err := c.Contour.ProjectcontourV1().HTTPProxies(ns).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: resources.LabelRole + "=" + resources.RoleWarm}); err != nil {
		t.Fatal(err)
	}
	// As Knative does once the route is Ready: the old revision goes.
	if err := c.DeleteBackend(ctx, ns, "a"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	stopLoad()
	if got, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "ksvc", metav1.GetOptions{}); err != nil || !got.IsReady() {
		t.Errorf("ksvc is not Ready under net-contour: %v", err)
	}
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "ksvc--ep", metav1.GetOptions{}); !apierrs.IsNotFound(err) {
		t.Errorf("net-contour probed the endpoints again (ksvc--ep exists: %v): it did not find hitless's proxies at the generation", err)
	}
	reportFault(t, "migrate-back-to-net-contour", load.Summarize(), converge)
}
