//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

// TestFuzzSpecsThroughContourAndEnvoy writes a few hundred random KIngress
// specs, a share of them made of what Contour or Envoy refuse or misread
// (header names with colons, spaces or nothing; values with newlines or
// Envoy's %VARIABLES%; dot segments, doubled slashes and bad escapes in
// paths; weights out of range; rewrite hosts with spaces; unknown
// httpOptions), and holds hitless to its promise for each: a spec it
// refuses is refused before anything is written (NetworkConfigured=False),
// and a spec it accepts is one Contour calls valid and every Envoy pod
// takes in (Ready, and no xDS update_rejected on any pod). A spec accepted
// and then refused downstream would be a host taken down, or a fleet whose
// route configuration no longer changes.
//
// FUZZ_SPECS (default 200) and FUZZ_SEED (a number, or random; by default
// a fixed one) choose the run; the seed is logged so a failure can be
// replayed.
func TestFuzzSpecsThroughContourAndEnvoy(t *testing.T) {
	ctx, c, ns := setup(t, "fuzz")
	if err := c.CreateBackend(ctx, ns, "fuzz"); err != nil {
		t.Fatal(err)
	}
	n := envInt("FUZZ_SPECS", 200)
	// make test draws the same specs every run, so that its verdict is
	// the code's, not the draw's; FUZZ_SEED=random explores.
	seed := uint64(20261207)
	switch v := os.Getenv("FUZZ_SEED"); v {
	case "":
	case "random":
		seed = uint64(time.Now().UnixNano())
	default:
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FUZZ_SEED=%q: want a number or random", v)
		}
		seed = s
	}
	t.Logf("FUZZ_SEED=%d FUZZ_SPECS=%d", seed, n)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	pods := map[string][]string{external: c.EnvoyPods(ctx, external), internal: c.EnvoyPods(ctx, internal)}
	rejectedBefore := map[string]float64{}
	for _, ips := range pods {
		for _, ip := range ips {
			rejectedBefore[ip] = updateRejected(ip)
		}
	}

	type verdict struct {
		name, outcome, detail string
	}
	var (
		mu       sync.Mutex
		verdicts []verdict
		specs    = map[string]v1alpha1.IngressSpec{}
	)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		ing := harness.KIngress(ns, fmt.Sprintf("f%d", i))
		ing.Spec = fuzzSpec(rng, ns, i)
		specs[ing.Name] = ing.Spec
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			outcome, detail := fuzzVerdict(ctx, c, ing)
			mu.Lock()
			verdicts = append(verdicts, verdict{ing.Name, outcome, detail})
			mu.Unlock()
		}()
	}
	wg.Wait()

	counts, reasons := map[string]int{}, map[string]int{}
	for _, v := range verdicts {
		counts[v.outcome]++
		switch v.outcome {
		case "ready":
		case "refused":
			reasons[v.detail]++
		default:
			spec, _ := json.Marshal(specs[v.name])
			t.Errorf("KIngress %s was accepted and then %s: %s\nspec: %s", v.name, v.outcome, v.detail, spec)
		}
	}
	t.Logf("%d specs: %d refused by hitless before anything was written, %d accepted and Ready on every Envoy pod, %d neither",
		n, counts["refused"], counts["ready"], n-counts["refused"]-counts["ready"])
	t.Logf("refusals by reason: %v", reasons)
	if counts["ready"] == 0 || counts["refused"] == 0 {
		t.Errorf("the run tried only one side (%d accepted, %d refused): the pools no longer reach both", counts["ready"], counts["refused"])
	}
	for fleet, ips := range pods {
		for _, ip := range ips {
			if after := updateRejected(ip); after != rejectedBefore[ip] {
				t.Errorf("Envoy pod %s of %s rejected %v xDS updates while the specs were applied", ip, fleet, after-rejectedBefore[ip])
			}
		}
	}
}

// fuzzVerdict creates ing and waits for its outcome: "refused" (hitless's
// condition, nothing written), "ready", "invalid" (Contour refused a
// proxy), or "stuck".
func fuzzVerdict(ctx context.Context, c *harness.Clients, ing *v1alpha1.Ingress) (string, string) {
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ing.Namespace).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		// The API server's own validation refused it: nothing written.
		return "refused", "API server"
	}
	var last string
	got, err := c.WaitFor(ctx, ing.Namespace, ing.Name, time.Minute, "a verdict", func(i *v1alpha1.Ingress) bool {
		if i.Status.ObservedGeneration != i.Generation {
			return false
		}
		nc := i.Status.GetCondition(v1alpha1.IngressConditionNetworkConfigured)
		lb := i.Status.GetCondition(v1alpha1.IngressConditionLoadBalancerReady)
		if lb != nil {
			last = string(lb.Status) + " " + lb.Reason + ": " + lb.Message
		}
		return i.IsReady() || (nc != nil && nc.IsFalse()) || (lb != nil && lb.IsFalse())
	})
	if err != nil {
		return "stuck", last
	}
	if got.IsReady() {
		return "ready", ""
	}
	if nc := got.Status.GetCondition(v1alpha1.IngressConditionNetworkConfigured); nc != nil && nc.IsFalse() {
		proxies, err := c.Contour.ProjectcontourV1().HTTPProxies(ing.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, p := range proxies.Items {
				for _, ref := range p.OwnerReferences {
					if ref.UID == got.UID {
						return "written though refused", p.Name
					}
				}
			}
		}
		return "refused", nc.Reason
	}
	lb := got.Status.GetCondition(v1alpha1.IngressConditionLoadBalancerReady)
	return "invalid", lb.Reason + ": " + lb.Message
}

