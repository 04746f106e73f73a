//go:build e2e

// Package serving tests hitless where it lives: under Knative Serving, which
// writes one KIngress per Route and changes it with every new Revision.
// It needs Serving on the local stack (hack/serving.sh up; make test-serving
// does it) and talks to Serving's API through the dynamic client, so the main
// module does not depend on knative.dev/serving.
package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	apierrs "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/hitless/hitless/test/harness"
)

var ksvcs = schema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}

const (
	domainDefault = "example.com" // hack/serving.sh SERVING_DOMAIN
)

// TestServingRolloutDropsNothing: under steady load through every Envoy pod
// of both fleets, a Knative Service is updated ROLLOUT_UPDATES times (a new
// Revision each time, 100% to latest), then split between its last two
// Revisions with tags, then left to scale to zero and woken through the
// activator. Every request must be a 2xx from a Revision the Route sent
// traffic to at some moment while it was in flight: once the Knative Service
// is Ready, its old Revision must no longer answer (hitless's Ready is true).
func TestServingRolloutDropsNothing(t *testing.T) {
	ctx := context.Background()
	st := newServingTest(ctx, t, "serving-rollout")
	c, ns, svcs, domain := st.c, st.ns, st.svcs, st.domain

	updates := harness.EnvInt("ROLLOUT_UPDATES", 20)
	rps := harness.EnvInt("ROLLOUT_RPS", 100)
	const name = "roll"
	first := st.create(ctx, t, knativeService(ns, name, st.image("runtime"), 0))

	// Load on the public host through the external fleet and on the
	// cluster-local host through the internal one, every Envoy pod.
	targets := st.targets(ctx, t, name)
	load, stop := startLoad(ctx, targets, rps, first)

	// 1. ROLLOUT_UPDATES new Revisions, 100% to latest.
	var readyIn []time.Duration
	prev := first
	for i := 1; i <= updates; i++ {
		next := revisionName(name, i+1)
		load.Allow(prev, next)
		start := time.Now()
		if err := updateService(ctx, svcs, name, func(u *unstructured.Unstructured) {
			setRollEnv(u, i)
		}); err != nil {
			stop()
			t.Fatal(err)
		}
		if _, err := waitServiceReady(ctx, svcs, name, next, 2*time.Minute); err != nil {
			stop()
			t.Fatalf("update %d: %v", i, err)
		}
		readyIn = append(readyIn, time.Since(start))
		load.Allow(next)
		prev = next
	}
	s := load.Summarize()
	t.Logf("%d updates: %s; Knative Service Ready after p50 %v, max %v", updates, s, harness.Percentile(readyIn, 50), harness.Percentile(readyIn, 100))
	logFailures(t, s)

	// 2. A split between the last two Revisions, each with a tag (a new host
	// each: the KIngress gains rules).
	older, latest := revisionName(name, updates), revisionName(name, updates+1)
	load.Allow(older, latest)
	start := time.Now()
	if err := updateService(ctx, svcs, name, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []any{
			map[string]any{"tag": "older", "revisionName": older, "percent": int64(50)},
			map[string]any{"tag": "latest", "revisionName": latest, "percent": int64(50)},
		}, "spec", "traffic")
	}); err != nil {
		stop()
		t.Fatal(err)
	}
	if _, err := waitServiceReady(ctx, svcs, name, latest, 2*time.Minute); err != nil {
		stop()
		t.Fatalf("split: %v", err)
	}
	splitReady := time.Since(start)
	// Ready means every Envoy pod serves the tag hosts, each only its Revision.
	tagged := map[string]*harness.Load{}
	var stopTagged []func()
	for tag, rev := range map[string]string{"older": older, "latest": latest} {
		host := fmt.Sprintf("%s-%s.%s.%s", tag, name, ns, domain)
		l, st := startLoad(ctx, c.MustFleetTargets(ctx, t, "contour-external", host), rps/4+1, rev)
		tagged[tag], stopTagged = l, append(stopTagged, st)
	}
	time.Sleep(10 * time.Second)
	for _, st := range stopTagged {
		st()
	}
	stop()
	s = load.Summarize()
	t.Logf("split with tags: Ready after %v; main hosts so far: %s", splitReady, s)
	logFailures(t, s)
	for tag, l := range tagged {
		ts := l.Summarize()
		t.Logf("tag %s: %s", tag, ts)
		logFailures(t, ts)
		if ts.Requests == 0 {
			t.Errorf("tag %s: no request was sent", tag)
		}
	}

	// 3. No traffic: both Revisions scale to zero (the template sets a 6 s
	// window); then the load wakes them through the activator.
	start = time.Now()
	for _, rev := range []string{older, latest} {
		if err := waitScaledToZero(ctx, c, ns, rev, 4*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	toZero := time.Since(start)
	cold, stopCold := startLoad(ctx, targets, rps, older, latest)
	time.Sleep(15 * time.Second)
	stopCold()
	cs := cold.Summarize()
	t.Logf("scaled to zero in %v; woken through the activator: %s", toZero, cs)
	logFailures(t, cs)

	total, failed := s.Requests+cs.Requests, s.Failed()+cs.Failed()
	for _, l := range tagged {
		ts := l.Summarize()
		total, failed = total+ts.Requests, failed+ts.Failed()
	}
	fmt.Printf("serving-rollout: updates=%d requests=%d failed=%d ready_p50_ms=%d ready_max_ms=%d scale_to_zero_s=%.0f\n",
		updates, total, failed, harness.Percentile(readyIn, 50).Milliseconds(), harness.Percentile(readyIn, 100).Milliseconds(), toZero.Seconds())
	if min := int(float64(rps) * 10); s.Requests < min {
		t.Errorf("only %d requests during the rollouts, want at least %d (10 s of load)", s.Requests, min)
	}
}

// servingTest is what each Serving-level test starts from: clients, a
// namespace of its own (deleted when the test ends) and the dynamic client
// of its Knative Services.
type servingTest struct {
	c      *harness.Clients
	ns     string
	svcs   dynamic.ResourceInterface
	domain string // SERVING_DOMAIN, as hack/serving.sh sets it
	repo   string // KO_DOCKER_REPO: where Serving's test images are named
}

func newServingTest(ctx context.Context, t *testing.T, prefix string) *servingTest {
	t.Helper()
	c, ns := harness.TestNamespace(ctx, t, prefix)
	st := &servingTest{c: c, ns: ns, svcs: dynamic.NewForConfigOrDie(c.Config).Resource(ksvcs).Namespace(ns),
		domain: os.Getenv("SERVING_DOMAIN"), repo: os.Getenv("KO_DOCKER_REPO")}
	if st.domain == "" {
		st.domain = domainDefault
	}
	if st.repo == "" {
		st.repo = "ko.local/serving-test"
	}
	return st
}

// image is the reference of one of Serving's test images.
func (st *servingTest) image(name string) string { return st.repo + "/" + name }

// create creates the Knative Service and waits until its first Revision
// serves, which it returns.
func (st *servingTest) create(ctx context.Context, t *testing.T, ksvc *unstructured.Unstructured) string {
	t.Helper()
	if _, err := st.svcs.Create(ctx, ksvc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Knative Service %s/%s: %v", st.ns, ksvc.GetName(), err)
	}
	first := revisionName(ksvc.GetName(), 1)
	if _, err := waitServiceReady(ctx, st.svcs, ksvc.GetName(), first, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	return first
}

// targets are every Envoy pod of the external fleet for the Knative
// Service's public host and of the internal fleet for its cluster-local one.
func (st *servingTest) targets(ctx context.Context, t *testing.T, name string) []harness.Target {
	return append(st.c.MustFleetTargets(ctx, t, "contour-external", fmt.Sprintf("%s.%s.%s", name, st.ns, st.domain)),
		st.c.MustFleetTargets(ctx, t, "contour-internal", fmt.Sprintf("%s.%s.svc.cluster.local", name, st.ns))...)
}

// knativeService is a Knative Service of Serving's runtime test image with
// env ROLL=roll; the 6 s autoscaling window lets a Revision without traffic
// scale to zero within the test.
func knativeService(ns, name, image string, roll int) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1",
		"kind":       "Service",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"template": map[string]any{
				"metadata": map[string]any{"annotations": map[string]any{"autoscaling.knative.dev/window": "6s"}},
				"spec": map[string]any{
					"containers": []any{map[string]any{"image": image}},
				},
			},
		},
	}}
	setRollEnv(u, roll)
	return u
}

