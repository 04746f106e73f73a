package probe

import (
	"context"
	"fmt"
	"net/url"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/sets"
)

// BenchmarkRoundMemory reports the heap a round in flight holds: KIngresses
// shaped like the scale bench's (one external host, three cluster-local
// ones) waiting on 4 Envoy pods. The first probe is put off for an hour, so
// what is measured is the state, not traffic.
//
//	go test ./pkg/probe -run '^$' -bench RoundMemory -benchtime 1x
func BenchmarkRoundMemory(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				lister := listerFunc(func(_ context.Context, paths []Path) ([]Target, error) {
					var urls []*url.URL
					for _, path := range paths {
						urls = append(urls, &url.URL{Scheme: "http", Host: path.Host, Path: path.Prefix})
					}
					return []Target{{Class: "contour-external", PodIPs: sets.New("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"), PodPort: "8080", URLs: urls}}, nil
				})
				p := New(zap.NewNop().Sugar(), lister, func(RoundKey) {}, Options{InitialDelay: time.Hour, Key: testKey})
				done := make(chan struct{})
				p.Start(done)
				ings := make([]Round, n)
				for i := range ings {
					name := fmt.Sprint("ksvc-", i)
					ings[i] = kingress(name, name+".example.com", name+".ns", name+".ns.svc", name+".ns.svc.cluster.local")
				}
				before := heap()
				for _, ing := range ings {
					if _, err := p.IsReady(context.Background(), ing); err != nil {
						b.Fatal(err)
					}
				}
				after := heap()
				b.ReportMetric(float64(after-before)/float64(n), "bytes/round")
				b.ReportMetric(float64(after-before)/(1<<20), "MiB")
				for _, ing := range ings {
					p.Cancel(ing.Key)
				}
				if got := p.Rounds(); got != 0 {
					b.Fatalf("%d rounds left after cancelling every one", got)
				}
				close(done)
			}
		})
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
