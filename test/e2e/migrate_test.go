//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha1" //nolint:gosec // net-contour's label, not security
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// The migration tests replay what net-contour (knative-extensions/net-contour
// at c48dabab) wrote on this project's stack, recorded as data beside the
// checkout (../shared/peers/README.md says how): no code of the peer is
// built or run here, since no package registry serves it.
const (
	recordedPeerDir = "net-contour-c48dabab"
	// the namespace and KIngress name of the recorded files at-rest.yaml
	// and mid-rollout.yaml; took-over.yaml's are read from the file
	recordedNamespace = "nc-fixture"
	recordedName      = "app"
	// net-contour's label of a proxy's host: the SHA-1 of it, in hex
	domainHashLabel = "contour.networking.knative.dev/domainHash"
)

// repoRoot is the directory of the go.mod of this module, found upwards
// from the test's working directory, so that a clone in any folder finds
// what lies beside it.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/hitless/hitless\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of github.com/hitless/hitless above the test's directory")
		}
		dir = parent
	}
}

// recordedPeer is the directory of net-contour's recorded objects,
// ../shared/peers/net-contour-c48dabab beside the repository's root. A
// checkout without it skips, saying so; one with it but a file missing
// fails on that file.
func recordedPeer(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "..", "shared", "peers", recordedPeerDir)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("SKIPPED, NOT RUN: net-contour's recorded objects are not on this machine (%v); this test replays them "+
			"(../shared/peers/README.md beside the checkout) and nothing else stands in for the peer", err)
	}
	return dir
}

// recorded is the objects of one recorded file, rewritten for a test.
type recorded struct {
	ingresses []*v1alpha1.Ingress // owners before the KIngresses they own
	proxies   []*contourv1.HTTPProxy
}

// loadRecorded reads one file of the recording (a List of HTTPProxies and
// KIngresses) and applies rename to every string value in it: names,
// namespaces, hosts, backends, label values, annotations. Keys are left
// alone. Each proxy's domain-hash label must be the SHA-1 of its recorded
// host (the relation net-contour writes and looks proxies up by); it is
// computed again for the renamed host. Status is kept as recorded.
func loadRecorded(t *testing.T, path string, rename func(string) string) recorded {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("net-contour's recorded objects: %v", err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON(js); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out recorded
	for _, item := range list.Items {
		if fqdn, _, _ := unstructured.NestedString(item.Object, "spec", "virtualhost", "fqdn"); fqdn != "" {
			if got, want := item.GetLabels()[domainHashLabel], hostHash(fqdn); got != want {
				t.Fatalf("%s: proxy %s of %s has %s=%s, want %s: the recording does not hash hosts as net-contour does", path, item.GetName(), fqdn, domainHashLabel, got, want)
			}
		}
		obj := renameValues(item.Object, rename).(map[string]interface{})
		switch kind := item.GetKind(); kind {
		case "HTTPProxy":
			p := &contourv1.HTTPProxy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, p); err != nil {
				t.Fatalf("%s: HTTPProxy %s: %v", path, item.GetName(), err)
			}
			if _, ok := p.Labels[domainHashLabel]; ok {
				p.Labels[domainHashLabel] = hostHash(p.Spec.VirtualHost.Fqdn)
			}
			out.proxies = append(out.proxies, p)
		case "Ingress":
			ing := &v1alpha1.Ingress{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, ing); err != nil {
				t.Fatalf("%s: KIngress %s: %v", path, item.GetName(), err)
			}
			out.ingresses = append(out.ingresses, ing)
		default:
			t.Fatalf("%s: unexpected kind %s", path, kind)
		}
	}
	sort.SliceStable(out.ingresses, func(i, j int) bool {
		return len(out.ingresses[i].OwnerReferences) < len(out.ingresses[j].OwnerReferences)
	})
	return out
}

func hostHash(host string) string {
	return fmt.Sprintf("%x", sha1.Sum([]byte(host))) //nolint:gosec // net-contour's label, not security
}

// renameValues applies rename to every string value under v.
func renameValues(v interface{}, rename func(string) string) interface{} {
	switch v := v.(type) {
	case map[string]interface{}:
		for k, e := range v {
			v[k] = renameValues(e, rename)
		}
	case []interface{}:
		for i, e := range v {
			v[i] = renameValues(e, rename)
		}
	case string:
		return rename(v)
	}
	return v
}

