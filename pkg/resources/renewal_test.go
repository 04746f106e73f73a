package resources

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/pkg/apis"
	"knative.dev/pkg/kmeta"
)

// route is the Route that made the KIngress and its Knative Certificates in
// these rows; another Route owns nothing of the KIngress.
var (
	route      = &metav1.ObjectMeta{Name: "hello", Namespace: ns, UID: "route-uid"}
	otherRoute = &metav1.ObjectMeta{Name: "other", Namespace: ns, UID: "other-uid"}
)

func ownedBy(owner *metav1.ObjectMeta) []metav1.OwnerReference {
	return []metav1.OwnerReference{*kmeta.NewControllerRef(&kmetaRoute{owner})}
}

// kmetaRoute gives a Route's ObjectMeta the group and kind kmeta needs.
type kmetaRoute struct{ *metav1.ObjectMeta }

func (kmetaRoute) GetGroupVersionKind() schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Route"}
}

// kcert is a Knative Certificate of hello.example.com, as Serving makes it
// for the Route, in the given state.
func kcert(mods ...func(*netv1alpha1.Certificate)) *netv1alpha1.Certificate {
	c := &netv1alpha1.Certificate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "route-uid", OwnerReferences: ownedBy(route)},
		Spec:       netv1alpha1.CertificateSpec{DNSNames: []string{"hello.example.com"}, SecretName: "route-uid"},
	}
	for _, m := range mods {
		m(c)
	}
	return c
}

// withCondition sets a condition of the certificate's status.
func withCondition(typ apis.ConditionType, status corev1.ConditionStatus) func(*netv1alpha1.Certificate) {
	return func(c *netv1alpha1.Certificate) {
		c.Status.Conditions = append(c.Status.Conditions, apis.Condition{Type: typ, Status: status})
	}
}

var renewingNow = withCondition(ConditionRenewing, corev1.ConditionTrue)

func TestHoldRenewingTLS(t *testing.T) {
	owned := func(ing *netv1alpha1.Ingress) { ing.OwnerReferences = ownedBy(route) }
	rows := []struct {
		name     string
		ing      *netv1alpha1.Ingress
		certs    []*netv1alpha1.Certificate
		wantTLS  []netv1alpha1.IngressTLS
		wantHeld []string
	}{{
		name:     "a renewing certificate of the Route keeps its host's TLS that Serving left out",
		ing:      kingress(owned),
		certs:    []*netv1alpha1.Certificate{kcert(withCondition(netv1alpha1.CertificateConditionReady, corev1.ConditionFalse), renewingNow)},
		wantTLS:  []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "route-uid", SecretNamespace: ns}},
		wantHeld: []string{"hello.example.com"},
	}, {
		name:  "a ready certificate that is not renewing holds nothing: TLS left out is TLS turned off",
		ing:   kingress(owned),
		certs: []*netv1alpha1.Certificate{kcert(withCondition(netv1alpha1.CertificateConditionReady, corev1.ConditionTrue))},
	}, {
		name:  "Renewing False holds nothing",
		ing:   kingress(owned),
		certs: []*netv1alpha1.Certificate{kcert(withCondition(ConditionRenewing, corev1.ConditionFalse))},
	}, {
		name: "another Route's certificate is never served",
		ing:  kingress(owned),
		certs: []*netv1alpha1.Certificate{kcert(renewingNow, func(c *netv1alpha1.Certificate) {
			c.OwnerReferences = ownedBy(otherRoute)
		})},
	}, {
		name:  "a KIngress without a controller holds nothing",
		ing:   kingress(),
		certs: []*netv1alpha1.Certificate{kcert(renewingNow)},
	}, {
		name: "a certificate being deleted holds nothing",
		ing:  kingress(owned),
		certs: []*netv1alpha1.Certificate{kcert(renewingNow, func(c *netv1alpha1.Certificate) {
			c.DeletionTimestamp = &metav1.Time{}
		})},
	}, {
		name: "a host with TLS in the KIngress keeps the KIngress's",
		ing: kingress(owned, func(ing *netv1alpha1.Ingress) {
			ing.Spec.TLS = []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "new", SecretNamespace: ns}}
		}),
		certs:   []*netv1alpha1.Certificate{kcert(renewingNow)},
		wantTLS: []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "new", SecretNamespace: ns}},
	}, {
		name: "only the hosts the KIngress serves are held",
		ing:  kingress(owned),
		certs: []*netv1alpha1.Certificate{kcert(renewingNow, func(c *netv1alpha1.Certificate) {
			c.Spec.DNSNames = []string{"elsewhere.example.com", "hello.example.com"}
		})},
		wantTLS:  []netv1alpha1.IngressTLS{{Hosts: []string{"hello.example.com"}, SecretName: "route-uid", SecretNamespace: ns}},
		wantHeld: []string{"hello.example.com"},
	}}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			before := r.ing.DeepCopy()
			got, held := HoldRenewingTLS(r.ing, r.certs)
			if diff := cmp.Diff(r.wantTLS, got.Spec.TLS); diff != "" {
				t.Errorf("spec.tls (-want, +got):\n%s", diff)
			}
			if diff := cmp.Diff(r.wantHeld, held); diff != "" {
				t.Errorf("held hosts (-want, +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, r.ing); diff != "" {
				t.Errorf("the KIngress given was changed (-before, +after):\n%s", diff)
			}
		})
	}
}

// A held host is served like one with config-contour's default certificate:
// HTTPS with the held Secret, and plain HTTP as the KIngress's httpOption
// says (Enabled, what Serving writes unless told to redirect).
func TestHeldHostServesBothSchemes(t *testing.T) {
	ing := kingress(func(ing *netv1alpha1.Ingress) {
		ing.OwnerReferences = ownedBy(route)
		ing.Spec.HTTPOption = netv1alpha1.HTTPOptionEnabled
	})
	build, _ := HoldRenewingTLS(ing, []*netv1alpha1.Certificate{kcert(renewingNow)})
	s, err := MakeServing(bg(), build, resolverOf(svc("blue")))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Proxies) != 1 {
		t.Fatalf("got %d proxies, want 1", len(s.Proxies))
	}
	p := s.Proxies[0]
	if p.Spec.VirtualHost.TLS == nil || p.Spec.VirtualHost.TLS.SecretName != "route-uid" {
		t.Errorf("virtual host TLS = %+v, want the held Secret route-uid", p.Spec.VirtualHost.TLS)
	}
	if !p.Spec.Routes[0].PermitInsecure {
		t.Error("the user route of a held host redirects plain HTTP; the KIngress asked for none")
	}
}
