package main

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
)

// apiCounts are the API server's write requests so far, by
// "resource[/subresource] VERB" and, for a refused one, its code, read
// from its own apiserver_request_total: the API server counts every
// client's writes (ours, Contour's, the controller manager's, the
// bench's), and the resource says whose they are (httpproxies: hitless;
// httpproxies/status: Contour; ingresses/status: hitless; ingresses: the
// bench).
type apiCounts map[string]float64

var requestLine = regexp.MustCompile(`^apiserver_request_total\{(.*)\} ([0-9.e+]+)$`)
var label = regexp.MustCompile(`(\w+)="([^"]*)"`)

func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
		return true
	}
	return false
}

// scrapeAPIWrites reads the API server's /metrics through the bench's
// client (the local stack's admin may read it).
func scrapeAPIWrites(ctx context.Context, kube kubernetes.Interface) (apiCounts, error) {
	b, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's /metrics: %w", err)
	}
	return parseAPIWrites(string(b)), nil
}

func parseAPIWrites(text string) apiCounts {
	out := apiCounts{}
	for _, line := range strings.Split(text, "\n") {
		m := requestLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range label.FindAllStringSubmatch(m[1], -1) {
			labels[l[1]] = l[2]
		}
		if !isWrite(labels["verb"]) || labels["dry_run"] != "" {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			continue
		}
		res := labels["resource"]
		if s := labels["subresource"]; s != "" {
			res += "/" + s
		}
		key := res + " " + labels["verb"]
		if code, _ := strconv.Atoi(labels["code"]); code >= 400 {
			// Refused (a conflict, say): still a request the API server
			// served, counted apart so that it shows.
			key += " " + labels["code"]
		}
		out[key] += v
	}
	return out
}

// since is what was written after before.
func (a apiCounts) since(before apiCounts) apiCounts { return growth(a, before, 0) }

// growth is how much each of now's counters grew since before, keeping
// those that grew by more than above.
func growth[M ~map[string]float64](now, before M, above float64) M {
	out := M{}
	for k, v := range now {
		if d := v - before[k]; d > above {
			out[k] = d
		}
	}
	return out
}

func (a apiCounts) total() float64 {
	t := 0.0
	for _, v := range a {
		t += v
	}
	return t
}

// top is the n largest entries, largest first, as "key count".
func (a apiCounts) top(n int) []string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if a[keys[i]] != a[keys[j]] {
			return a[keys[i]] > a[keys[j]]
		}
		return keys[i] < keys[j]
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s %.0f", k, a[k])
	}
	return out
}
