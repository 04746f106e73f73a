//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"knative.dev/networking/pkg/apis/networking"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/certificates"
	netcfg "knative.dev/networking/pkg/config"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/test/harness"
)

// tlsBackend answers over TLS what the networking runtime image answers in
// the clear (harness.XBackend reads its echo of the request headers), and
// Knative's probes as the queue-proxy does; it counts the HTTP/2 requests.
type tlsBackend struct {
	h2 atomic.Int64
	// h2Only answers HTTP/1.x with 505, as a gRPC server fails it.
	h2Only bool
}

func (b *tlsBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 2 {
		b.h2.Add(1)
	} else if b.h2Only {
		w.WriteHeader(http.StatusHTTPVersionNotSupported)
		return
	}
	if r.Header.Get(header.ProbeKey) == header.ProbeValue {
		w.Header().Set(header.HashKey, r.Header.Get(header.HashKey))
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]interface{}{"request": map[string]interface{}{"headers": r.Header}})
}

// startTLSBackend serves b over TLS with cert on the bridge address, as the
// Service name of ns with the given port name (http: Contour's tls, http2:
// h2).
func startTLSBackend(ctx context.Context, t *testing.T, c *harness.Clients, ns, name, portName string, cert tls.Certificate) *tlsBackend {
	t.Helper()
	b := &tlsBackend{}
	l := listenOnBridge(t, c)
	srv := &http.Server{Handler: b, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { srv.Close() })
	createHostService(ctx, t, c, ns, name, portName, 80, l)
	return b
}

