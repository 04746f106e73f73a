package resources

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"knative.dev/pkg/network"

	"github.com/hitless/hitless/pkg/resources/names"
)

// validHost checks a host the way Contour will, so that a bad host becomes a
// condition on the KIngress rather than an invalid proxy.
func validHost(h string) error {
	if h == "" {
		return fmt.Errorf("empty host")
	}
	if strings.HasPrefix(h, "*.") {
		h = strings.TrimPrefix(h, "*.")
	}
	if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if strings.HasSuffix(h, "."+names.WarmDomain) || h == names.WarmDomain {
		return fmt.Errorf("the domain %s is reserved for hitless's warm proxies", names.WarmDomain)
	}
	return nil
}

// clusterLocalNamespace returns the namespace whose Service a cluster-local
// host names, as the cluster's DNS resolves it: <name>.<ns>,
// <name>.<ns>.svc and <name>.<ns>.svc.<cluster domain> (the forms
// ingress.ExpandedHosts serves), and any longer name ending so. Such a
// host belongs to that namespace: a KIngress of another one that served it
// would take the in-cluster traffic of the Service's owner. A host of none
// of these forms (a DomainMapping's own domain of three or more labels)
// names no namespace.
func clusterLocalNamespace(host string) (string, bool) {
	name := host
	if n, ok := strings.CutSuffix(name, ".svc."+network.GetClusterDomainName()); ok {
		name = n
	} else if n, ok := strings.CutSuffix(name, ".svc"); ok {
		name = n
	} else if strings.Count(name, ".") != 1 {
		return "", false
	}
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return "", false
	}
	return name[i+1:], true
}