// updateRejected sums every xDS update_rejected counter of an Envoy pod
// (listeners, clusters, routes, secrets).
func updateRejected(ip string) float64 {
	resp, err := http.Get("http://" + ip + ":8002/stats?filter=update_rejected")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		_, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			sum += f
		}
	}
	return sum
}

// The pools a spec is drawn from: the good ones hold what Serving writes
// and what a user may; the bad ones what a careless user, or an attacker,
// might write instead.
var (
	goodHeaderNames = []string{"X-Fuzz", "Knative-Serving-Revision", "Knative-Serving-Namespace", "K-Original-Host", "x-lower", "X-A1"}
	badHeaderNames  = []string{"", "X Space", "X:Colon", ":authority", "X_Under", "Host", "K-Network-Hash", "hitless-probe-token", "X-\u00e9", "X\tTab"}
	goodValues      = []string{"v", "hello world", "a,b;c=d", "100", "\u00e9t\u00e9", strings.Repeat("x", 300), "/path?q=1"}
	badValues       = []string{"", "a\nb", "a\rb", "%REQ(:path)%", "100%", "%%", "%CONTOUR_NAMESPACE%", "%HOSTNAME%", "nul\x00"}
	goodPaths       = []string{"", "/", "/a", "/a/b", "/~user", "/a_b-c.d", "/%2Fb", "/.well-known/acme-challenge/tok", "/v1/"}
	badPaths        = []string{"/%41b", "/a/../b", "/./a", "//a", "/a//b", "/%zz", "/with space", "/q?x=1", "/frag#x", "/\u00e9", "/a\\b"}
	goodRewrites    = []string{"", "", "inner.fuzz.svc.cluster.local", "www.example.com"}
	badRewrites     = []string{"bad host", "UPPER.example.com", "host:99999", "a..b", "-lead.example.com"}
	goodPercents    = [][]int{{100}, {0}, {50, 50}, {30, 70}, {0, 0}, {0, 100}}
	badPercents     = [][]int{{150, -50}, {30, 30}, {101}, {-1}, {60, 60}}
	goodOptions     = []v1alpha1.HTTPOption{"", v1alpha1.HTTPOptionEnabled, v1alpha1.HTTPOptionRedirected}
	badOptions      = []v1alpha1.HTTPOption{"Disabled", "enabled"}
)

// fuzzer draws one spec's values: from the good pools, except for the
// fields it was told to spoil.
type fuzzer struct {
	rng *rand.Rand
	// bad is how many draws are still to be spoiled; each draw spoils with
	// a chance that spreads them over the spec.
	bad int
}

func (f *fuzzer) spoil() bool {
	if f.bad > 0 && f.rng.IntN(4) == 0 {
		f.bad--
		return true
	}
	return false
}

func choose[T any](f *fuzzer, good, bad []T) T {
	if f.spoil() {
		return bad[f.rng.IntN(len(bad))]
	}
	return good[f.rng.IntN(len(good))]
}

// fuzzSpec draws the spec of KIngress i: hosts unique to it (so no two
// specs conflict), one or two rules, each path with random headers,
// matches, splits and rewrites. Half the specs are made of good values
// only; the others spoil one to three of them.
func fuzzSpec(rng *rand.Rand, ns string, i int) v1alpha1.IngressSpec {
	f := &fuzzer{rng: rng}
	if rng.IntN(2) == 0 {
		f.bad = 1 + rng.IntN(3)
	}
	spec := v1alpha1.IngressSpec{HTTPOption: choose(f, goodOptions, badOptions)}
	for r := 0; r < 1+rng.IntN(2); r++ {
		rule := v1alpha1.IngressRule{Visibility: v1alpha1.IngressVisibilityExternalIP, HTTP: &v1alpha1.HTTPIngressRuleValue{}}
		host := fmt.Sprintf("f%d-%d.%s.example.com", i, r, ns)
		if rng.IntN(4) == 0 {
			rule.Visibility = v1alpha1.IngressVisibilityClusterLocal
			host = fmt.Sprintf("f%d-%d.%s.svc.cluster.local", i, r, ns)
		}
		rule.Hosts = []string{choose(f, []string{host}, []string{
			fmt.Sprintf("F%d-%d.%s.Example.com", i, r, ns), fmt.Sprintf("f%d_%d.%s.example.com", i, r, ns),
			fmt.Sprintf("f%d-%d.other-ns.svc.cluster.local", i, r)})}
		for p := 0; p < 1+rng.IntN(3); p++ {
			path := v1alpha1.HTTPIngressPath{Path: choose(f, goodPaths, badPaths), RewriteHost: choose(f, goodRewrites, badRewrites)}
			if rng.IntN(2) == 0 {
				path.AppendHeaders = map[string]string{choose(f, goodHeaderNames, badHeaderNames): choose(f, goodValues, badValues)}
			}
			if rng.IntN(3) == 0 {
				path.Headers = map[string]v1alpha1.HeaderMatch{choose(f, goodHeaderNames, badHeaderNames): {Exact: choose(f, goodValues, badValues)}}
			}
			for _, pct := range choose(f, goodPercents, badPercents) {
				split := v1alpha1.IngressBackendSplit{
					IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "fuzz", ServicePort: intstr.FromInt(80)},
					Percent:        pct,
				}
				if rng.IntN(3) == 0 {
					split.AppendHeaders = map[string]string{choose(f, goodHeaderNames, badHeaderNames): choose(f, goodValues, badValues)}
				}
				path.Splits = append(path.Splits, split)
			}
			rule.HTTP.Paths = append(rule.HTTP.Paths, path)
		}
		spec.Rules = append(spec.Rules, rule)
	}
	return spec
}