func setRollEnv(u *unstructured.Unstructured, roll int) {
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	ctr := containers[0].(map[string]any)
	ctr["env"] = []any{map[string]any{"name": "ROLL", "value": strconv.Itoa(roll)}}
	_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// revisionName is the name Serving gives a Configuration's n-th Revision.
func revisionName(svc string, n int) string { return fmt.Sprintf("%s-%05d", svc, n) }

func updateService(ctx context.Context, svcs dynamic.ResourceInterface, name string, change func(*unstructured.Unstructured)) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		u, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		change(u)
		_, err = svcs.Update(ctx, u, metav1.UpdateOptions{})
		if apierrs.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// waitServiceReady waits until the Knative Service is Ready at its newest
// generation with rev as its latest ready Revision.
func waitServiceReady(ctx context.Context, svcs dynamic.ResourceInterface, name, rev string, timeout time.Duration) (*unstructured.Unstructured, error) {
	last, err := pollService(ctx, svcs, name, 50*time.Millisecond, timeout, func(u *unstructured.Unstructured) bool {
		latest, _, _ := unstructured.NestedString(u.Object, "status", "latestReadyRevisionName")
		return latest == rev
	})
	if err != nil {
		return last, fmt.Errorf("Knative Service %s not Ready with Revision %s within %v: %v", name, rev, timeout, conditions(last))
	}
	return last, nil
}

// pollService gets the Knative Service every interval until it is Ready at
// its newest generation and done says so, and returns the last one it got.
func pollService(ctx context.Context, svcs dynamic.ResourceInterface, name string, interval, timeout time.Duration, done func(*unstructured.Unstructured) bool) (*unstructured.Unstructured, error) {
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		u, err := svcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = u
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return observed == u.GetGeneration() && conditionTrue(u, "Ready") && done(u), nil
	})
	return last, err
}

func conditionTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ {
			return m["status"] == "True"
		}
	}
	return false
}

func conditions(u *unstructured.Unstructured) string {
	if u == nil {
		return "never read"
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	return fmt.Sprint(conds)
}

// waitScaledToZero waits until the Revision's Deployment wants no pod and
// has none ready: from then on Serving routes its traffic to the activator.
func waitScaledToZero(ctx context.Context, c *harness.Clients, ns, rev string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, rev+"-deployment", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return d.Spec.Replicas != nil && *d.Spec.Replicas == 0 && d.Status.ReadyReplicas == 0, nil
	})
	if err != nil {
		return fmt.Errorf("Revision %s/%s did not scale to zero within %v", ns, rev, timeout)
	}
	return nil
}

// startLoad sends rps requests/s over targets, allowing only the Revisions
// given; the returned func stops it and waits.
func startLoad(ctx context.Context, targets []harness.Target, rps int, revisions ...string) (*harness.Load, func()) {
	l := &harness.Load{Targets: targets, RPS: rps, BackendOf: revisionOf}
	l.Allow(revisions...)
	return l, l.Start(ctx)
}

// revisionOf reads K_REVISION, which Serving sets in every user container,
// from the environment Serving's runtime test image reports. (The
// Knative-Serving-Revision header Serving's Route appends is consumed by the
// activator and the queue-proxy, so it cannot tell.)
func revisionOf(body []byte) string {
	var seen struct {
		Host struct {
			Env map[string]string `json:"envs"`
		} `json:"host"`
	}
	if json.Unmarshal(body, &seen) != nil {
		return ""
	}
	return seen.Host.Env["K_REVISION"]
}

func logFailures(t *testing.T, s harness.Summary) {
	t.Helper()
	if s.Failed() == 0 {
		return
	}
	t.Errorf("%d of %d requests failed: %s", s.Failed(), s.Requests, s)
	for _, f := range s.Failures {
		t.Log("  ", f)
	}
}
