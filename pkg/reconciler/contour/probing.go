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
// awaited serves the round, and records what the rollout waits for when
// not. It returns true once confirmed.
func (r *Reconciler) awaitProbe(ctx context.Context, ing *v1alpha1.Ingress, round probe.Round, awaited resources.ClassBackends,
	reason string, proxies []*contourv1.HTTPProxy) (bool, error) {
	// Contour's own verdict first: an invalid proxy will never serve.
	for _, p := range proxies {
		if bad, why := rollout.Rejected(p); bad {
			markProxyInvalid(ing, p.Name, why)
			return false, nil
		}
	}
	fleets, err := r.awaitedFleets(ctx, awaited)
	if waitsForFleet(ing, err) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	progress, err := r.prober.IsReady(ctx, round)
	if waitsForFleet(ing, err) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("failed to probe %s: %w", round.Key, err)
	}
	if progress.Ready {
		return true, nil
	}
	for _, f := range fleets {
		if f.pods.NotReady.Len() > 0 {
			// A not ready pod may stop accepting connections (its Envoy
			// gone) without any event: look again soon, so it stops
			// holding the rollout up once it serves nobody.
			r.enqueueAfter(ing, notReadyRecheck)
			break
		}
	}
	message, longest := describeProgress(fleets, progress, awaited)
	// A rollout that waits has a laggard worth naming with its current
	// wait and last answer once it waits progressRefresh: look again when
	// the wait the message shows moves to its next step. Nothing else may
	// come to end the wait (a server that refuses every probe sends no
	// event), so the first look is scheduled too; one that finds the
	// KIngress confirmed by then writes nothing, and the steps keep a bulk
	// rollout's status writes to one per doubling of a wait.
	_, next := waitStep(longest)
	r.enqueueAfter(ing, next-longest)
	markWaiting(ing, reason, message)
	r.metrics.phaseStarted(ing, reason, r.clock())
	return false, nil
}

// fleetWait is a fleet a rollout waits on, and its Envoy pods.
type fleetWait struct {
	class string
	pods  fleetPods
}

// awaitedFleets lists the Envoy pods of the fleet of each awaited class.
func (r *Reconciler) awaitedFleets(ctx context.Context, awaited resources.ClassBackends) ([]fleetWait, error) {
	cfg := config.FromContextOrDefaults(ctx).Contour
	var out []fleetWait
	for _, class := range awaited.Classes() {
		fleet, ok := cfg.FleetByClass(class)
		if !ok {
			continue
		}
		pods, err := r.targets.pods(fleet)
		if err != nil {
			return nil, err
		}
		out = append(out, fleetWait{class: class, pods: pods})
	}
	return out, nil
}

// waitsForFleet records, for an error that a fleet's state causes (no
// ready Envoy pod, no port to probe on), what the rollout waits for, and
// tells whether it did: such a wait ends with an event on the fleet's
// Service or EndpointSlices, not with a retry.
func waitsForFleet(ing *v1alpha1.Ingress, err error) bool {
	switch {
	case errors.Is(err, errNoEnvoyPods):
		markWaiting(ing, ReasonNoEnvoyPods, err.Error()+": the KIngress cannot be confirmed until an Envoy pod is ready")
	case errors.Is(err, errNoProbePort):
		markWaiting(ing, ReasonNoProbePort, err.Error())
	default:
		return false
	}
	return true
}

