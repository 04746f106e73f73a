package contour

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"knative.dev/networking/pkg/apis/networking/v1alpha1"

	"github.com/hitless/hitless/pkg/config"
	"github.com/hitless/hitless/pkg/probe"
	"github.com/hitless/hitless/pkg/resources"
	"github.com/hitless/hitless/pkg/rollout"
)

// awaitProbe asks the prober whether every Envoy pod of each class in
// awaited serves probeIng, and records what the rollout waits for when not.
// It returns true once confirmed.
func (r *Reconciler) awaitProbe(ctx context.Context, ing, probeIng *v1alpha1.Ingress, awaited resources.ClassBackends,
	reason string, proxies []*contourv1.HTTPProxy) (bool, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	// Contour's own verdict first: an invalid proxy will never serve.
	for _, p := range proxies {
		if bad, why := rollout.Rejected(p); bad {
			markProxyInvalid(ing, p.Name, why)
			return false, nil
		}
	}
	type fleetWait struct {
		class, notReady string
		pods            int
	}
	var fleets []fleetWait
	unready := false
	for _, class := range awaited.Classes() {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			continue
		}
		pods, err := r.targets.pods(fleet)
		if errors.Is(err, errNoEnvoyPods) {
			markWaiting(ing, ReasonNoEnvoyPods, err.Error()+": the KIngress cannot be confirmed until an Envoy pod is ready")
			return false, nil
		} else if errors.Is(err, errNoProbePort) {
			markWaiting(ing, ReasonNoProbePort, err.Error())
			return false, nil
		} else if err != nil {
			return false, err
		}
		notReady := ""
		if n := pods.NotReady.Len(); n > 0 {
			notReady = fmt.Sprintf(" (%d not ready but still serving: %s)", n, strings.Join(sets.List(pods.NotReady), ", "))
			unready = true
		}
		fleets = append(fleets, fleetWait{class: class, notReady: notReady, pods: pods.IPs.Len()})
	}
	progress, err := r.prober.IsReady(ctx, probeIng)
	if err != nil {
		if errors.Is(err, errNoEnvoyPods) {
			markWaiting(ing, ReasonNoEnvoyPods, err.Error())
			return false, nil
		}
		if errors.Is(err, errNoProbePort) {
			markWaiting(ing, ReasonNoProbePort, err.Error())
			return false, nil
		}
		return false, fmt.Errorf("failed to probe %s/%s: %w", probeIng.Namespace, probeIng.Name, err)
	}
	if progress.Ready {
		return true, nil
	}
	if unready {
		// A not ready pod may stop accepting connections (its Envoy
		// gone) without any event: look again soon, so it stops
		// holding the rollout up once it serves nobody.
		r.enqueueAfter(ing, notReadyRecheck)
	}
	var parts []string
	var longest time.Duration
	for _, f := range fleets {
		fp := probe.FleetProgress{Class: f.class, Total: f.pods}
		for _, got := range progress.Fleets {
			if got.Class == f.class {
				fp = got
			}
		}
		parts = append(parts, fmt.Sprintf("%d/%d Envoy pods of %s%s serve %s%s", fp.Confirmed, fp.Total, f.class, f.notReady,
			describe(backendStrings(resources.ClassBackends{f.class: awaited[f.class]})), describeWaiting(fp.Waiting)))
		if len(fp.Waiting) > 0 && fp.Waiting[0].For > longest {
			longest = fp.Waiting[0].For
		}
	}
	// A rollout that waits has a laggard worth naming with its current
	// wait and last answer once it waits progressRefresh: look again when
	// the wait the message shows moves to its next step. Nothing else may
	// come to end the wait (a server that refuses every probe sends no
	// event), so the first look is scheduled too; one that finds the
	// KIngress confirmed by then writes nothing, and the steps keep a bulk
	// rollout's status writes to one per doubling of a wait.
	_, next := waitStep(longest)
	r.enqueueAfter(ing, next-longest)
	markWaiting(ing, reason, strings.Join(parts, "; "))
	r.metrics.phaseStarted(ing, reason, r.clock())
	return false, nil
}

// progressRefresh is the wait after which a rollout's condition message
// names how long its laggards wait, and is brought up to date by itself.
const progressRefresh = 5 * time.Second

// waitStep is the wait a message shows for a pod that waits d, and the wait
// at which that changes: 0 below progressRefresh, then steps that double
// (5s, 10s, 20s, 40s, ...). The message is status, and every change of it is
// an API write: a clock in it would rewrite the status of every waiting
// KIngress at every reconcile (Contour's status writes on its HTTPProxies
// cause many at scale), while steps cost a waiting KIngress one write per
// doubling of its wait.
func waitStep(d time.Duration) (shown, next time.Duration) {
	if d < progressRefresh {
		return 0, progressRefresh
	}
	shown = progressRefresh
	for shown*2 <= d {
		shown *= 2
	}
	return shown, shown * 2
}

// describeWaiting names the first pods a fleet waits on, how long (from
// progressRefresh on, in waitStep's steps) and their last answer:
// " (waiting: 10.244.0.7 for over 10s: 503)".
func describeWaiting(pods []probe.PodWait) string {
	if len(pods) == 0 {
		return ""
	}
	const max = 2
	var items []string
	for i, p := range pods {
		if i == max {
			items = append(items, fmt.Sprintf("%d more", len(pods)-max))
			break
		}
		item := p.IP
		if shown, _ := waitStep(p.For); shown > 0 {
			item += fmt.Sprintf(" for over %v", shown)
		}
		if p.LastError != "" {
			item += ": " + p.LastError
		}
		items = append(items, item)
	}
	return " (waiting: " + strings.Join(items, ", ") + ")"
}

// notReadyRecheck is how often a rollout that waits for a not ready Envoy
// pod checks whether that pod still accepts connections.
const notReadyRecheck = 2 * time.Second

// cancelProbing drops the prober's state for a KIngress and its warm set.
func (r *Reconciler) cancelProbing(key types.NamespacedName) {
	r.prober.CancelIngressProbingByKey(key)
	r.prober.CancelIngressProbingByKey(types.NamespacedName{Namespace: key.Namespace, Name: key.Name + resources.WarmSuffix})
}

func backendStrings(c resources.ClassBackends) []string {
	var out []string
	for _, class := range c.Classes() {
		for _, b := range resources.SortedBackends(c[class]) {
			out = append(out, b.String())
		}
	}
	return out
}

// withExpectedHash is the KIngress as the prober is given it: with the hash
// its serving proxies answer with (resources.servedHash), not the one of its
// spec alone. A shallow copy: only the annotations are new.
func withExpectedHash(ing *v1alpha1.Ingress, hash string) *v1alpha1.Ingress {
	out := *ing
	out.Annotations = make(map[string]string, len(ing.Annotations)+1)
	for k, v := range ing.Annotations {
		out.Annotations[k] = v
	}
	out.Annotations[probe.ExpectedHashAnnotation] = hash
	return &out
}
