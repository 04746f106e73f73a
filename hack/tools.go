//go:build tools

// Package hack pins, in the main module's go.sum, the Knative networking
// test images the local stack runs as pods (built by hack/build-deps.sh at
// the same knative.dev/networking version as the controller).
package hack

import (
	_ "knative.dev/networking/test/test_images/grpc-ping"
	_ "knative.dev/networking/test/test_images/httpproxy"
	_ "knative.dev/networking/test/test_images/retry"
	_ "knative.dev/networking/test/test_images/runtime"
	_ "knative.dev/networking/test/test_images/timeout"
	_ "knative.dev/networking/test/test_images/wsserver"
)
