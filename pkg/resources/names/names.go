// Package names holds one function per name hitless gives to an object or a
// host: deterministic, valid and at most 63 characters for any input.
package names

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/kmeta"
)

// WarmDomain is the reserved suffix of warm hosts. RFC 2606 reserves
// `.invalid`, so no real client can ever own or resolve such a host.
const WarmDomain = "hitless.invalid"

func digest(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:])
}

// ServingProxy names the serving HTTPProxy of one host of a KIngress on one
// Contour class.
func ServingProxy(ingress, class, host string) string {
	return kmeta.ChildName(ingress, "-"+digest(class, host)[:10])
}

// WarmProxy names the warm HTTPProxy of a KIngress on one Contour class.
func WarmProxy(ingress, class string) string {
	return kmeta.ChildName(ingress, "-warm-"+digest(class)[:8])
}

// WarmHost is the synthetic host of the warm proxy of a KIngress on one
// class: unique per (namespace, name, class), one DNS label plus WarmDomain.
func WarmHost(namespace, ingress, class string) string {
	return "w" + digest(namespace, ingress, class)[:20] + "." + WarmDomain
}

// BackendPath is the path prefix under which a warm proxy routes to one
// backend, so that each backend is probed on its own.
func BackendPath(backendKey string) string {
	return "/hitless-warm/" + digest(backendKey)[:16]
}

// LabelValue returns name when it is a valid label value, else a digest of
// it (KIngress names may be up to 253 characters; label values only 63).
func LabelValue(name string) string {
	if len(validation.IsValidLabelValue(name)) == 0 {
		return name
	}
	return "h" + digest(name)[:40]
}
