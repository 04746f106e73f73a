// Package rollout decides, as pure functions, each step of hitless's
// make-before-break rollout: Warm (reference and probe every new backend
// through warm proxies), Switch (write the serving proxies), Release (drop
// the warm proxies once every Envoy pod serves the switch). Every input is
// read from objects in the cluster, so a controller restarted at any instant
// reaches the same decision.
package rollout

import (
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"

	"github.com/hitless/hitless/pkg/resources"
)

// Observed is what exists now for one KIngress: its serving and warm proxies
// as read from the API (a crash may have left them at mixed generations).
type Observed struct {
	Serving []*contourv1.HTTPProxy
	Warm    []*contourv1.HTTPProxy
	// Exists tells whether a backend's Service and port still exist; nil
	// means all do. Contour invalidates a whole proxy that names a missing
	// Service, and has already dropped that Service's cluster, so a warm
	// proxy must not hold one.
	Exists func(resources.Backend) bool
}

// Plan says what the warm proxies must hold and probe before the serving
// proxies may be written.
type Plan struct {
	// Held are the backends the serving proxies reference now, per class.
	Held resources.ClassBackends
	// New are the desired backends that no serving proxy references yet:
	// Envoy may not have their clusters, so they are probed before Switch.
	New resources.ClassBackends
	// Keep is what the warm proxies must reference: what they reference
	// now, what serves now and what will serve. Empty when none are needed.
	Keep resources.ClassBackends
	// Probe tells whether New must be confirmed on every Envoy pod through
	// the warm proxies before Switch.
	Probe bool
}

// NeedsWarm tells whether warm proxies must exist before Switch.
func (p Plan) NeedsWarm() bool { return !p.Keep.Empty() }

// Decide plans the Warm phase for the desired serving state of a KIngress.
//
//   - A brand-new KIngress (no serving proxy) carries no traffic: nothing to
//     hold, nothing to warm; its first Ready costs one probe round.
//   - When every desired backend already serves (a header-only change, a
//     percentage shift), there is nothing to probe; backends that leave are
//     still held by warm proxies so Contour keeps their clusters until the
//     switch is confirmed everywhere.
//   - Otherwise the warm proxies reference warm ∪ held ∪ desired and the new
//     backends are probed. The set only ever grows until Release (an Envoy
//     pod that lags may still route to a backend no object names any more),
//     except for backends whose Service is gone: Contour has dropped their
//     clusters already, and naming them would invalidate the warm proxy.
func Decide(desired *resources.Serving, obs Observed) Plan {
	held := backendsOf(obs.Serving)
	warmed := backendsOf(obs.Warm)
	p := Plan{
		Held: held,
		New:  desired.Backends.Difference(held),
		Keep: resources.ClassBackends{},
	}
	if len(obs.Serving) == 0 && len(obs.Warm) == 0 {
		p.New = resources.ClassBackends{}
		return p
	}
	// Per class: a fleet where nothing is new, nothing leaves and nothing
	// is held yet needs no warm proxy (each one costs a write, a Contour
	// rebuild and probes).
	for _, class := range desired.Backends.Union(held).Union(warmed).Classes() {
		if p.New[class].Len() == 0 && held[class].Difference(desired.Backends[class]).Len() == 0 && warmed[class].Len() == 0 {
			continue
		}
		for _, b := range warmed[class].Union(held[class]).Union(desired.Backends[class]).UnsortedList() {
			if obs.Exists == nil || obs.Exists(b) {
				p.Keep.Add(class, b)
			}
		}
	}
	p.Probe = !p.New.Empty() && len(obs.Serving) > 0
	return p
}

func backendsOf(proxies []*contourv1.HTTPProxy) resources.ClassBackends {
	out := resources.ClassBackends{}
	for _, p := range proxies {
		out.Add(resources.ProxyClass(p), resources.BackendsOfProxy(p).UnsortedList()...)
	}
	return out
}

// Adopt renames each desired serving proxy after the serving proxy that
// already serves its host on its class under another name: one that
// net-contour wrote before the cluster moved to hitless, or an older naming
// of ours. Writing the desired spec onto that object moves the host in one
// update; a second proxy for the host would have Contour invalidate both
// and the host answer 404. A desired proxy whose own name exists keeps it;
// the other proxies of its host are then Stale. serving must be sorted by
// name so every reconcile picks the same one.
func Adopt(desired, serving []*contourv1.HTTPProxy) {
	type vhost struct{ class, fqdn string }
	exists := make(map[string]bool, len(serving))
	for _, p := range serving {
		exists[p.Name] = true
	}
	wanted := make(map[string]bool, len(desired))
	for _, d := range desired {
		wanted[d.Name] = true
	}
	byHost := map[vhost]string{}
	for _, p := range serving {
		if p.Spec.VirtualHost == nil || wanted[p.Name] {
			continue
		}
		k := vhost{resources.ProxyClass(p), p.Spec.VirtualHost.Fqdn}
		if _, ok := byHost[k]; !ok {
			byHost[k] = p.Name
		}
	}
	for _, d := range desired {
		if d.Spec.VirtualHost == nil || exists[d.Name] {
			continue
		}
		k := vhost{resources.ProxyClass(d), d.Spec.VirtualHost.Fqdn}
		if name, ok := byHost[k]; ok {
			d.Name = name
			delete(byHost, k)
		}
	}
}

// Stale returns the serving proxies that the desired state no longer has
// (hosts that left the spec or moved class). They are deleted in Switch,
// after the warm proxies hold their backends.
func Stale(desired *resources.Serving, serving []*contourv1.HTTPProxy) []*contourv1.HTTPProxy {
	want := make(map[string]bool, len(desired.Proxies))
	for _, p := range desired.Proxies {
		want[p.Name] = true
	}
	var out []*contourv1.HTTPProxy
	for _, p := range serving {
		if !want[p.Name] {
			out = append(out, p)
		}
	}
	return out
}

// Release decides when the warm proxies of a KIngress may go: only once the
// newest generation is confirmed on every Envoy pod (readySince is when that
// happened, zero if it has not) and the hold for in-flight requests has
// passed. It returns whether to delete now, or else how long to wait.
func Release(warm []*contourv1.HTTPProxy, readySince time.Time, hold time.Duration, now time.Time) (bool, time.Duration) {
	if len(warm) == 0 || readySince.IsZero() {
		return false, 0
	}
	if left := readySince.Add(hold).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}
