package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probekey"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// The modes side by side on one stack: hitless (its controller, the
// default) and floor (no controller: the serving HTTPProxies hitless would
// write for the same KIngresses, written directly, timed until every Envoy
// pod serves every host; what Contour and Envoy alone cost, the least any
// controller can take).
const (
	modeHitless = "hitless"
	modeFloor   = "floor"
)

// sh runs one of the stack's scripts (the benchmark runs from the
// checkout, hack/bench.sh), its output to stderr with the progress lines.
func sh(script string, args ...string) error {
	cmd := exec.Command(script, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %v: %w", script, args, err)
	}
	return nil
}

// inMode runs f with the stack's controllers set for mode: the floor runs
// with hitless stopped (nothing but Contour may write to the proxies it
// times), and hitless's replica is started again afterwards.
func inMode(mode string, f func()) {
	switch mode {
	case modeHitless:
		f()
		return
	case modeFloor:
	default:
		fail(fmt.Errorf("unknown mode %q (hitless, floor)", mode))
	}
	if err := sh("hack/controller.sh", "stop"); err != nil {
		fail(err)
	}
	defer func() {
		if err := sh("hack/controller.sh", "start"); err != nil {
			fail(err)
		}
	}()
	f()
}

// floorProxies is what hitless would serve for KIngress i: its serving
// HTTPProxies, built by the same code from the same KIngress (in memory
// only, so without the owner reference to it).
func floorProxies(ns string, i, backend int, svc *corev1.Service, key probekey.Key) ([]*contourv1.HTTPProxy, string, error) {
	ing := harness.KIngress(ns, kName(i), rulesFor(ns, i, backend)...)
	ctx := probekey.WithKey(config.ToContext(context.Background(), &config.Config{Contour: config.DefaultContour()}), key)
	s, err := resources.MakeServing(ctx, ing, func(_, _ string, port intstr.IntOrString) (resources.Backend, error) {
		return resources.ResolveFromService(svc, port)
	})
	if err != nil {
		return nil, "", err
	}
	for _, p := range s.Proxies {
		p.OwnerReferences = nil
	}
	return s.Proxies, s.Hash, nil
}

