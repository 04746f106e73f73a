//go:build e2e

package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/test/harness"
)

// authServer is an Envoy ext_authz gRPC server that checks exactly what
// docs/install.md tells an operator's server to check: the user's own
// credential (here a bearer token), nothing about probes. It allows a
// request that carries the token and answers 401 to everything else, and
// counts the requests that reached it with Knative's probe header (a
// client's: hitless's own probes never reach it).
type authServer struct {
	authv3.UnimplementedAuthorizationServer
	token                  string
	allowed, denied, probe atomic.Int64
}

func (a *authServer) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	h := req.GetAttributes().GetRequest().GetHttp().GetHeaders()
	if h[strings.ToLower(header.ProbeKey)] != "" {
		a.probe.Add(1)
	}
	if h["authorization"] == "Bearer "+a.token {
		a.allowed.Add(1)
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}, nil
	}
	a.denied.Add(1)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.Unauthenticated)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Unauthorized},
			Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "WWW-Authenticate", Value: "Bearer"}}},
			Body:    "no token",
		}},
	}, nil
}

// startAuthServer serves the ext_authz server on the stack's bridge address
// (where the Envoy pods reach the host) and makes it a Contour
// ExtensionService named authz in ns: a Service without selector whose
// EndpointSlice names that address.
func startAuthServer(ctx context.Context, t *testing.T, c *harness.Clients, ns string) *authServer {
	t.Helper()
	l := listenOnBridge(t, c)
	srv := grpc.NewServer()
	a := &authServer{token: "let-me-in"}
	authv3.RegisterAuthorizationServer(srv, a)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	createHostService(ctx, t, c, ns, "authz", "grpc", 9000, l)
	ext := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "projectcontour.io/v1alpha1",
		"kind":       "ExtensionService",
		"metadata":   map[string]interface{}{"namespace": ns, "name": "authz"},
		"spec": map[string]interface{}{
			"protocol": "h2c",
			"services": []interface{}{map[string]interface{}{"name": "authz", "port": int64(9000)}},
		},
	}}
	dyn := dynamic.NewForConfigOrDie(c.Config)
	gvr := schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1alpha1", Resource: "extensionservices"}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestExtensionServiceAuthorization: a KIngress whose annotations name an