// describeProgress is the condition message of a rollout that waits, and
// the longest wait of any pod. Until a wait is worth showing (shown), it
// says only what is waited for: "waiting for 2 Envoy pods of
// contour-external to serve default/green:80". It is status, and every
// change of it an API write: counts that move as pods confirm would cost a
// write at every reconcile (Contour's status writes on the proxies cause
// one each). Once a wait is worth showing, it counts the pods that confirmed
// and names the laggards: "1/2 Envoy pods of contour-external serve
// default/green:80 (waiting: 10.244.0.7 for over 10s: 503)".
func describeProgress(fleets []fleetWait, progress probe.Progress, awaited resources.ClassBackends) (string, time.Duration) {
	byClass := map[string]probe.FleetProgress{}
	showAny := false
	var longest time.Duration
	for _, f := range fleets {
		fp := probe.FleetProgress{Class: f.class, Total: f.pods.IPs.Len()}
		for _, got := range progress.Fleets {
			if got.Class == f.class {
				fp = got
			}
		}
		byClass[f.class] = fp
		for _, w := range fp.Waiting {
			showAny = showAny || shown(w)
			longest = max(longest, w.For)
		}
	}
	var parts []string
	for _, f := range fleets {
		fp := byClass[f.class]
		notReady := ""
		if n := f.pods.NotReady.Len(); n > 0 {
			notReady = fmt.Sprintf(" (%d not ready but still serving: %s)", n, strings.Join(sets.List(f.pods.NotReady), ", "))
		}
		backends := describe(backendStrings(resources.ClassBackends{f.class: awaited[f.class]}))
		if !showAny {
			parts = append(parts, fmt.Sprintf("waiting for %d Envoy pods of %s%s to serve %s", fp.Total, f.class, notReady, backends))
			continue
		}
		var laggards []probe.PodWait
		for _, w := range fp.Waiting {
			if shown(w) {
				laggards = append(laggards, w)
			}
		}
		parts = append(parts, fmt.Sprintf("%d/%d Envoy pods of %s%s serve %s%s", fp.Confirmed, fp.Total, f.class, notReady,
			backends, describeWaiting(laggards)))
	}
	return strings.Join(parts, "; "), longest
}

// shown tells whether a pod's wait is worth a condition message that names
// it: once it lasts progressRefresh, if its answer is one an operator may
// act on (a refusal, no connection, a connect failure, a 503 or 404 on a
// quiet pod); a pod behind on Contour's pushes (no answer yet, or a 404,
// an older hash or a 503 while other rounds wait on it too or it keeps
// confirming checks: probe.PodWait.Behind), as every pod is while Contour
// takes in thousands of new proxies, only once it has taken no push for
// behindShown while a pod of its fleet took one within behindShown: it
// lags its peers (disconnected from Contour, say). A pod that keeps taking
// pushes is busy with Contour's queue, where a route's cluster may get its
// endpoints seconds after the route; a fleet whose pods all take none is
// waiting for its Contour, which under a flood of 2,000 KIngresses pushes
// to the cluster-local fleet (three hosts each) more than a minute apart.
// Naming them would cost every waiting KIngress a status write per step of
// its wait (2.5 to 2.9 writes per KIngress created at 2,000, against 2:
// the waiting one and the Ready one), and point at pods rather than at
// Contour; the message still says which fleet is awaited.
func shown(w probe.PodWait) bool {
	if w.Behind {
		return w.Stalled >= behindShown && w.FleetStalled < behindShown
	}
	return w.For >= progressRefresh
}

// behindShown is how long a pod behind on Contour's pushes may take none,
// while its fleet takes them, before the condition names it.
const behindShown = time.Minute

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

// cancelProbing drops the prober's rounds of a KIngress: its serving
// proxies' and its warm set's.
func (r *Reconciler) cancelProbing(key types.NamespacedName) {
	r.prober.Cancel(probe.RoundKey{NamespacedName: key})
	r.prober.Cancel(probe.RoundKey{NamespacedName: key, Warm: true})
}

// roundOf is what the prober confirms of a KIngress's serving proxies
// (warm false) or of its warm set: probes at hash.
func roundOf(ing *v1alpha1.Ingress, warm bool, hash string, probes []resources.ProbeTarget) probe.Round {
	r := probe.Round{
		Key:  probe.RoundKey{NamespacedName: types.NamespacedName{Namespace: ing.Namespace, Name: ing.Name}, Warm: warm},
		Hash: hash,
	}
	for _, t := range probes {
		r.Paths = append(r.Paths, probe.Path{Class: t.Class, Host: t.Host, Prefix: t.Path, TLS: t.TLS, SecureOnly: t.SecureOnly})
	}
	return r
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
