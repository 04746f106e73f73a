//go:build e2e

package e2e

import (
	"context"
	"net"
	"net/url"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/test/harness"
)

// listenOnBridge listens on a free port of the stack's bridge address, the
// host's address that the Envoy pods reach, for a server the test runs in
// its own process.
func listenOnBridge(t *testing.T, c *harness.Clients) net.Listener {
	t.Helper()
	api, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(api.Hostname(), "0"))
	if err != nil {
		t.Fatalf("listen on the stack's bridge address %s: %v", api.Hostname(), err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// createHostService makes a Service named name in ns whose one endpoint is
// the listener l on the bridge address: a Service without selector and the
// EndpointSlice of it, as a cluster names a backend outside its pods.
func createHostService(ctx context.Context, t *testing.T, c *harness.Clients, ns, name, portName string, servicePort int32, l net.Listener) {
	t.Helper()
	createHostServicePorts(ctx, t, c, ns, name, l, hostPort{portName, servicePort})
}

// hostPort is a named port of a Service createHostServicePorts makes.
type hostPort struct {
	name string
	port int32
}

// createHostServicePorts is createHostService with several ports, in the
// order given, every one of them to l.
func createHostServicePorts(ctx context.Context, t *testing.T, c *harness.Clients, ns, name string, l net.Listener, ports ...hostPort) {
	t.Helper()
	addr := l.Addr().(*net.TCPAddr)
	target := int32(addr.Port)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "hitless-e2e"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr.IP.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}
	for _, p := range ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: p.name, Port: p.port, TargetPort: intstr.FromInt32(target)})
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To(p.name), Port: ptr.To(target), Protocol: ptr.To(corev1.ProtocolTCP)})
	}
	if _, err := c.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// changeConfigContour applies change to the data of hitless's config-contour
// and, when the test ends, puts back exactly the data that was there.
func changeConfigContour(ctx context.Context, t *testing.T, c *harness.Clients, change func(data map[string]string)) {
	t.Helper()
	changeConfigMap(ctx, t, c, config.ContourConfigName, change)
}

// changeConfigMap applies change to the data of a ConfigMap of the
// controller's namespace and, when the test ends, puts back exactly the
// data that was there, whatever happened meanwhile.
func changeConfigMap(ctx context.Context, t *testing.T, c *harness.Clients, name string, change func(data map[string]string)) {
	t.Helper()
	cms := c.Kube.CoreV1().ConfigMaps(leaseNamespace)
	orig, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for {
			cur, err := cms.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Errorf("restore %s: %v", name, err)
				return
			}
			cur.Data = orig.Data
			if _, err = cms.Update(context.Background(), cur, metav1.UpdateOptions{}); !apierrs.IsConflict(err) {
				if err != nil {
					t.Errorf("restore %s: %v", name, err)
				}
				return
			}
		}
	})
	next := orig.DeepCopy()
	if next.Data == nil {
		next.Data = map[string]string{}
	}
	change(next.Data)
	if _, err := cms.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
