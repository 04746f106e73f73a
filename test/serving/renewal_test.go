//go:build e2e

package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/test/harness"
)

var cmCertificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// TestServingCertificateRenewal: with external-domain-tls and an ACME issuer
// (make test-serving-tls: cert-manager's HTTP-01 against the stack's pebble,
// whose certificates live 3 minutes), a Knative Service whose plain HTTP is
// redirected gets its certificate, then keeps HTTPS load on every external
// Envoy pod until cert-manager renews it, 2 minutes after the issue. Serving
// hands the renewal's HTTP-01 challenge to the KIngress (only once the
// certificate has passed its renewal time: a renewal forced earlier, as
// `cmctl renew` does, is never validated, since Serving routes no challenge
// for it). The challenge must reach the solver through hitless on a host
// that terminates TLS and redirects, and the new certificate must end up
// served by every Envoy pod.
//
// Serving v0.50.0 takes the host's TLS out of the KIngress while it renews:
// its certificate reconciler marks the Knative Certificate not ready when
// the challenge exists before cert-manager's solver Service does ("no
// challenge solver service for domain"), and the route then writes the
// KIngress without spec.tls until the new certificate is issued. hitless
// keeps serving the host's certificate while Serving reports it renewing
// (resources.HoldRenewingTLS), so no request may fail at all; the test
// watches the KIngress and reports those windows beside the load.
func TestServingCertificateRenewal(t *testing.T) {
	ctx := context.Background()
	st := newServingTest(ctx, t, "serving-renew")
	cm, err := st.c.Kube.CoreV1().ConfigMaps("knative-serving").Get(ctx, "config-network", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.EqualFold(cm.Data["external-domain-tls"], "enabled") {
		t.Skip("needs config-network external-domain-tls: Enabled and an ACME issuer in config-certmanager; make test-serving-tls runs it so")
	}
	rps := harness.EnvInt("RENEWAL_RPS", 100)

	const name = "renew"
	ksvc := knativeService(st.ns, name, st.image("runtime"), 0)
	ksvc.SetAnnotations(map[string]string{"networking.knative.dev/http-protocol": "redirected"})
	rev := st.create(ctx, t, ksvc)
	host := fmt.Sprintf("%s.%s.%s", name, st.ns, st.domain)
	if _, err := pollService(ctx, st.svcs, name, time.Second, 4*time.Minute, func(u *unstructured.Unstructured) bool {
		url, _, _ := unstructured.NestedString(u.Object, "status", "url")
		return strings.HasPrefix(url, "https://") && conditionTrue(u, "Ready")
	}); err != nil {
		t.Fatalf("Knative Service %s never had an https URL: %v", name, err)
	}
	kcert := certificateOf(ctx, t, st, host)
	t.Logf("certificate %s (Secret %s) issued for %s", kcert.Name, kcert.Spec.SecretName, host)

	var pods []string
	for _, tg := range st.c.MustFleetTargets(ctx, t, "contour-external", host) {
		pods = append(pods, strings.TrimSuffix(tg.Addr, ":8080"))
	}
	var targets []harness.Target
	for _, ip := range pods {
		targets = append(targets, harness.Target{Addr: ip + ":8443", Host: host, TLS: true})
	}
	before := secretSerial(ctx, t, st, kcert.Spec.SecretName)
	if err := waitServed(ctx, pods, host, before, time.Minute); err != nil {
		t.Fatalf("before the renewal: %v", err)
	}

	watch := watchTLS(ctx, st, name, host)
	defer watch.stop()
	load, stop := startLoad(ctx, targets, rps, rev)
	defer stop()
	start := time.Now()

	// The renewal's challenge, as Serving hands it to the KIngress.
	challenged := false
	var after string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		kc, err := st.c.Net.NetworkingV1alpha1().Certificates(st.ns).Get(ctx, kcert.Name, metav1.GetOptions{})
		if err == nil && len(kc.Status.HTTP01Challenges) > 0 {
			challenged = true
		}
		after = secretSerial(ctx, t, st, kcert.Spec.SecretName)
		return after != before, nil
	})
	if err != nil {
		t.Fatalf("the Secret %s still holds certificate %s after 5 minutes: no renewal (the certificate's status: %s)", kcert.Spec.SecretName, before, renewalState(ctx, st, kcert.Name))
	}
	issued := time.Since(start)
	if err := waitServed(ctx, pods, host, after, 2*time.Minute); err != nil {
		t.Fatalf("after the renewal: %v", err)
	}
	served := time.Since(start)
	time.Sleep(3 * time.Second)
	stop()
	windows := watch.stop()

	s := load.Summarize()
	var servings, ours []harness.Result
	for _, r := range load.FailedResults() {
		if windows.cover(r) {
			servings = append(servings, r)
		} else {
			ours = append(ours, r)
		}
	}
	logFailures(t, s)
	t.Logf("renewal: certificate %s -> %s issued %v into the load, served by all %d Envoy pods after %v; challenge seen on the KCertificate: %v",
		before, after, issued, len(pods), served, challenged)
	t.Logf("HTTPS load: %s; Serving's KIngress without TLS for the host: %s; failed inside those windows: %d, outside: %d",
		s, windows, len(servings), len(ours))
	fmt.Printf("serving-renewal: requests=%d failed=%d failed_while_kingress_had_no_tls=%d failed_otherwise=%d kingress_without_tls_s=%.1f issued_s=%.1f served_s=%.1f challenge=%v\n",
		s.Requests, s.Failed(), len(servings), len(ours), windows.total().Seconds(), issued.Seconds(), served.Seconds(), challenged)
	if !challenged {
		t.Error("the renewal was never challenged: the test proved nothing about HTTP-01 through hitless (pebble reusing an authorization?)")
	}
	if s.Requests < rps*30 {
		t.Errorf("only %d requests during the renewal, want at least %d", s.Requests, rps*30)
	}
}

