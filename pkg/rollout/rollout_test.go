package rollout

import (
	"testing"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/hitless/hitless/pkg/resources"
)

const (
	ext = "contour-external"
	in  = "contour-internal"
)

var (
	blue  = resources.Backend{Namespace: "ns", Name: "blue", Port: 80}
	green = resources.Backend{Namespace: "ns", Name: "green", Port: 80}
	red   = resources.Backend{Namespace: "ns", Name: "red", Port: 80}
)

func proxy(name, class string, bs ...resources.Backend) *contourv1.HTTPProxy {
	p := &contourv1.HTTPProxy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       contourv1.HTTPProxySpec{IngressClassName: class},
	}
	r := contourv1.Route{}
	for _, b := range bs {
		s := contourv1.Service{Name: b.Name, Port: int(b.Port)}
		if b.Protocol != "" {
			proto := b.Protocol
			s.Protocol = &proto
		}
		r.Services = append(r.Services, s)
	}
	p.Spec.Routes = []contourv1.Route{r}
	return p
}

func serving(backends resources.ClassBackends, proxies ...*contourv1.HTTPProxy) *resources.Serving {
	return &resources.Serving{Backends: backends, Proxies: proxies}
}

func cb(class string, bs ...resources.Backend) resources.ClassBackends {
	return resources.ClassBackends{class: sets.New(bs...)}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name      string
		desired   *resources.Serving
		obs       Observed
		wantKeep  resources.ClassBackends
		wantNew   resources.ClassBackends
		wantProbe bool
	}{{
		name:     "a brand-new KIngress carries no traffic and skips Warm",
		desired:  serving(cb(ext, blue), proxy("a", ext, blue)),
		wantKeep: resources.ClassBackends{},
		wantNew:  resources.ClassBackends{},
	}, {
		name:      "net-contour's proxy (class in the annotation) is held like ours while a fresh backend is warmed",
		desired:   serving(cb(ext, green), proxy("a", ext, green)),
		obs:       Observed{Serving: []*contourv1.HTTPProxy{host(proxy("nc-a", ext, blue), "a.example.com", true)}},
		wantKeep:  cb(ext, blue, green),
		wantNew:   cb(ext, green),
		wantProbe: true,
	}, {
		name:     "net-contour's proxy of the same backends: taken over without a warm round",
		desired:  serving(cb(ext, blue), proxy("a", ext, blue)),
		obs:      Observed{Serving: []*contourv1.HTTPProxy{host(proxy("nc-a", ext, blue), "a.example.com", true)}},
		wantKeep: resources.ClassBackends{},
		wantNew:  resources.ClassBackends{},
	}, {
		name:     "steady state: same backends, no warm proxies, nothing to do",
		desired:  serving(cb(ext, blue), proxy("a", ext, blue)),
		obs:      Observed{Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue)}},
		wantKeep: resources.ClassBackends{},
		wantNew:  resources.ClassBackends{},
	}, {
		name:      "a fresh backend is warmed and probed while the old one is held",
		desired:   serving(cb(ext, green), proxy("a", ext, green)),
		obs:       Observed{Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue)}},
		wantKeep:  cb(ext, blue, green),
		wantNew:   cb(ext, green),
		wantProbe: true,
	}, {
		name:     "a percentage shift to a backend that already serves needs no probe, but the leaving one is held",
		desired:  serving(cb(ext, blue), proxy("a", ext, blue)),
		obs:      Observed{Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue, green)}},
		wantKeep: cb(ext, blue, green),
		wantNew:  resources.ClassBackends{},
	}, {
		name:    "a spec change mid-rollout adds to the warm set and never prunes it",
		desired: serving(cb(ext, red), proxy("a", ext, red)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue)},
			Warm:    []*contourv1.HTTPProxy{proxy("w", ext, blue, green)},
		},
		wantKeep:  cb(ext, blue, green, red),
		wantNew:   cb(ext, red),
		wantProbe: true,
	}, {
		name:    "after the switch was written (restart before confirmation), nothing is new and the warm set stays",
		desired: serving(cb(ext, green), proxy("a", ext, green)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, green)},
			Warm:    []*contourv1.HTTPProxy{proxy("w", ext, blue, green)},
		},
		wantKeep: cb(ext, blue, green),
		wantNew:  resources.ClassBackends{},
	}, {
		name:    "serving proxies left at mixed generations are all held",
		desired: serving(cb(ext, red), proxy("a", ext, red), proxy("b", ext, red)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, green), proxy("b", ext, blue)},
		},
		wantKeep:  cb(ext, blue, green, red),
		wantNew:   cb(ext, red),
		wantProbe: true,
	}, {
		name:    "backends are per class: a backend serving externally is new on the internal fleet, and only that fleet gets a warm proxy",
		desired: serving(resources.ClassBackends{ext: sets.New(blue), in: sets.New(blue)}, proxy("a", ext, blue), proxy("b", in, blue)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue)},
		},
		wantKeep:  cb(in, blue),
		wantNew:   cb(in, blue),
		wantProbe: true,
	}, {
		name:    "an old backend whose Service was deleted is held but never probed",
		desired: serving(cb(ext, green), proxy("a", ext, green)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, blue)},
		},
		wantKeep:  cb(ext, blue, green),
		wantNew:   cb(ext, green),
		wantProbe: true,
	}, {
		name:    "a held backend whose Service was deleted leaves the warm set, so Contour keeps the warm proxy valid",
		desired: serving(cb(ext, red), proxy("a", ext, red)),
		obs: Observed{
			Serving: []*contourv1.HTTPProxy{proxy("a", ext, green)},
			Warm:    []*contourv1.HTTPProxy{proxy("w", ext, blue, green)},
			Exists:  func(b resources.Backend) bool { return b != blue },
		},
		wantKeep:  cb(ext, green, red),
		wantNew:   cb(ext, red),
		wantProbe: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.desired, tc.obs)
			if !got.Keep.Equal(tc.wantKeep) {
				t.Errorf("Keep = %v, want %v", got.Keep, tc.wantKeep)
			}
			if !got.New.Equal(tc.wantNew) {
				t.Errorf("New = %v, want %v", got.New, tc.wantNew)
			}
			if got.Probe != tc.wantProbe {
				t.Errorf("Probe = %v, want %v", got.Probe, tc.wantProbe)
			}
			if got.NeedsWarm() != !tc.wantKeep.Empty() {
				t.Errorf("NeedsWarm = %v, want %v", got.NeedsWarm(), !tc.wantKeep.Empty())
			}
			// The invariant: whatever serves now stays referenced, by the
			// desired serving proxies or by the warm ones.
			if d := got.Held.Difference(tc.desired.Backends.Union(got.Keep)); !d.Empty() && tc.obs.Exists == nil {
				t.Errorf("held backends %v would lose their last reference", d)
			}
		})
	}
}

