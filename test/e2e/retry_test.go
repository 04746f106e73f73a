//go:build e2e

package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/test/harness"
)

// resetOnce is a backend that cuts the connection under the first attempt
// of every request (Envoy keeps a request's X-Request-Id across its
// retries) and answers the second, as a pod going away mid-request does to
// the request it held. Knative's probes are answered at once, as the
// queue-proxy answers them: a probe is never retried (see makeRoutes).
type resetOnce struct {
	seen            sync.Map
	resets, answers atomic.Int64
}

func (b *resetOnce) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(header.ProbeKey) == header.ProbeValue {
		w.Header().Set(header.HashKey, r.Header.Get(header.HashKey))
		return
	}
	if _, again := b.seen.LoadOrStore(r.Header.Get("X-Request-Id"), true); !again {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // a reset, not an orderly close
			}
			conn.Close()
			b.resets.Add(1)
		}
		return
	}
	b.answers.Add(1)
	// The shape of the networking runtime image's answer (harness.XBackend).
	body := map[string]interface{}{"request": map[string]interface{}{"headers": r.Header}}
	_ = json.NewEncoder(w).Encode(body)
}

// TestRetryPolicy: every request a backend resets once is answered through
// the default retry policy, as net-contour's routes answer it, and counted
// in Envoy's upstream_rq_retry; with config-contour's retry-policy "none"
// the same requests fail, and Envoy retries none of them.
func TestRetryPolicy(t *testing.T) {
	ctx, c, ns := setup(t, "retry")
	l := listenOnBridge(t, c)
	backend := &resetOnce{}
	srv := &http.Server{Handler: backend, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Close() })
	createHostService(ctx, t, c, ns, "flaky", "http", 80, l)

	host := "retry." + ns + ".example.com"
	ing := harness.KIngress(ns, "retry", harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "flaky", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "retry", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	targets := c.MustFleetTargets(ctx, t, external, host)
	burst := func() (harness.Summary, float64) {
		t.Helper()
		retries := c.WatchRetries(ctx, external, ns)
		load := &harness.Load{Targets: targets, RPS: 50 * len(targets)}
		load.Allow("flaky")
		stop := load.Start(ctx)
		time.Sleep(2 * time.Second)
		stop()
		return load.Summarize(), retries.Stop()
	}

	s, retries := burst()
	t.Logf("default retry policy: %s; Envoy retried %.0f; backend reset %d, answered %d", s, retries, backend.resets.Load(), backend.answers.Load())
	if s.Requests == 0 || s.Failed() != 0 {
		t.Errorf("with the default retry policy %d of %d requests failed: %v", s.Failed(), s.Requests, s.Failures)
	}
	if retries < float64(s.Requests) {
		t.Errorf("Envoy counted %.0f retries for %d requests each reset once", retries, s.Requests)
	}

	// Turned off: the proxies lose the policy, and each first attempt's
	// reset reaches the client. The probe routes' hash is that of what the
	// proxies serve, so the change is a new probe round: once the KIngress
	// is Ready again, every Envoy pod serves the routes without retries.
	changed := metav1.Now().Rfc3339Copy() // conditions carry whole seconds
	changeConfigContour(ctx, t, c, func(data map[string]string) { data[config.RetryPolicyKey] = "none" })
	if _, err := c.WaitFor(ctx, ns, "retry", time.Minute, "Ready again without retries", func(ing *v1alpha1.Ingress) bool {
		cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
		return ing.IsReady() && !cond.LastTransitionTime.Inner.Before(&changed)
	}); err != nil {
		t.Fatal(err)
	}
	s, retries = burst()
	t.Logf("retry-policy none: %s; Envoy retried %.0f", s, retries)
	if s.Requests == 0 || s.ByCode[503] != s.Requests {
		t.Errorf("with retry-policy none %d of %d requests were not Envoy's 503 for a reset: %v", s.Requests-s.ByCode[503], s.Requests, s.Failures)
	}
	if retries != 0 {
		t.Errorf("with retry-policy none Envoy retried %.0f requests", retries)
	}
}
