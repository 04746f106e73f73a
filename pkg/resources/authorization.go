package resources

import (
	"fmt"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
)

// The KIngress annotations by which net-contour puts a host behind an
// external authorization server (a Contour ExtensionService speaking
// Envoy's ext_authz protocol). Same keys, same meaning.
const (
	// AnnotationExtensionService names the ExtensionService.
	AnnotationExtensionService = "contour.networking.knative.dev/extension-service"
	// AnnotationExtensionServiceNamespace is its namespace; the KIngress's
	// own when unset.
	AnnotationExtensionServiceNamespace = "contour.networking.knative.dev/extension-service-namespace"
)

// authorizationOf returns the authorization server every virtual host of
// the KIngress is put behind, or nil when the KIngress asks for none.
func authorizationOf(ing *netv1alpha1.Ingress) (*contourv1.AuthorizationServer, error) {
	name, ok := ing.Annotations[AnnotationExtensionService]
	if !ok {
		return nil, nil
	}
	if name == "" {
		// Asked for, but naming nothing: serving the hosts open would be
		// failing open.
		return nil, &SpecError{Reason: "InvalidAuthorization", Message: fmt.Sprintf(
			"annotation %s is empty: set it to the name of a Contour ExtensionService, or remove it to serve the KIngress without authorization",
			AnnotationExtensionService)}
	}
	return &contourv1.AuthorizationServer{ExtensionServiceRef: contourv1.ExtensionServiceReference{
		Namespace: ing.Annotations[AnnotationExtensionServiceNamespace],
		Name:      name,
	}}, nil
}

// authorizationNeedsTLS is the error for a host that would be authorized but
// does not terminate TLS. Contour puts Envoy's ext_authz filter only on the
// HTTPS listener of a virtual host (and invalidates a plain one that asks
// for it), so such a host would be served without authorization or not at
// all: neither is written.
func authorizationNeedsTLS(ing *netv1alpha1.Ingress, host string) error {
	return &SpecError{Reason: "AuthorizationWithoutTLS", Message: fmt.Sprintf(
		"host %q has no TLS certificate, and the KIngress's annotation %s asks for authorization, which Contour applies only to hosts that terminate TLS: "+
			"give the host a certificate (spec.tls, or config-contour's default-tls-secret for external hosts), or remove the annotation",
		host, AnnotationExtensionService)}
}
