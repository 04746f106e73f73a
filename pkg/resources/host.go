package resources

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/hitless/hitless/pkg/resources/names"
)

// validHost checks a host the way Contour will, so that a bad host becomes a
// condition on the KIngress rather than an invalid proxy.
func validHost(h string, reservedOK bool) error {
	if h == "" {
		return fmt.Errorf("empty host")
	}
	if strings.HasPrefix(h, "*.") {
		h = strings.TrimPrefix(h, "*.")
	}
	if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	if !reservedOK && (strings.HasSuffix(h, "."+names.WarmDomain) || h == names.WarmDomain) {
		return fmt.Errorf("the domain %s is reserved for hitless's warm proxies", names.WarmDomain)
	}
	return nil
}
