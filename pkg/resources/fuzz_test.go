package resources

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"
)

// FuzzMakeServing feeds the builders arbitrary names, hosts, paths,
// headers, splits and options: they must never panic, must fail only with
// bad-input errors, and every proxy they make must have a valid name and
// ask nothing of Contour or Envoy that ValidateSpec would refuse.
func FuzzMakeServing(f *testing.F) {
	f.Add("hello", "hello.example.com", "/", "X-Tag", "a", "blue", 100, uint8(0), true)
	f.Add("a", "a.ns.svc.cluster.local", "", "", "", "b", 0, uint8(3), false)
	f.Add("x.y", "*.example.com", "/api/v1", "K-Network-Hash", "override", "svc", 50, uint8(7), true)
	f.Add("bad", "bad.example.com", "/a//b?c", "X Bad:", "a\nb", "svc", 150, uint8(1), false)
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
			if err := writtenValid(px); err != nil {
				t.Fatalf("proxy %s: %v", px.Name, err)
			}
			for _, v := range px.Labels {
				if len(validation.IsValidLabelValue(v)) > 0 {
					t.Fatalf("invalid label value %q", v)
				}
			}
		}
		warm, err := MakeWarm(bg(), ing, got.Backends, got.Backends, nil)
		if err != nil {
			t.Fatalf("MakeWarm() = %v", err)
		}
		for _, px := range warm.Proxies {
			if len(px.Name) > 63 || len(validation.IsDNS1123Subdomain(px.Name)) > 0 {
				t.Fatalf("invalid warm proxy name %q", px.Name)
			}
			if err := writtenValid(px); err != nil {
				t.Fatalf("warm proxy %s: %v", px.Name, err)
			}
		}
	})
}

// writtenValid checks what a proxy asks of Contour and Envoy with the rules
// ValidateSpec applies to the KIngress: an accepted spec must never yield a
// route they refuse. The headers it sets itself (Host for rewriteHost,
// K-Network-Hash on probe routes) are checked as host and value.
func writtenValid(px *contourv1.HTTPProxy) error {
	for i, r := range px.Spec.Routes {
		field := fmt.Sprintf("spec.routes[%d]", i)
		matched := map[string]bool{}
		for _, c := range r.Conditions {
			if c.Header == nil {
				if err := validPrefix(field+".prefix", c.Prefix); err != nil || c.Prefix == "" {
					return fmt.Errorf("%s: prefix %q: %v", field, c.Prefix, err)
				}
				continue
			}
			name := http.CanonicalHeaderKey(c.Header.Name)
			if !isToken(c.Header.Name) || c.Header.Exact == "" || matched[name] {
				return fmt.Errorf("%s: header match %q=%q", field, c.Header.Name, c.Header.Exact)
			}
			matched[name] = true
		}
		policies := []*contourv1.HeadersPolicy{r.RequestHeadersPolicy, r.ResponseHeadersPolicy}
		for _, s := range r.Services {
			if s.Weight < 0 || s.Weight > 100 {
				return fmt.Errorf("%s: weight %d", field, s.Weight)
			}
			policies = append(policies, s.RequestHeadersPolicy)
		}
		for _, hp := range policies {
			if hp == nil {
				continue
			}
			set := map[string]bool{}
			for _, h := range hp.Set {
				name := http.CanonicalHeaderKey(h.Name)
				if set[name] {
					return fmt.Errorf("%s: header %q set twice", field, h.Name)
				}
				set[name] = true
				switch name {
				case "Host":
					if err := validRewriteHost(field, h.Value); err != nil {
						return err
					}
				case http.CanonicalHeaderKey(header.HashKey):
				default:
					if msg := setHeaderNameError(h.Name); msg != "" {
						return fmt.Errorf("%s: header %q: %s", field, h.Name, msg)
					}
				}
				if msg := setHeaderValueError(h.Value); msg != "" {
					return fmt.Errorf("%s: header %q: %s", field, h.Name, msg)
				}
			}
		}
	}
	return nil
}