func TestStale(t *testing.T) {
	desired := serving(cb(ext, blue), proxy("a", ext, blue))
	got := Stale(desired, []*contourv1.HTTPProxy{proxy("a", ext, blue), proxy("gone-host", ext, blue)})
	if len(got) != 1 || got[0].Name != "gone-host" {
		t.Errorf("Stale = %v, want only gone-host", got)
	}
}

func TestRelease(t *testing.T) {
	now := time.Unix(1000, 0)
	warm := []*contourv1.HTTPProxy{proxy("w", ext, blue)}
	tests := []struct {
		name       string
		warm       []*contourv1.HTTPProxy
		readySince time.Time
		hold       time.Duration
		want       bool
		wantWait   time.Duration
	}{{
		name: "nothing to release without warm proxies",
	}, {
		name: "warm proxies stay until the newest generation is confirmed",
		warm: warm,
	}, {
		name:       "warm proxies stay through the hold after confirmation",
		warm:       warm,
		readySince: now.Add(-2 * time.Second),
		hold:       5 * time.Second,
		wantWait:   3 * time.Second,
	}, {
		name:       "warm proxies go once the hold has passed",
		warm:       warm,
		readySince: now.Add(-5 * time.Second),
		hold:       5 * time.Second,
		want:       true,
	}, {
		name:       "with no hold they go at confirmation",
		warm:       warm,
		readySince: now,
		want:       true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, wait := Release(tc.warm, tc.readySince, tc.hold, now)
			if got != tc.want || wait != tc.wantWait {
				t.Errorf("Release = (%v, %v), want (%v, %v)", got, wait, tc.want, tc.wantWait)
			}
		})
	}
}

