// Command controller runs hitless: the Knative ingress plugin that programs
// Contour HTTPProxies and never drops a request while a rollout moves
// traffic between backends.
package main

import (
	"context"
	"os"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection"
	"knative.dev/pkg/injection/sharedmain"
	"knative.dev/pkg/signals"

	// Registers the HTTPProxy client and informers with injection.
	_ "github.com/hitless/hitless/pkg/client/injection/client"
	_ "github.com/hitless/hitless/pkg/client/injection/informers/projectcontour/v1/httpproxy"

	"github.com/hitless/hitless/pkg/reconciler/contour"
)

// leaderElectionEnv names the ConfigMap of leader election, read by
// knative.dev/pkg. Its default, config-leader-election, is Serving's own in
// the same namespace: hitless reads its own unless told otherwise, so its
// settings (short leases, 10 buckets) never replace Serving's.
const (
	leaderElectionEnv       = "CONFIG_LEADERELECTION_NAME"
	defaultLeaderElectionCM = "config-leader-election-hitless"
)

// classEnv overrides the KIngress class served (for running two
// controllers side by side, or a canary of a new release).
const classEnv = "INGRESS_CLASS"

const (
	// A KIngress costs one write per host plus a status update; client-go's
	// default of 5 requests/s would make a thousand of them take minutes.
	// --kube-api-qps / KUBE_API_QPS (and -burst) still override these.
	defaultQPS   = 100
	defaultBurst = 200
	// Reconciles are short and mostly wait on the API server.
	workers = 8
)

func main() {
	class := os.Getenv(classEnv)
	if class == "" {
		class = contour.DefaultIngressClass
	}
	if os.Getenv(leaderElectionEnv) == "" {
		os.Setenv(leaderElectionEnv, defaultLeaderElectionCM)
	}
	cfg := injection.ParseAndGetRESTConfigOrDie()
	if cfg.QPS == 0 {
		cfg.QPS = defaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = defaultBurst
	}
	controller.DefaultThreadsPerController = workers
	sharedmain.MainWithConfig(signals.NewContext(), "hitless-controller", cfg,
		func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
			return contour.NewControllerForClass(ctx, cmw, class)
		})
}