// servedByEveryPod waits until every Envoy pod of each proxy's fleet
// answers its host from a backend (a 200 on /), checking each (pod, host)
// until it does and then no more: the same requests a prober sends, with
// no controller behind them. It returns when the last one did, or when
// wait ran out, with the hosts some pod did not serve yet.
//
// With a token, it asks instead what hitless's prober asks, on the probe
// route the token opens: a 200 with the hash of the proxies (hashes, by
// host) proves a pod serves this version of them, not an earlier one.
func servedByEveryPod(ctx context.Context, c *harness.Clients, proxies []*contourv1.HTTPProxy, workers int, wait time.Duration,
	token string, hashes map[string]string) sets.Set[string] {
	type check struct{ addr, host string }
	fleets := map[string][]string{}
	var pending []check
	for _, p := range proxies {
		fleet := resources.ProxyClass(p)
		if _, ok := fleets[fleet]; !ok {
			fleets[fleet] = c.EnvoyPods(ctx, fleet)
		}
		for _, ip := range fleets[fleet] {
			pending = append(pending, check{addr: ip + ":8080", host: p.Spec.VirtualHost.Fqdn})
		}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	served := func(ck check) bool {
		path := "/"
		if token != "" {
			path = "/healthz"
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ck.addr+path, nil)
		if err != nil {
			return false
		}
		req.Host = ck.host
		if token != "" {
			req.Header.Set(header.ProbeKey, header.ProbeValue)
			req.Header.Set(header.HashKey, header.HashValueOverride)
			req.Header.Set(probekey.Header, token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && (token == "" || resp.Header.Get(probekey.HashHeader) == hashes[ck.host])
	}
	deadline := time.Now().Add(wait)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			left := sets.New[string]()
			for _, ck := range pending {
				left.Insert(ck.host)
			}
			return left
		}
		var mu sync.Mutex
		var still []check
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					k := int(next.Add(1)) - 1
					if k >= len(pending) {
						return
					}
					if !served(pending[k]) {
						mu.Lock()
						still = append(still, pending[k])
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		pending = still
		if len(pending) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// runFloor writes the serving proxies of n KIngresses directly and times
// them until every Envoy pod serves every host; then it switches roll of
// them at once to fresh backends (the serving proxies hitless would write
// for the same change, written over the old ones: a plain flip, no warm
// proxies) and times that until every pod answers with the new proxies'
// hash, the same confirmation hitless's prober waits for.
func runFloor(ctx context.Context, c *harness.Clients, ns string, n, roll, workers int, svc func(i int) *corev1.Service, wait time.Duration, stackDir string) result {
	key, err := probekey.New()
	if err != nil {
		fail(err)
	}
	var all []*contourv1.HTTPProxy
	per := make([][]*contourv1.HTTPProxy, n)
	for i := 0; i < n; i++ {
		ps, _, err := floorProxies(ns, i, i, svc(i), key)
		if err != nil {
			fail(fmt.Errorf("floor: the proxies of KIngress %d: %w", i, err))
		}
		per[i] = ps
		all = append(all, ps...)
	}
	procs0 := stackCPU()
	rb0 := contourRebuilds(stackDir)
	start := time.Now()
	parallel(n, workers, func(i int) error {
		for _, p := range per[i] {
			if _, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	created := time.Since(start)
	left := servedByEveryPod(ctx, c, all, workers, wait, "", nil)
	allServed := time.Since(start)
	served := n
	for _, ps := range per {
		for _, p := range ps {
			if left.Has(p.Spec.VirtualHost.Fqdn) {
				served--
				break
			}
		}
	}
	fmt.Fprintf(os.Stderr, "floor: %d HTTPProxies of %d KIngresses written in %v, those of %d served by every Envoy pod %v after the first write\n",
		len(all), n, created.Round(time.Millisecond), served, allServed.Round(time.Millisecond))
	cpuCreate := stackCPU().since(procs0).describe(allServed)
	r := result{n: n, allReady: allServed.Seconds(), readyN: served, roll: roll,
		rebuildsReady: rebuildsSince(contourRebuilds(stackDir), rb0)}

	if served == n && roll > 0 {
		// The same quiet spell as hitless's mode has between all Ready
		// and its rollouts (runSize's rest): Contour is still writing
		// the status of thousands of proxies when they are all served.
		time.Sleep(restBeforeRollouts)
		token, err := key.Token(ns)
		if err != nil {
			fail(err)
		}
		var flipped []*contourv1.HTTPProxy
		hashes := map[string]string{}
		next := make([][]*contourv1.HTTPProxy, roll)
		for i := 0; i < roll; i++ {
			ps, hash, err := floorProxies(ns, i, n+i, svc(n+i), key)
			if err != nil {
				fail(fmt.Errorf("floor: the switched proxies of KIngress %d: %w", i, err))
			}
			next[i] = ps
			for _, p := range ps {
				hashes[p.Spec.VirtualHost.Fqdn] = hash
			}
			flipped = append(flipped, ps...)
		}
		rbRoll0 := contourRebuilds(stackDir)
		rollStart := time.Now()
		parallel(roll, workers, func(i int) error {
			for _, p := range next[i] {
				cur, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Get(ctx, p.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				cur.Spec = p.Spec
				cur.Annotations = p.Annotations
				if _, err := c.Contour.ProjectcontourV1().HTTPProxies(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
		left := servedByEveryPod(ctx, c, flipped, workers, wait, token, hashes)
		r.rollouts = time.Since(rollStart).Seconds()
		r.rebuildsRoll = rebuildsSince(contourRebuilds(stackDir), rbRoll0)
		r.rolledN = roll
		for _, ps := range next {
			for _, p := range ps {
				if left.Has(p.Spec.VirtualHost.Fqdn) {
					r.rolledN--
					break
				}
			}
		}
		fmt.Fprintf(os.Stderr, "floor: %d switches written directly, %d served at their new hash by every Envoy pod %.1fs after the first write\n",
			roll, r.rolledN, r.rollouts)
	}
	fmt.Printf("\n%-42s %s\n", "measure (floor: no controller)", "value")
	fmt.Printf("%-42s %d\n", "KIngresses' worth of HTTPProxies", n)
	fmt.Printf("%-42s %d\n", "HTTPProxies written", len(all))
	fmt.Printf("%-42s %s\n", "all served by every Envoy pod (s)", r.allReadyCell())
	fmt.Printf("%-42s %s\n", fmt.Sprintf("%d switches served (s)", roll), r.rolloutsCell())
	fmt.Printf("%-42s %s\n", "CPU-s to all served by process (2 cores)", cpuCreate)
	fmt.Printf("%-42s %v\n", "Contour to all served, every replica", r.rebuildsReady)
	fmt.Printf("%-42s %v\n", fmt.Sprintf("Contour for the %d switches", roll), r.rebuildsRoll)
	fmt.Printf("scale: mode=floor kingresses=%d all_ready_s=%.1f rollout%d_s=%.1f\n", n, allServed.Seconds(), roll, r.rollouts)
	return r
}
