// Command controller runs hitless: the Knative ingress plugin that programs
// Contour HTTPProxies and never drops a request while a rollout moves
// traffic between backends.
package main

import (
	"context"
	"os"

	"knative.dev/pkg/configmap"
	"knative.dev/pkg/controller"
	"knative.dev/pkg/injection/sharedmain"

	// Registers the HTTPProxy client and informers with injection.
	_ "github.com/hitless/hitless/pkg/client/injection/client"
	_ "github.com/hitless/hitless/pkg/client/injection/informers/projectcontour/v1/httpproxy"

	"github.com/hitless/hitless/pkg/reconciler/contour"
)

// classEnv overrides the KIngress class served (for running two
// controllers side by side, or a canary of a new release).
const classEnv = "INGRESS_CLASS"

func main() {
	class := os.Getenv(classEnv)
	if class == "" {
		class = contour.DefaultIngressClass
	}
	sharedmain.Main("hitless-controller", func(ctx context.Context, cmw configmap.Watcher) *controller.Impl {
		return contour.NewControllerForClass(ctx, cmw, class)
	})
}
