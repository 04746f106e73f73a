package resources

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// FuzzMakeServing feeds the builders arbitrary names, hosts, paths,
// headers, splits and options: they must never panic, must fail only with
// bad-input errors, and every proxy they make must have a valid name.
func FuzzMakeServing(f *testing.F) {
	f.Add("hello", "hello.example.com", "/", "X-Tag", "a", "blue", 100, uint8(0), true)
	f.Add("a", "a.ns.svc.cluster.local", "", "", "", "b", 0, uint8(3), false)
	f.Add("x.y", "*.example.com", "/api/v1", "K-Network-Hash", "override", "svc", 50, uint8(7), true)
	f.Fuzz(func(t *testing.T, name, host, path, hname, hval, service string, percent int, flags uint8, clusterLocal bool) {
		if len(name) == 0 || len(name) > 253 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return // the API server refuses such a KIngress
		}
		vis := netv1alpha1.IngressVisibilityExternalIP
		if clusterLocal {
			vis = netv1alpha1.IngressVisibilityClusterLocal
		}
		split := netv1alpha1.IngressBackendSplit{
			IngressBackend: netv1alpha1.IngressBackend{ServiceNamespace: ns, ServiceName: service, ServicePort: intstr.FromInt(80)},
			Percent:        percent,
		}
		p := netv1alpha1.HTTPIngressPath{Path: path, Splits: []netv1alpha1.IngressBackendSplit{split, split}}
		if hname != "" {
			p.Headers = map[string]netv1alpha1.HeaderMatch{hname: {Exact: hval}}
			p.AppendHeaders = map[string]string{hname: hval}
		}
		if flags&1 != 0 {
			p.RewriteHost = host
		}
		ing := kingress(func(ing *netv1alpha1.Ingress) {
			ing.Name = name
			ing.Spec.Rules = []netv1alpha1.IngressRule{{Hosts: []string{host, host + ".other"}, Visibility: vis,
				HTTP: &netv1alpha1.HTTPIngressRuleValue{Paths: []netv1alpha1.HTTPIngressPath{p, p}}}}
			if flags&2 != 0 {
				ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{host}, SecretName: service}}
			}
			if flags&4 != 0 {
				ing.Spec.HTTPOption = netv1alpha1.HTTPOptionRedirected
			}
		})
		s := svc(service)
		s.Spec.Ports = []corev1.ServicePort{{Name: hname, Port: 80}}
		got, err := MakeServing(bg(), ing, resolverOf(s))
		if err != nil {
			var se *SpecError
			var be *BackendError
			if !errors.As(err, &se) && !errors.As(err, &be) {
				t.Fatalf("MakeServing() = %v, not a bad-input error", err)
			}
			return
		}
		for _, px := range got.Proxies {
			if len(px.Name) > 63 || len(validation.IsDNS1123Subdomain(px.Name)) > 0 {
				t.Fatalf("invalid proxy name %q", px.Name)
			}
			for _, v := range px.Labels {
				if len(validation.IsValidLabelValue(v)) > 0 {
					t.Fatalf("invalid label value %q", v)
				}
			}
		}
		warm, err := MakeWarm(bg(), ing, got.Backends, got.Backends)
		if err != nil {
			t.Fatalf("MakeWarm() = %v", err)
		}
		for _, px := range warm.Proxies {
			if len(px.Name) > 63 || len(validation.IsDNS1123Subdomain(px.Name)) > 0 {
				t.Fatalf("invalid warm proxy name %q", px.Name)
			}
		}
	})
}
