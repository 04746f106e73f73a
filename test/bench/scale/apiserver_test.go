package main

import (
	"reflect"
	"testing"
)

func TestParseAPIWrites(t *testing.T) {
	text := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="projectcontour.io",resource="httpproxies",scope="resource",subresource="",verb="POST",version="v1"} 80
apiserver_request_total{code="409",component="apiserver",dry_run="",group="projectcontour.io",resource="httpproxies",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="projectcontour.io",resource="httpproxies",scope="resource",subresource="status",verb="PUT",version="v1"} 103
apiserver_request_total{code="200",component="apiserver",dry_run="All",group="",resource="services",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 900
apiserver_request_total{code="200",component="apiserver",dry_run="",group="networking.internal.knative.dev",resource="ingresses",scope="resource",subresource="status",verb="PUT",version="v1alpha1"} 1.5e+01
apiserver_request_duration_seconds_count{verb="POST"} 5
`
	got := parseAPIWrites(text)
	want := apiCounts{"httpproxies POST": 80, "httpproxies POST 409": 2, "httpproxies/status PUT": 103, "ingresses/status PUT": 15}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parseAPIWrites() = %v, want %v (writes only, refused ones apart, dry runs and reads left out)", got, want)
	}
	later := apiCounts{"httpproxies POST": 88, "httpproxies POST 409": 2, "httpproxies/status PUT": 103, "ingresses/status PUT": 20, "leases PUT": 3}
	d := later.since(got)
	if want := (apiCounts{"httpproxies POST": 8, "ingresses/status PUT": 5, "leases PUT": 3}); !reflect.DeepEqual(d, want) {
		t.Errorf("since() = %v, want %v", d, want)
	}
	if d.total() != 16 || ours(d) != 13 {
		t.Errorf("total() = %v, ours() = %v; want 16, 13", d.total(), ours(d))
	}
	if top := d.top(2); !reflect.DeepEqual(top, []string{"httpproxies POST 8", "ingresses/status PUT 5"}) {
		t.Errorf("top(2) = %v", top)
	}
}