// tlsWatch records when the KIngress of a Knative Service has no TLS for a
// host, until hitless reports a generation with TLS served again (Ready at
// that generation): the windows in which HTTPS to the host cannot work,
// whatever the ingress.
type tlsWatch struct {
	mu      sync.Mutex
	windows tlsWindows
	open    *tlsWindow
	cancel  func()
	done    chan struct{}
}

type tlsWindow struct{ from, to time.Time }

type tlsWindows []tlsWindow

func watchTLS(ctx context.Context, st *servingTest, name, host string) *tlsWatch {
	wctx, cancel := context.WithCancel(ctx)
	w := &tlsWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for wctx.Err() == nil {
			ing, err := st.c.Net.NetworkingV1alpha1().Ingresses(st.ns).Get(wctx, name, metav1.GetOptions{})
			if err == nil {
				w.observe(time.Now(), hasTLS(ing, host), ing.IsReady() && ing.Status.ObservedGeneration == ing.Generation)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func hasTLS(ing *netv1alpha1.Ingress, host string) bool {
	for _, tls := range ing.Spec.TLS {
		for _, h := range tls.Hosts {
			if h == host {
				return true
			}
		}
	}
	return false
}

// observe opens a window when the KIngress has no TLS for the host and
// closes it once a generation with TLS is Ready.
func (w *tlsWatch) observe(at time.Time, tls, ready bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !tls && w.open == nil:
		w.open = &tlsWindow{from: at}
	case tls && ready && w.open != nil:
		w.open.to = at
		w.windows = append(w.windows, *w.open)
		w.open = nil
	}
}

// stop ends the watch; a window still open ends now.
func (w *tlsWatch) stop() tlsWindows {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.open != nil {
		w.open.to = time.Now()
		w.windows = append(w.windows, *w.open)
		w.open = nil
	}
	return w.windows
}

// cover tells whether a request overlapped a window. A second of slack on
// each side: the watch polls, and Envoy takes the change in after hitless
// writes it.
func (ws tlsWindows) cover(r harness.Result) bool {
	for _, w := range ws {
		if r.End.After(w.from.Add(-time.Second)) && r.Start.Before(w.to.Add(time.Second)) {
			return true
		}
	}
	return false
}

func (ws tlsWindows) total() time.Duration {
	var d time.Duration
	for _, w := range ws {
		d += w.to.Sub(w.from)
	}
	return d
}

func (ws tlsWindows) String() string {
	if len(ws) == 0 {
		return "never"
	}
	var parts []string
	for _, w := range ws {
		parts = append(parts, fmt.Sprintf("%s-%s (%v)", w.from.Format("15:04:05.000"), w.to.Format("15:04:05.000"), w.to.Sub(w.from).Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// certificateOf is the Knative Certificate Serving made for host.
func certificateOf(ctx context.Context, t *testing.T, st *servingTest, host string) *netv1alpha1.Certificate {
	t.Helper()
	certs, err := st.c.Net.NetworkingV1alpha1().Certificates(st.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range certs.Items {
		for _, d := range certs.Items[i].Spec.DNSNames {
			if d == host {
				return &certs.Items[i]
			}
		}
	}
	t.Fatalf("no Knative Certificate in %s names %s", st.ns, host)
	return nil
}

// renewalState is the cert-manager Certificate's renewal time and
// conditions, for a failure's message.
func renewalState(ctx context.Context, st *servingTest, name string) string {
	u, err := dynamic.NewForConfigOrDie(st.c.Config).Resource(cmCertificates).Namespace(st.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	renewal, _, _ := unstructured.NestedString(u.Object, "status", "renewalTime")
	return fmt.Sprintf("renewalTime %s, conditions %s", renewal, conditions(u))
}

// secretSerial is the serial number of the certificate the Secret holds.
func secretSerial(ctx context.Context, t *testing.T, st *servingTest, name string) string {
	t.Helper()
	s, err := st.c.Kube.CoreV1().Secrets(st.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", st.ns, name, err)
	}
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatalf("Secret %s/%s holds no PEM certificate", st.ns, name)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.Text(16)
}

// waitServed waits until every Envoy pod presents the certificate of that
// serial for host.
func waitServed(ctx context.Context, pods []string, host, serial string, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, ip := range pods {
			got, err := servedSerial(ip+":8443", host)
			if err != nil || got != serial {
				last = fmt.Sprintf("Envoy pod %s serves %q for %s (%v), want %s", ip, got, host, err, serial)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s after %v", last, timeout)
	}
	return nil
}

func servedSerial(addr, host string) (string, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // the serial is what is checked
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}
