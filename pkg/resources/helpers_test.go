package resources

import (
	"bytes"
	"context"

	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/hitless/hitless/pkg/probekey"

	// Sets SYSTEM_NAMESPACE, where Serving's routing CA lives.
	_ "knative.dev/pkg/system/testing"
)

func setOf(bs ...Backend) sets.Set[Backend] { return sets.New(bs...) }

// testKey is the controller's probe key in these tests; testToken opens the
// probe and warm routes of namespace ns, where the test KIngresses live.
var (
	testKey      = probekey.Key(bytes.Repeat([]byte{7}, probekey.Size))
	testToken, _ = testKey.Token(ns)
)

// bg is the context the reconciler gives the builders: it carries the key.
func bg() context.Context { return probekey.WithKey(context.Background(), testKey) }
