//go:build e2e

package serving

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hitless/hitless/test/harness"
)

// TestServingGRPCStreamingRolloutDropsNothing: a Knative Service of Serving's
// grpc-ping image (an h2c port) is rolled to a new Revision GRPC_UPDATES
// times while clients on every external Envoy pod run PingStream without a
// pause: each stream sends streamPings pings and must get each one back with
// the suffix of a Revision the Route sent traffic to at some moment while
// the stream was open. A stream lives well under a second, as an RPC of a
// real streaming client does between its reconnects; one that outlived its
// Revision by minutes could not survive any ingress. Every stream that
// fails (to open, mid-way, or with another Revision's answer) counts. It
// runs in whatever encryption config-network has: `make test-serving` runs
// it in the clear, `make test-serving-tls` with system-internal-tls, where
// Envoy reaches the revision over h2 (HTTP/2 over TLS).
func TestServingGRPCStreamingRolloutDropsNothing(t *testing.T) {
	ctx := context.Background()
	st := newServingTest(ctx, t, "serving-grpc")
	updates := harness.EnvInt("GRPC_UPDATES", 5)
	workers := harness.EnvInt("GRPC_STREAMS", 8)
	encrypted := systemInternalTLS(ctx, t, st)

	const name = "ping"
	first := st.create(ctx, t, grpcService(st.ns, name, st.image("grpc-ping"), 1))
	targets := st.c.MustFleetTargets(ctx, t, "contour-external", fmt.Sprintf("%s.%s.%s", name, st.ns, st.domain))

	load := newStreamLoad(targets, workers)
	load.allow(suffixOf(1))
	stop := load.start(ctx, t)
	defer stop()
	time.Sleep(2 * time.Second)

	var readyIn []time.Duration
	for i := 2; i <= updates+1; i++ {
		load.allow(suffixOf(i-1), suffixOf(i))
		start := time.Now()
		if err := updateService(ctx, st.svcs, name, func(u *unstructured.Unstructured) { setSuffix(u, i) }); err != nil {
			t.Fatal(err)
		}
		if _, err := waitServiceReady(ctx, st.svcs, name, revisionName(name, i), 2*time.Minute); err != nil {
			t.Fatalf("update %d: %v", i-1, err)
		}
		readyIn = append(readyIn, time.Since(start))
		load.allow(suffixOf(i))
		// streams that start now must reach the new Revision only
		time.Sleep(2 * time.Second)
	}
	stop()
	streams, failed, failures := load.summary()
	for _, f := range failures {
		t.Errorf("stream failed: %s", f)
	}
	t.Logf("first Revision %s; %d updates, Ready after p50 %v, max %v; %d streams of %d pings over %d Envoy pods, %d failed (system-internal-tls: %v)",
		first, updates, harness.Percentile(readyIn, 50), harness.Percentile(readyIn, 100), streams, streamPings, len(targets), failed, encrypted)
	fmt.Printf("serving-grpc-rollout: system_internal_tls=%v updates=%d streams=%d failed=%d ready_p50_ms=%d\n",
		encrypted, updates, streams, failed, harness.Percentile(readyIn, 50).Milliseconds())
	if streams < workers*updates {
		t.Errorf("only %d streams ran, want at least %d", streams, workers*updates)
	}
}

// systemInternalTLS reports config-network's system-internal-tls, for the
// test's log: the test itself runs the same either way.
func systemInternalTLS(ctx context.Context, t *testing.T, st *servingTest) bool {
	cm, err := st.c.Kube.CoreV1().ConfigMaps("knative-serving").Get(ctx, "config-network", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read config-network: %v", err)
	}
	return strings.EqualFold(cm.Data["system-internal-tls"], "enabled")
}

// grpcService is a Knative Service of Serving's grpc-ping image, served
// over h2c (its port named h2c, as Serving's gRPC e2e tests name it), whose
// answers end in SUFFIX.
func grpcService(ns, name, image string, n int) *unstructured.Unstructured {
	u := knativeService(ns, name, image, 0)
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["ports"] = []any{map[string]any{"name": "h2c", "containerPort": int64(8080)}}
	_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
	setSuffix(u, n)
	return u
}

func setSuffix(u *unstructured.Unstructured, n int) {
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	ctr := containers[0].(map[string]any)
	ctr["env"] = []any{map[string]any{"name": "SUFFIX", "value": suffixOf(n)}}
	_ = unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers")
}

// suffixOf is what the n-th Revision appends to every pong.
func suffixOf(n int) string { return "/rev" + strconv.Itoa(n) }

// streamPings is how many pings each stream sends and must get back.
const streamPings = 5