func TestRejected(t *testing.T) {
	p := proxy("a", ext, blue)
	p.Generation = 2
	if bad, _ := Rejected(p); bad {
		t.Error("a proxy Contour has not judged yet is rejected")
	}
	p.Status = contourv1.HTTPProxyStatus{
		CurrentStatus: "invalid",
		Description:   "At least one error present, see Errors for details",
		Conditions: []contourv1.DetailedCondition{{
			Condition: contourv1.Condition{Type: contourv1.ValidConditionType, ObservedGeneration: 1},
		}},
	}
	if bad, _ := Rejected(p); bad {
		t.Error("a verdict on an older generation is taken for the current one")
	}
	p.Status.Conditions[0].ObservedGeneration = 2
	p.Status.Conditions[0].Errors = []contourv1.SubCondition{{Message: "Secret not found"}}
	bad, why := Rejected(p)
	if !bad || why != "At least one error present, see Errors for details; Secret not found" {
		t.Errorf("Rejected = (%v, %q), want Contour's reason", bad, why)
	}
}

// host gives a test proxy a virtual host; annotated moves its class from
// spec.ingressClassName to the annotation, as net-contour writes it.
func host(p *contourv1.HTTPProxy, fqdn string, annotated bool) *contourv1.HTTPProxy {
	p.Spec.VirtualHost = &contourv1.VirtualHost{Fqdn: fqdn}
	if annotated {
		p.Annotations = map[string]string{resources.ContourClassAnnotation: p.Spec.IngressClassName}
		p.Spec.IngressClassName = ""
	}
	return p
}

func TestAdopt(t *testing.T) {
	tests := []struct {
		name    string
		desired []*contourv1.HTTPProxy
		serving []*contourv1.HTTPProxy
		want    []string
	}{{
		name:    "nothing serves yet: our names",
		desired: []*contourv1.HTTPProxy{host(proxy("ours-a", ext, blue), "a.example.com", false)},
		want:    []string{"ours-a"},
	}, {
		name:    "net-contour's proxy of the host on the class is taken over under its name",
		desired: []*contourv1.HTTPProxy{host(proxy("ours-a", ext, blue), "a.example.com", false)},
		serving: []*contourv1.HTTPProxy{host(proxy("hello-contour-external-a.example.com", ext, blue), "a.example.com", true)},
		want:    []string{"hello-contour-external-a.example.com"},
	}, {
		name:    "a proxy of the same host on another class is another Contour's: not adopted",
		desired: []*contourv1.HTTPProxy{host(proxy("ours-a", ext, blue), "a.example.com", false)},
		serving: []*contourv1.HTTPProxy{host(proxy("hello-contour-internal-a.example.com", in, blue), "a.example.com", true)},
		want:    []string{"ours-a"},
	}, {
		name:    "ours exists next to net-contour's (both invalid): ours stays, the other is stale",
		desired: []*contourv1.HTTPProxy{host(proxy("ours-a", ext, blue), "a.example.com", false)},
		serving: []*contourv1.HTTPProxy{
			host(proxy("hello-contour-external-a.example.com", ext, blue), "a.example.com", true),
			host(proxy("ours-a", ext, blue), "a.example.com", false),
		},
		want: []string{"ours-a"},
	}, {
		name: "each host takes over its own proxy; a new host gets our name",
		desired: []*contourv1.HTTPProxy{
			host(proxy("ours-a", ext, green), "a.example.com", false),
			host(proxy("ours-b", ext, green), "b.example.com", false),
			host(proxy("ours-c", ext, green), "c.example.com", false),
		},
		serving: []*contourv1.HTTPProxy{
			host(proxy("nc-a", ext, blue), "a.example.com", true),
			host(proxy("nc-b", ext, blue), "b.example.com", true),
		},
		want: []string{"nc-a", "nc-b", "ours-c"},
	}, {
		name: "two old proxies of one host: the first by name is taken over, the other is stale",
		desired: []*contourv1.HTTPProxy{
			host(proxy("ours-a", ext, blue), "a.example.com", false),
		},
		serving: []*contourv1.HTTPProxy{
			host(proxy("nc-a1", ext, blue), "a.example.com", true),
			host(proxy("nc-a2", ext, blue), "a.example.com", true),
		},
		want: []string{"nc-a1"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Adopt(tt.desired, tt.serving)
			var got []string
			for _, d := range tt.desired {
				got = append(got, d.Name)
			}
			if !sets.New(got...).Equal(sets.New(tt.want...)) || len(got) != len(tt.want) {
				t.Errorf("names = %v, want %v", got, tt.want)
			}
			stale := Stale(&resources.Serving{Proxies: tt.desired}, tt.serving)
			for _, s := range stale {
				for _, w := range tt.want {
					if s.Name == w {
						t.Errorf("%s is both adopted and stale", w)
					}
				}
			}
		})
	}
}