// TestSystemInternalTLS: with config-network's system-internal-tls enabled,
// Envoy reaches every backend over TLS (h2 for an HTTP/2 port) and accepts
// only a certificate of Serving's routing CA issued to the KIngress's
// namespace (kn-user-<ns>): 200 through every Envoy pod, a rollout to a
// fresh backend under load drops nothing, and a backend whose certificate
// names another namespace is never served nor confirmed.
func TestSystemInternalTLS(t *testing.T) {
	ctx, c, ns := setup(t, "itls")
	ca, err := harness.NewCA("hitless e2e routing CA")
	if err != nil {
		t.Fatal(err)
	}
	// Serving's routing CA, as the control plane's certificate reconciler
	// keeps it; the test's CA stands in for it, and whatever was there
	// comes back afterwards.
	secrets := c.Kube.CoreV1().Secrets(leaseNamespace)
	caSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: leaseNamespace, Name: netcfg.ServingRoutingCertName},
		Data: map[string][]byte{"ca.crt": ca.PEM}}
	if old, err := secrets.Get(ctx, caSecret.Name, metav1.GetOptions{}); err == nil {
		t.Cleanup(func() {
			cur, err := secrets.Get(context.Background(), old.Name, metav1.GetOptions{})
			if err == nil {
				cur.Data = old.Data
				_, err = secrets.Update(context.Background(), cur, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Errorf("restore Secret %s: %v", old.Name, err)
			}
		})
		cur := old.DeepCopy()
		cur.Data = caSecret.Data
		if _, err := secrets.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else if apierrs.IsNotFound(err) {
		if _, err := secrets.Create(ctx, caSecret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = secrets.Delete(context.Background(), caSecret.Name, metav1.DeleteOptions{}) })
	} else {
		t.Fatal(err)
	}

	good, err := ca.Issue(certificates.DataPlaneUserSAN(ns))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, err := ca.Issue(certificates.DataPlaneUserSAN("elsewhere"))
	if err != nil {
		t.Fatal(err)
	}
	startTLSBackend(ctx, t, c, ns, "blue", "http", good)
	green := startTLSBackend(ctx, t, c, ns, "green", "http2", good)
	startTLSBackend(ctx, t, c, ns, "stranger", "http", elsewhere)

	host := "itls." + ns + ".example.com"
	to := func(backend string) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
				Splits: []harness.Split{{Backend: backend, Percent: 100}}})
		}
	}
	// Served in the clear first: the backend answers TLS only, so Envoy's
	// plain requests fail; the KIngress is created, not waited on.
	ing := harness.KIngress(ns, "itls")
	to("blue")(ing)
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Encryption turned on for a KIngress already written: its route
	// moves to tls like any change of what is served, warm first.
	start := time.Now()
	changeConfigMap(ctx, t, c, netcfg.ConfigMapName, func(data map[string]string) { data["system-internal-tls"] = "enabled" })
	if err := waitProxies(ctx, c, ns, func(p *contourv1.HTTPProxy) bool {
		s := p.Spec.Routes[0].Services[0]
		return s.Protocol != nil && *s.Protocol == "tls" && s.UpstreamValidation != nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "itls", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("system-internal-tls enabled: served over tls and Ready %v later", time.Since(start).Round(time.Millisecond))

	targets := c.MustFleetTargets(ctx, t, external, host)
	rps := envInt("INTERNAL_TLS_RPS", 200)
	load, stopLoad := startLoadOn(ctx, rps, targets, "blue")
	time.Sleep(2 * time.Second)
	load.Allow("blue", "green")
	start = time.Now()
	if err := c.Update(ctx, ns, "itls", to("green")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "itls", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout to a fresh backend over h2 Ready in %v", time.Since(start).Round(time.Millisecond))
	load.Allow("green")
	time.Sleep(2 * time.Second)
	stopLoad()
	s := load.Summarize()
	t.Logf("over TLS through %d Envoy pods: %s; %d HTTP/2 requests reached green", len(targets), s, green.h2.Load())
	if s.Failed() != 0 || s.Requests < rps*3 {
		t.Errorf("%d of %d requests failed or came from a backend not allowed then: %v", s.Failed(), s.Requests, s.Failures)
	}
	if green.h2.Load() == 0 {
		t.Error("no request reached the http2 backend over HTTP/2 (h2)")
	}

	// A certificate for another namespace: Envoy refuses the handshake, so
	// the KIngress is never confirmed and nothing is served.
	strangerHost := "stranger." + ns + ".example.com"
	st := harness.KIngress(ns, "stranger", harness.Rule{Host: strangerHost, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "stranger", Percent: 100}}})
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, st, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.WaitFor(ctx, ns, "stranger", time.Minute, "waiting on a refused certificate", func(ing *v1alpha1.Ingress) bool {
		cond := ing.Status.GetCondition(v1alpha1.IngressConditionReady)
		return cond != nil && !cond.IsTrue() && strings.Contains(cond.Message, "503")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a backend certified for another namespace: %s", got.Status.GetCondition(v1alpha1.IngressConditionReady).Message)
	wrong := &harness.Load{Targets: c.MustFleetTargets(ctx, t, external, strangerHost), RPS: 50}
	stop := wrong.Start(ctx)
	time.Sleep(time.Second)
	stop()
	ws := wrong.Summarize()
	t.Logf("requests to it: %s", ws)
	if ws.Requests == 0 || ws.ByCode[503] != ws.Requests {
		t.Errorf("a backend with another namespace's certificate answered: %s", ws)
	}
	if got, _ := c.Net.NetworkingV1alpha1().Ingresses(ns).Get(ctx, "stranger", metav1.GetOptions{}); got.IsReady() {
		t.Error("the KIngress of a backend with another namespace's certificate went Ready")
	}

	// Serving's shape of an HTTP/2 (gRPC) revision under encryption: the
	// revision's Service has http2 (80) first and https (443) second, and
	// the KIngress names 443. The https port must be reached over h2: a
	// gRPC server refuses HTTP/1.1 (this backend answers it 505).
	grpcRev := &tlsBackend{h2Only: true}
	l := listenOnBridge(t, c)
	srv := &http.Server{Handler: grpcRev, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{good}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { srv.Close() })
	// Both ports to the TLS listener: under encryption only https is used.
	createHostServicePorts(ctx, t, c, ns, "grpc-rev", l,
		hostPort{networking.ServicePortNameH2C, networking.ServiceHTTPPort},
		hostPort{networking.ServicePortNameHTTPS, networking.ServiceHTTPSPort})
	revHost := "grpc-rev." + ns + ".example.com"
	rev := harness.KIngress(ns, "grpc-rev", harness.Rule{Host: revHost, Visibility: v1alpha1.IngressVisibilityExternalIP,
		Splits: []harness.Split{{Backend: "grpc-rev", Percent: 100}}})
	rev.Spec.Rules[0].HTTP.Paths[0].Splits[0].ServicePort = intstr.FromInt(networking.ServiceHTTPSPort)
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, rev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "grpc-rev", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	revLoad := &harness.Load{Targets: c.MustFleetTargets(ctx, t, external, revHost), RPS: 50}
	revLoad.Allow("grpc-rev")
	stopRev := revLoad.Start(ctx)
	time.Sleep(2 * time.Second)
	stopRev()
	rs := revLoad.Summarize()
	t.Logf("an HTTP/2 revision's https port, as Serving names it: %s; %d requests over HTTP/2", rs, grpcRev.h2.Load())
	if rs.Requests == 0 || rs.Failed() != 0 {
		t.Errorf("an HTTP/2 revision's https port: %d of %d failed (505: reached over HTTP/1.1): %v", rs.Failed(), rs.Requests, rs.Failures)
	}
}
