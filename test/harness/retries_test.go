package harness

import "testing"

func TestParseClusterCounters(t *testing.T) {
	page := `# TYPE envoy_cluster_upstream_rq_retry counter
envoy_cluster_upstream_rq_retry{envoy_cluster_name="ns-a_b1_80_da39a3ee5e"} 3
envoy_cluster_upstream_rq_retry{envoy_cluster_name="ns-b_b1_80_da39a3ee5e"} 199
envoy_cluster_upstream_rq_retry_limit_exceeded{envoy_cluster_name="ns-a_b1_80_da39a3ee5e"} 7
envoy_cluster_upstream_rq_retry{envoy_cluster_name="ns-a_b2_80_da39a3ee5e"} 0
`
	got := ParseClusterCounters(page, "envoy_cluster_upstream_rq_retry")
	want := map[string]float64{"ns-a_b1_80_da39a3ee5e": 3, "ns-b_b1_80_da39a3ee5e": 199, "ns-a_b2_80_da39a3ee5e": 0}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
}

func TestRetryIncrease(t *testing.T) {
	for _, tc := range []struct {
		name      string
		last, now map[string]float64
		want      float64
	}{{
		name: "no change",
		last: map[string]float64{"p c1": 5},
		now:  map[string]float64{"p c1": 5},
		want: 0,
	}, {
		// What CI saw as -199: a cluster with earlier retries went away.
		name: "a cluster gone counts nothing",
		last: map[string]float64{"p c1": 199, "p c2": 0},
		now:  map[string]float64{"p c2": 0},
		want: 0,
	}, {
		name: "a cluster new in the window counts from zero",
		last: map[string]float64{"p c1": 4},
		now:  map[string]float64{"p c1": 4, "p c2": 2},
		want: 2,
	}, {
		name: "a counter that went down started over",
		last: map[string]float64{"p c1": 10},
		now:  map[string]float64{"p c1": 3},
		want: 3,
	}, {
		name: "increases add up over pods and clusters",
		last: map[string]float64{"p1 c1": 1, "p2 c1": 1},
		now:  map[string]float64{"p1 c1": 2, "p2 c1": 4},
		want: 4,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RetryIncrease(tc.last, tc.now); got != tc.want {
				t.Errorf("RetryIncrease = %v, want %v", got, tc.want)
			}
		})
	}
}
