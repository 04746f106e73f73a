package resources

import (
	"k8s.io/apimachinery/pkg/util/sets"

	// Sets SYSTEM_NAMESPACE, where Serving's routing CA lives.
	_ "knative.dev/pkg/system/testing"
)

func setOf(bs ...Backend) sets.Set[Backend] { return sets.New(bs...) }