// renamer maps the recording's namespace and KIngress name, as whole words
// (so the endpoint probe child app--ep and its hosts follow), to the
// test's. The backends keep their names: the test runs its own Services
// blue and green.
func renamer(ns, name string) func(string) string {
	words := regexp.MustCompile(`\b(?:` + regexp.QuoteMeta(recordedNamespace) + `|` + regexp.QuoteMeta(recordedName) + `)\b`)
	return func(s string) string {
		return words.ReplaceAllStringFunc(s, func(w string) string {
			if w == recordedNamespace {
				return ns
			}
			return name
		})
	}
}

// replay writes the recorded objects the way net-contour left them: each
// KIngress created, or its spec, labels and annotations updated (a changed
// spec bumps its generation as net-contour's rollout did), and its status
// written as recorded, since that is what hitless finds; each HTTPProxy
// created or updated with its owner references bound to the KIngresses
// just written. A proxy's status is not written: Contour writes its own.
func replay(ctx context.Context, t *testing.T, c *harness.Clients, r recorded) {
	t.Helper()
	kings := c.Net.NetworkingV1alpha1()
	uids := map[string]string{}
	bind := func(refs []metav1.OwnerReference) {
		for i := range refs {
			uid, ok := uids[refs[i].Name]
			if !ok {
				t.Fatalf("recorded owner %s %s is not in the recording", refs[i].Kind, refs[i].Name)
			}
			refs[i].UID = types.UID(uid)
		}
	}
	for _, want := range r.ingresses {
		bind(want.OwnerReferences)
		got, err := kings.Ingresses(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrs.IsNotFound(err):
			got, err = kings.Ingresses(want.Namespace).Create(ctx, want, metav1.CreateOptions{})
		case err == nil:
			got = got.DeepCopy()
			got.Spec, got.Labels, got.Annotations, got.OwnerReferences = want.Spec, want.Labels, want.Annotations, want.OwnerReferences
			got, err = kings.Ingresses(want.Namespace).Update(ctx, got, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("replay KIngress %s: %v", want.Name, err)
		}
		uids[got.Name] = string(got.UID)
		got.Status = want.Status
		if _, err := kings.Ingresses(want.Namespace).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("replay the status of KIngress %s: %v", want.Name, err)
		}
	}
	for _, want := range r.proxies {
		bind(want.OwnerReferences)
		want.Status = contourv1.HTTPProxyStatus{}
		proxies := c.Contour.ProjectcontourV1().HTTPProxies(want.Namespace)
		got, err := proxies.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrs.IsNotFound(err):
			_, err = proxies.Create(ctx, want, metav1.CreateOptions{})
		case err == nil:
			got = got.DeepCopy()
			got.Spec, got.Labels, got.Annotations, got.OwnerReferences = want.Spec, want.Labels, want.Annotations, want.OwnerReferences
			_, err = proxies.Update(ctx, got, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("replay HTTPProxy %s: %v", want.Name, err)
		}
	}
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

// takeoverState tells whether hitless serves the KIngress alone: Ready at
// its generation, and every proxy it controls carries hitless's role, the
// serving ones valid. When not, it says what is missing.
func takeoverState(ctx context.Context, c *harness.Clients, ns, name string) (bool, string) {
	ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	serving := 0
	for _, p := range list.Items {
		if !metav1.IsControlledBy(&p, ing) {
			continue
		}
		// hitless's serving proxies carry net-contour's labels too (the
		// way back); a proxy without hitless's role is one of
		// net-contour's not taken over yet.
		if p.Labels[resources.LabelRole] == "" {
			return false, "net-contour's proxy " + p.Name + " not taken over"
		}
		if p.Labels[resources.LabelRole] == resources.RoleServing {
			serving++
			if p.Status.CurrentStatus != "valid" {
				return false, fmt.Sprintf("proxy %s is %s: %s", p.Name, p.Status.CurrentStatus, p.Status.Description)
			}
		}
	}
	last := fmt.Sprintf("%d serving proxies, ready=%v at generation %d of %d", serving, ing.IsReady(), ing.Status.ObservedGeneration, ing.Generation)
	return serving > 0 && ing.IsReady() && ing.Status.ObservedGeneration == ing.Generation, last
}

// recordedBackend reads which backend answered: the recorded KIngresses
// append Who: <backend> to each split, the harness's X-Backend.
func recordedBackend(body []byte) string {
	if b := harness.XBackend(body); b != "" {
		return b
	}
	var seen struct {
		Request struct {
			Headers map[string][]string `json:"headers"`
		} `json:"request"`
	}
	if json.Unmarshal(body, &seen) == nil && len(seen.Request.Headers["Who"]) > 0 {
		return seen.Request.Headers["Who"][0]
	}
	return ""
}

// TestMigrateFromNetContour moves two KIngresses from net-contour to
// hitless under load to every Envoy pod of both fleets, from what
// net-contour c48dabab wrote, replayed with hitless stopped: rest, a
// Knative Service's shape at rest on blue (at-rest.yaml: an external host,
// a cluster-local one expanded to three), and mid, stopped in the middle of
// a rollout to green (at-rest.yaml then mid-rollout.yaml: the external
// proxy already on green at generation 2, the internal ones still on blue
// at generation 1, and net-contour's endpoint probe child mid--ep with its
// four proxies). Contour serves both as net-contour left them; then hitless
// starts with the same class. No request may fail; every host is taken
// over in place (the same HTTPProxy objects, with hitless's labels), the
// child is deleted only once its parent is served by hitless, its reserved
// hosts are never served by hitless, and hitless then rolls both on as its
// own.
func TestMigrateFromNetContour(t *testing.T) {
	dir := recordedPeer(t)
	ctx, c, ns := setup(t, "mig")
	// Nothing may write over the replay before the load runs on it.
	controller(t, "stop")
	t.Cleanup(func() { _ = exec.Command("../../hack/controller.sh", "start").Run() })
	for _, b := range []string{"blue", "green", "cyan"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}

	rest := loadRecorded(t, filepath.Join(dir, "at-rest.yaml"), renamer(ns, "rest"))
	midAtRest := loadRecorded(t, filepath.Join(dir, "at-rest.yaml"), renamer(ns, "mid"))
	mid := loadRecorded(t, filepath.Join(dir, "mid-rollout.yaml"), renamer(ns, "mid"))
	replay(ctx, t, c, rest)
	replay(ctx, t, c, midAtRest)
	replay(ctx, t, c, mid)
	// The serving proxies net-contour left, by name: hitless must keep
	// each object (its UID) and serve its host through it.
	left := map[string]string{}
	for _, p := range append(append([]*contourv1.HTTPProxy{}, rest.proxies...), mid.proxies...) {
		got, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, probe := got.Annotations[resources.NetContourEndpointsProbe]; !probe {
			left[got.Name] = string(got.UID)
		}
	}
	if ing, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "mid", metav1.GetOptions{}); err != nil || ing.Generation != 2 {
		t.Fatalf("mid should be at generation 2 as net-contour's rollout left it: %v", err)
	}
	child := "mid--ep"
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, child, metav1.GetOptions{}); err != nil {
		t.Fatalf("the replay wrote no endpoint probe child %s: %v", child, err)
	}

	var targets []harness.Target
	for _, name := range []string{"rest", "mid"} {
		targets = append(targets, c.MustFleetTargets(ctx, t, external, name+"."+ns+".example.com")...)
		for _, h := range []string{name + "." + ns, name + "." + ns + ".svc", name + "." + ns + ".svc.cluster.local"} {
			targets = append(targets, c.MustFleetTargets(ctx, t, internal, h)...)
		}
	}
	servedEverywhere(ctx, t, targets)
	load := &harness.Load{Targets: targets, RPS: envInt("FAULT_RPS", 100), BackendOf: recordedBackend}
	load.Allow("blue", "green")
	stopLoad := load.Start(ctx)
	time.Sleep(2 * time.Second)
	t.Logf("Contour serves net-contour's %d serving and %d endpoint probe proxies to %d targets",
		len(left), len(rest.proxies)+len(mid.proxies)-len(left), len(targets))

	start := time.Now()
	controller(t, "start")
	// Until both are taken over: the child must still exist whenever its
	// parent is not served by hitless alone.
	var childGone time.Duration
	var last string
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, child, metav1.GetOptions{})
		gone := apierrs.IsNotFound(err)
		midDone, midLast := takeoverState(ctx, c, ns, "mid")
		if gone && childGone == 0 {
			childGone = time.Since(start)
			if !midDone {
				return false, fmt.Errorf("net-contour's endpoint probe %s was deleted before hitless served its parent (%s)", child, midLast)
			}
		}
		restDone, restLast := takeoverState(ctx, c, ns, "rest")
		last = fmt.Sprintf("rest: %s; mid: %s; %s gone: %v", restLast, midLast, child, gone)
		return restDone && midDone && gone, nil
	}); err != nil {
		stopLoad()
		reportFault(t, "migrate-from-net-contour", load.Summarize(), time.Since(start))
		t.Fatalf("not taken over by hitless: %v (%s)", err, last)
	}
	converge := time.Since(start)
	t.Logf("taken over by hitless %v after its start; %s deleted %v after it", converge.Round(time.Millisecond), child, childGone.Round(time.Millisecond))

	list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, p := range list.Items {
		if uid, ok := left[p.Name]; ok && uid == string(p.UID) && resources.IsRole(&p, resources.RoleServing) {
			kept++
		}
		if p.Labels[resources.LabelRole] != "" && strings.HasSuffix(p.Spec.VirtualHost.Fqdn, ".net-contour.invalid") {
			t.Errorf("hitless wrote %s for %s, a host net-contour reserved for its endpoint probe", p.Name, p.Spec.VirtualHost.Fqdn)
		}
	}
	if kept != len(left) {
		t.Errorf("%d of net-contour's %d serving proxies serve on as the same object with hitless's role: hitless did not take every host over in place", kept, len(left))
	}
	t.Logf("%d of net-contour's %d serving proxies serve on as the same objects, hitless's", kept, len(left))
	// The child's proxies go with it (owner references, the garbage collector).
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range l.Items {
			if _, probe := p.Annotations[resources.NetContourEndpointsProbe]; probe {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Errorf("net-contour's endpoint probe proxies left behind after %s went: %v", child, err)
	}

	// hitless now rolls both as its own, to the fresh backend cyan, the
	// KIngresses' shape (three cluster-local hosts, Who header) kept.
	load.Allow("blue", "green", "cyan")
	for _, name := range []string{"rest", "mid"} {
		if err := c.Update(ctx, ns, name, func(ing *v1alpha1.Ingress) {
			for _, r := range ing.Spec.Rules {
				for _, p := range r.HTTP.Paths {
					for i := range p.Splits {
						p.Splits[i].ServiceName = "cyan"
						p.Splits[i].AppendHeaders = map[string]string{"Who": "cyan"}
					}
				}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"rest", "mid"} {
		if _, err := c.WaitReady(ctx, ns, name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// As Knative does once the route is Ready: the old revisions go.
	load.Allow("cyan")
	for _, b := range []string{"blue", "green"} {
		if err := c.DeleteBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	waitWarmReleased(ctx, t, c, ns)
	time.Sleep(2 * time.Second)
	stopLoad()

	list, err = c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
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

// netContourLookup is how each label net-contour keeps on a serving proxy
// follows from the KIngress and the proxy: net-contour lists proxies by
// parent, domain hash and class and updates the first match in place, and
// skips its endpoint probe when the generation label is the KIngress's
// generation (TestNetContourFindsServingProxies in pkg/resources replays
// those selectors on the builders' proxies).
var netContourLookup = map[string]func(name string, generation int64, p *contourv1.HTTPProxy) string{
	"contour.networking.knative.dev/parent":     func(name string, _ int64, _ *contourv1.HTTPProxy) string { return name },
	"contour.networking.knative.dev/generation": func(_ string, gen int64, _ *contourv1.HTTPProxy) string { return strconv.FormatInt(gen, 10) },
	domainHashLabel:                   func(_ string, _ int64, p *contourv1.HTTPProxy) string { return hostHash(p.Spec.VirtualHost.Fqdn) },
	"projectcontour.io/ingress.class": func(_ string, _ int64, p *contourv1.HTTPProxy) string { return resources.ProxyClass(p) },
}

// TestMigrateBackToNetContour checks the way back the README describes
// (stop hitless, start net-contour, delete hitless's warm proxies) against
// took-over.yaml, what net-contour c48dabab left five seconds after it was
// started where hitless had served ten rollouts: it kept hitless's serving
// proxy, the same object under hitless's name, and wrote its own labels on
// it. Those labels are taken from the recording as the keys net-contour
// finds a host's proxy by, and checked on it (each follows from the
// KIngress and the proxy as netContourLookup says); then hitless rolls a
// KIngress of the same shape to a fresh backend on the stack, and the
// serving proxy it leaves must carry every one of them, with the values
// net-contour would look for, and be the only proxy of the namespace they
// select, so that net-contour updates that object in place and skips its
// endpoint probe. It is an e2e test, not a unit test of the builders,
// because what counts is what the running controller leaves after a real
// rollout (warm proxies included), not what one builder returns.
func TestMigrateBackToNetContour(t *testing.T) {
	dir := recordedPeer(t)
	rec := loadRecorded(t, filepath.Join(dir, "took-over.yaml"), func(s string) string { return s })
	if len(rec.proxies) != 1 || len(rec.ingresses) != 1 {
		t.Fatalf("took-over.yaml holds %d proxies and %d KIngresses, want one of each", len(rec.proxies), len(rec.ingresses))
	}
	recProxy, recIng := rec.proxies[0], rec.ingresses[0]
	if ref := metav1.GetControllerOf(recProxy); ref == nil || ref.Kind != "Ingress" || ref.Name != recIng.Name {
		t.Fatalf("recorded proxy %s is not controlled by KIngress %s", recProxy.Name, recIng.Name)
	}
	ownName := recIng.Name + "-" + resources.ProxyClass(recProxy) + "-" + recProxy.Spec.VirtualHost.Fqdn
	if recProxy.Name == ownName {
		t.Fatalf("recorded proxy has net-contour's own name %s: the recording is not of a proxy hitless wrote", ownName)
	}
	// Recorded Ready at the generation net-contour labelled.
	recGen := recIng.Status.ObservedGeneration
	keys := make([]string, 0, len(recProxy.Labels))
	for k, v := range recProxy.Labels {
		rel, ok := netContourLookup[k]
		if !ok {
			t.Fatalf("net-contour labelled the proxy it took over with %s=%s, which this test does not know how to derive", k, v)
		}
		if want := rel(recIng.Name, recGen, recProxy); v != want {
			t.Fatalf("recorded %s=%s, but it follows as %s: the test's model of net-contour's labels is wrong", k, v, want)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for k := range netContourLookup {
		if _, ok := recProxy.Labels[k]; !ok {
			t.Fatalf("net-contour left no %s on the proxy it took over: the test's model of its labels is wrong", k)
		}
	}

	ctx, c, ns := setup(t, "back")
	for _, b := range []string{"b1", "b2"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	host := recIng.Name + "." + ns + ".example.com"
	rule := func(b string) harness.Rule {
		return harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP, Splits: []harness.Split{{Backend: b, Percent: 100}}}
	}
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, harness.KIngress(ns, recIng.Name, rule("b1")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, recIng.Name, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Update(ctx, ns, recIng.Name, func(ing *v1alpha1.Ingress) { harness.SetRules(ing, rule("b2")) }); err != nil {
		t.Fatal(err)
	}
	ing, err := c.WaitReady(ctx, ns, recIng.Name, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	list, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var serving *contourv1.HTTPProxy
	for i, p := range list.Items {
		if resources.IsRole(&p, resources.RoleServing) && p.Spec.VirtualHost != nil && p.Spec.VirtualHost.Fqdn == host {
			serving = &list.Items[i]
		}
	}
	if serving == nil {
		t.Fatalf("hitless left no serving proxy of %s", host)
	}
	want := labels.Set{}
	for _, k := range keys {
		want[k] = netContourLookup[k](ing.Name, ing.Generation, serving)
	}
	selector := labels.SelectorFromSet(want)
	var found []string
	for _, p := range list.Items {
		if selector.Matches(labels.Set(p.Labels)) {
			found = append(found, p.Name)
		}
	}
	if len(found) != 1 || found[0] != serving.Name {
		t.Errorf("net-contour's lookup %s finds %v among %d proxies, want only hitless's serving proxy %s (labels %v)",
			selector, found, len(list.Items), serving.Name, serving.Labels)
	}
	t.Logf("after a rollout by hitless, net-contour's lookup %s (keys from took-over.yaml) finds exactly %s of %d proxies",
		selector, serving.Name, len(list.Items))
}