// streamLoad runs PingStream without a pause from workers clients spread
// over the targets, each on its own HTTP/2 connection, and records every
// stream against the Revisions allowed while it was open.
type streamLoad struct {
	targets []harness.Target
	workers int

	mu       sync.Mutex
	timeline []allowedAt
	streams  int
	failures []string
}

type allowedAt struct {
	at       time.Time
	suffixes []string
}

func newStreamLoad(targets []harness.Target, workers int) *streamLoad {
	return &streamLoad{targets: targets, workers: workers}
}

// allow sets the Revisions (their suffixes) that may answer from now on.
func (l *streamLoad) allow(suffixes ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timeline = append(l.timeline, allowedAt{at: time.Now(), suffixes: suffixes})
}

// allowedDuring tells whether suffix was allowed at some moment of [from, to].
func (l *streamLoad) allowedDuring(suffix string, from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, a := range l.timeline {
		end := to
		if i+1 < len(l.timeline) {
			end = l.timeline[i+1].at
		}
		if end.Before(from) || a.at.After(to) {
			continue
		}
		for _, s := range a.suffixes {
			if s == suffix {
				return true
			}
		}
	}
	return false
}

func (l *streamLoad) start(ctx context.Context, t *testing.T) (stop func()) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < l.workers; w++ {
		target := l.targets[w%len(l.targets)]
		conn, err := grpc.NewClient("passthrough:///"+target.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority(target.Host))
		if err != nil {
			cancel()
			t.Fatalf("gRPC client for %s: %v", target.Addr, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			for n := 0; lctx.Err() == nil; n++ {
				start := time.Now()
				suffix, err := pingStream(lctx, conn, fmt.Sprintf("w%d-%d-", w, n))
				if lctx.Err() != nil {
					return // stopped mid-stream: not the ingress's doing
				}
				l.record(target.Addr, start, suffix, err)
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

func (l *streamLoad) record(addr string, start time.Time, suffix string, err error) {
	end := time.Now()
	if err == nil && !l.allowedDuring(suffix, start, end) {
		err = fmt.Errorf("answered by %q, not a Revision the Route sent traffic to then", suffix)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.streams++
	if err != nil {
		l.failures = append(l.failures, fmt.Sprintf("%s at %s (%v): %v", addr, start.Format("15:04:05.000"), end.Sub(start), err))
	}
}

func (l *streamLoad) summary() (streams, failed int, failures []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streams, len(l.failures), append([]string(nil), l.failures...)
}

// pingStream runs one PingStream of streamPings pings and returns the suffix
// of the Revision that answered them all.
func pingStream(ctx context.Context, conn *grpc.ClientConn, prefix string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/ping.PingService/PingStream")
	if err != nil {
		return "", fmt.Errorf("open: %w", err)
	}
	suffix := ""
	for i := 0; i < streamPings; i++ {
		msg := prefix + strconv.Itoa(i)
		if err := s.SendMsg(&pingMsg{Msg: msg}); err != nil {
			return "", fmt.Errorf("send %d: %w", i, err)
		}
		var pong pingMsg
		if err := s.RecvMsg(&pong); err != nil {
			return "", fmt.Errorf("receive %d: %w", i, err)
		}
		got, ok := strings.CutPrefix(pong.Msg, msg)
		if !ok || (suffix != "" && got != suffix) {
			return "", fmt.Errorf("pong %d is %q for ping %q (earlier pongs ended in %q)", i, pong.Msg, msg, suffix)
		}
		suffix = got
	}
	if err := s.CloseSend(); err != nil {
		return "", fmt.Errorf("close: %w", err)
	}
	if err := s.RecvMsg(&pingMsg{}); !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("end of stream: %v", err)
	}
	return suffix, nil
}

// pingMsg is grpc-ping's Request and Response alike (ping.proto: one
// string, field 1), encoded here so that the main module need not depend
// on Serving's generated code.
type pingMsg struct{ Msg string }

// pingCodec replaces gRPC's proto codec in this test binary (nothing else
// in it speaks gRPC): registering under "proto" keeps the content-type
// application/grpc, the only one grpc-ping's handler accepts.
type pingCodec struct{}

func (pingCodec) Name() string { return "proto" }

func (pingCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*pingMsg)
	if !ok {
		return nil, fmt.Errorf("pingCodec cannot marshal %T", v)
	}
	return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), m.Msg), nil
}

func (pingCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*pingMsg)
	if !ok {
		return fmt.Errorf("pingCodec cannot unmarshal into %T", v)
	}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
		if num == 1 && typ == protowire.BytesType {
			s, n := protowire.ConsumeString(data)
			if n < 0 {
				return protowire.ParseError(n)
			}
			m.Msg, data = s, data[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, data)
		if n < 0 {
			return protowire.ParseError(n)
		}
		data = data[n:]
	}
	return nil
}

func init() { encoding.RegisterCodec(pingCodec{}) }
