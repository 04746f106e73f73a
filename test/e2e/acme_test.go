//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// solver stands in for cert-manager's HTTP-01 solver: it answers its one
// token with the key authorization and 404 to everything else, Knative's
// probes included (it never echoes K-Network-Hash).
type solver struct {
	token, key string
	probes     atomic.Int64
}

func (s *solver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == resources.ChallengePathPrefix+"/"+s.token {
		_, _ = io.WriteString(w, s.key)
		return
	}
	if r.Header.Get("K-Network-Probe") != "" {
		s.probes.Add(1)
	}
	http.NotFound(w, r)
}

// TestACMEChallengePath: Serving's auto-TLS puts the path of a pending
// HTTP-01 challenge in front of a Ready KIngress's paths, split to the
// solver. The KIngress is Ready again without the solver ever confirming a
// probe, the token is served on every Envoy pod, and the main route drops
// nothing under load while the challenge path comes and goes.
func TestACMEChallengePath(t *testing.T) {
	ctx, c, ns := setup(t, "acme")
	if err := c.CreateBackend(ctx, ns, "blue"); err != nil {
		t.Fatal(err)
	}
	sv := &solver{token: "ZmFrZS10b2tlbg", key: "ZmFrZS10b2tlbg.thumbprint"}
	l := listenOnBridge(t, c)
	srv := &http.Server{Handler: sv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	createHostService(ctx, t, c, ns, "cm-acme-http-solver", "http", 8089, l)

	host := "acme." + ns + ".example.com"
	ing := harness.KIngress(ns, "acme", harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "blue", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "acme", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	targets := c.MustFleetTargets(ctx, t, external, host)
	rps := envInt("ACME_RPS", 200)
	load, stopLoad := startLoadOn(ctx, rps, targets, "blue")
	time.Sleep(2 * time.Second)

	start := time.Now()
	if err := c.Update(ctx, ns, "acme", func(ing *v1alpha1.Ingress) {
		p := &ing.Spec.Rules[0].HTTP.Paths
		*p = append([]v1alpha1.HTTPIngressPath{{
			Path: resources.ChallengePathPrefix + "/" + sv.token,
			Splits: []v1alpha1.IngressBackendSplit{{
				IngressBackend: v1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: "cm-acme-http-solver", ServicePort: intstr.FromInt(8089)},
				Percent:        100,
			}},
		}}, *p...)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "acme", time.Minute); err != nil {
		t.Fatalf("the challenge path kept the KIngress from Ready: %v", err)
	}
	t.Logf("challenge path added: Ready in %v", time.Since(start).Round(time.Millisecond))

	// The ACME server asks any Envoy pod; each must answer the token.
	client := &http.Client{Timeout: 2 * time.Second}
	for _, tg := range targets {
		var last string
		tries := 0
		deadline := time.Now().Add(10 * time.Second)
		for {
			tries++
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+tg.Addr+resources.ChallengePathPrefix+"/"+sv.token, nil)
			req.Host = host
			resp, err := client.Do(req)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK && string(body) == sv.key {
					break
				}
				last = resp.Status + " " + string(body)
			} else {
				last = err.Error()
			}
			if time.Now().After(deadline) {
				t.Fatalf("Envoy pod %s does not serve the challenge token: %s", tg.Addr, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("Envoy pod %s serves the challenge token (%d tries after Ready)", tg.Addr, tries)
	}

	// Issued: Serving takes the path away again.
	if err := c.Update(ctx, ns, "acme", func(ing *v1alpha1.Ingress) {
		ing.Spec.Rules[0].HTTP.Paths = ing.Spec.Rules[0].HTTP.Paths[1:]
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "acme", time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	s := load.Summarize()
	t.Logf("main route under load: %s; Knative probes the solver saw: %d", s, sv.probes.Load())
	if s.Failed() != 0 || s.Requests < rps*3 {
		t.Errorf("%d of %d requests on the main route failed: %v", s.Failed(), s.Requests, s.Failures)
	}
}
