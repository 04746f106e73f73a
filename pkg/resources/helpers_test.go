package resources

import "k8s.io/apimachinery/pkg/util/sets"

func setOf(bs ...Backend) sets.Set[Backend] { return sets.New(bs...) }