// ExtensionService is served through that authorization server on every
// Envoy pod, before, during and after a rollout to a fresh backend: 200
// with the token, 401 without, and never served over plain HTTP (Contour
// authorizes only its HTTPS listener). The rollout is confirmed without the
// server letting any probe through: hitless's probe routes skip it, and
// only the prober can use them (TestAttackProbeHeadersPastAuthorization).
func TestExtensionServiceAuthorization(t *testing.T) {
	ctx, c, ns := setup(t, "authz")
	a, host, to := servedBehindAuthorization(ctx, t, c, ns)

	pods := c.EnvoyPods(ctx, external)
	if len(pods) == 0 {
		t.Fatalf("fleet %s has no ready Envoy pod", external)
	}
	var withToken, noToken, plain []harness.Target
	for _, ip := range pods {
		withToken = append(withToken, harness.Target{Addr: ip + ":8443", Host: host, TLS: true, Header: map[string]string{"Authorization": "Bearer " + a.token}})
		noToken = append(noToken, harness.Target{Addr: ip + ":8443", Host: host, TLS: true})
		plain = append(plain, harness.Target{Addr: ip + ":8080", Host: host, Header: map[string]string{"Authorization": "Bearer " + a.token}})
	}
	// Every pod, before any load: a short burst of each kind.
	expect := func(when string) {
		t.Helper()
		for name, tg := range map[string][]harness.Target{"with the token": withToken, "without a token": noToken, "over plain HTTP": plain} {
			l := &harness.Load{Targets: tg, RPS: 50 * len(tg)}
			stop := l.Start(ctx)
			time.Sleep(time.Second)
			stop()
			s := l.Summarize()
			t.Logf("%s, %s: %s", when, name, s)
			switch name {
			case "with the token":
				if s.Failed() != 0 || s.ByCode[200] != s.Requests {
					t.Errorf("%s, %s: %d of %d not 200: %v", when, name, s.Requests-s.ByCode[200], s.Requests, s.Failures)
				}
			case "without a token":
				if s.ByCode[401] != s.Requests {
					t.Errorf("%s, %s: %d of %d not 401", when, name, s.Requests-s.ByCode[401], s.Requests)
				}
			default:
				if s.ByCode[301] != s.Requests {
					t.Errorf("%s, %s: %d of %d not redirected to HTTPS (301)", when, name, s.Requests-s.ByCode[301], s.Requests)
				}
			}
		}
	}
	expect("before the rollout")

	rps := envInt("AUTHZ_RPS", 100)
	good, stopGood := startLoadOn(ctx, rps, withToken, "blue")
	bad := &harness.Load{Targets: noToken, RPS: rps / 4}
	stopBad := bad.Start(ctx)
	insecure := &harness.Load{Targets: plain, RPS: rps / 4}
	stopInsecure := insecure.Start(ctx)
	time.Sleep(2 * time.Second)
	good.Allow("blue", "green")
	if err := c.Update(ctx, ns, "authz", to("green")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.WaitReady(ctx, ns, "authz", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("rollout to a fresh backend behind authorization Ready in %v", time.Since(start).Round(time.Millisecond))
	good.Allow("green")
	time.Sleep(2 * time.Second)
	stopGood()
	stopBad()
	stopInsecure()
	sg, sb, si := good.Summarize(), bad.Summarize(), insecure.Summarize()
	t.Logf("during the rollout, with the token: %s", sg)
	t.Logf("during the rollout, without a token: %s", sb)
	t.Logf("during the rollout, over plain HTTP: %s", si)
	if sg.Failed() != 0 || sg.Requests < rps*3 {
		t.Errorf("with the token: %d of %d failed or came from a backend not allowed then: %v", sg.Failed(), sg.Requests, sg.Failures)
	}
	if sb.ByCode[401] != sb.Requests || sb.Requests == 0 {
		t.Errorf("without a token: %d of %d not 401", sb.Requests-sb.ByCode[401], sb.Requests)
	}
	if si.ByCode[301] != si.Requests || si.Requests == 0 {
		t.Errorf("over plain HTTP: %d of %d not redirected", si.Requests-si.ByCode[301], si.Requests)
	}
	if n := a.probe.Load(); n != 0 {
		t.Errorf("%d requests with K-Network-Probe reached the authorization server: hitless's probes must skip it, and this test's clients send none", n)
	}
	expect("after the rollout")
	t.Logf("authorization server: %d allowed with the token, %d denied", a.allowed.Load(), a.denied.Load())
}

// servedBehindAuthorization serves the KIngress authz of ns, host
// authz.<ns>.example.com, from backend blue (green is there to roll out to)
// behind the test's ext_authz server, with TLS and httpOption Enabled
// (which asks for plain HTTP too; behind authorization it is refused), and
// waits until it is Ready. to(b) routes the host to backend b.
func servedBehindAuthorization(ctx context.Context, t *testing.T, c *harness.Clients, ns string) (*authServer, string, func(string) func(*v1alpha1.Ingress)) {
	t.Helper()
	for _, b := range []string{"blue", "green"} {
		if err := c.CreateBackend(ctx, ns, b); err != nil {
			t.Fatal(err)
		}
	}
	a := startAuthServer(ctx, t, c, ns)
	host := "authz." + ns + ".example.com"
	if err := c.CreateTLSSecret(ctx, ns, "cert", host); err != nil {
		t.Fatal(err)
	}
	to := func(backend string) func(*v1alpha1.Ingress) {
		return func(ing *v1alpha1.Ingress) {
			harness.SetRules(ing, harness.Rule{Host: host, Visibility: v1alpha1.IngressVisibilityExternalIP,
				Splits: []harness.Split{{Backend: backend, Percent: 100}}})
		}
	}
	ing := harness.KIngress(ns, "authz")
	to("blue")(ing)
	ing.Annotations[resources.AnnotationExtensionService] = "authz"
	ing.Annotations[resources.AnnotationExtensionServiceNamespace] = ns
	ing.Spec.TLS = []v1alpha1.IngressTLS{{Hosts: []string{host}, SecretName: "cert", SecretNamespace: ns}}
	ing.Spec.HTTPOption = v1alpha1.HTTPOptionEnabled
	if _, err := c.Net.NetworkingV1alpha1().Ingresses(ns).Create(ctx, ing, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReady(ctx, ns, "authz", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	return a, host, to
}
