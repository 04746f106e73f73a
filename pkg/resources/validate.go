package resources

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	netv1alpha1 "knative.dev/networking/pkg/apis/networking/v1alpha1"
	"knative.dev/networking/pkg/http/header"

	"github.com/hitless/hitless/pkg/probekey"
)

// ValidateSpec refuses a KIngress whose proxies Contour v1.33 or Envoy would
// refuse or read otherwise than the KIngress says. Anything it lets through
// is written; so a bad value here is a bad value in a live route
// configuration: Contour refusing the proxy takes its host down (404), and
// Envoy refusing a route configuration freezes every route of the fleet,
// other tenants' included. Refused here instead, the KIngress gets a
// condition naming the field and the previous generation keeps serving.
//
// Hosts are checked where they are expanded (vhostsOf, validHost), and a
// rule without http or hosts, or a path without splits, where they are read;
// everything else is checked here, before anything is built.
func ValidateSpec(ing *netv1alpha1.Ingress) error {
	if err := validHTTPOption(ing.Spec.HTTPOption); err != nil {
		return err
	}
	if err := validAuthorization(ing.Annotations); err != nil {
		return err
	}
	for i, t := range ing.Spec.TLS {
		if err := validTLS(fmt.Sprintf("spec.tls[%d]", i), t); err != nil {
			return err
		}
	}
	for i, r := range ing.Spec.Rules {
		if r.HTTP == nil {
			continue
		}
		for j, p := range r.HTTP.Paths {
			if err := validPath(fmt.Sprintf("spec.rules[%d].http.paths[%d]", i, j), p); err != nil {
				return err
			}
		}
	}
	return nil
}

// validHTTPOption accepts what Knative's API defines. Empty is what Serving
// writes when the option is unset, served as Redirected (as net-contour
// does: only Enabled serves plain HTTP beside HTTPS, see
// routeOptions.userInsecure); any other value would be a guess, so it is
// refused.
func validHTTPOption(o netv1alpha1.HTTPOption) error {
	switch o {
	case "", netv1alpha1.HTTPOptionEnabled, netv1alpha1.HTTPOptionRedirected:
		return nil
	}
	return &SpecError{Reason: "InvalidHTTPOption", Message: fmt.Sprintf(
		"spec.httpOption: %q is not an HTTP option: use %q (serve plain HTTP too), %q (redirect plain HTTP to HTTPS) or leave it empty (redirect)",
		o, netv1alpha1.HTTPOptionEnabled, netv1alpha1.HTTPOptionRedirected)}
}

// validAuthorization checks the extension-service annotations: they become
// the ExtensionServiceReference of every virtual host, the name and
// namespace of an ExtensionService object. A name no object can have would
// leave the hosts invalid in Contour (not found), so they are refused here.
// An empty namespace stands for the KIngress's own, as in net-contour.
func validAuthorization(annotations map[string]string) error {
	name, ok := annotations[AnnotationExtensionService]
	if !ok {
		return nil
	}
	field := fmt.Sprintf("metadata.annotations[%q]", AnnotationExtensionService)
	if name == "" {
		return &SpecError{Reason: "InvalidAuthorization", Message: field +
			": is empty: set it to the name of a Contour ExtensionService, or remove it to serve the KIngress without authorization"}
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return &SpecError{Reason: "InvalidAuthorization", Message: fmt.Sprintf(
			"%s: %q is not an object name (%s): set it to the name of a Contour ExtensionService",
			field, name, strings.Join(errs, "; "))}
	}
	nsName := annotations[AnnotationExtensionServiceNamespace]
	if nsName == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(nsName); len(errs) > 0 {
		return &SpecError{Reason: "InvalidAuthorization", Message: fmt.Sprintf(
			"metadata.annotations[%q]: %q is not a namespace name (%s): set it to the ExtensionService's namespace, or remove it for the KIngress's own",
			AnnotationExtensionServiceNamespace, nsName, strings.Join(errs, "; "))}
	}
	return nil
}

// validTLS checks the secret a TLS entry names. The proxy refers to it as
// name or namespace/name (secretRef), which Contour splits at the '/': only
// object names keep that reference unambiguous.
// Messages name the entry's hosts too: those are what stop being served.
func validTLS(field string, t netv1alpha1.IngressTLS) error {
	hosts := fmt.Sprintf("%q", t.Hosts)
	if t.SecretName == "" {
		return &SpecError{Reason: "InvalidTLS", Message: fmt.Sprintf(
			"%s.secretName: is empty: name the Secret holding the certificate of hosts %s", field, hosts)}
	}
	if errs := validation.IsDNS1123Subdomain(t.SecretName); len(errs) > 0 {
		return &SpecError{Reason: "InvalidTLS", Message: fmt.Sprintf(
			"%s.secretName: %q is not a Secret name (%s): name the Secret holding the certificate of hosts %s",
			field, t.SecretName, strings.Join(errs, "; "), hosts)}
	}
	if t.SecretNamespace == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(t.SecretNamespace); len(errs) > 0 {
		return &SpecError{Reason: "InvalidTLS", Message: fmt.Sprintf(
			"%s.secretNamespace: %q is not a namespace name (%s): name the namespace of the Secret for hosts %s",
			field, t.SecretNamespace, strings.Join(errs, "; "), hosts)}
	}
	return nil
}

// validPath checks one path of a rule: its prefix, header matches, Host
// rewrite, the headers set on it and on its splits, and the splits' shares.
func validPath(field string, p netv1alpha1.HTTPIngressPath) error {
	if err := validPrefix(field+".path", p.Path); err != nil {
		return err
	}
	if err := validHeaderMatches(field+".headers", p.Headers); err != nil {
		return err
	}
	if p.RewriteHost != "" {
		if err := validRewriteHost(field+".rewriteHost", p.RewriteHost); err != nil {
			return err
		}
	}
	if err := validSetHeaders(field+".appendHeaders", p.AppendHeaders); err != nil {
		return err
	}
	for k, s := range p.Splits {
		if err := validSetHeaders(fmt.Sprintf("%s.splits[%d].appendHeaders", field, k), s.AppendHeaders); err != nil {
			return err
		}
	}
	return validSplits(field+".splits", p.Splits)
}

// validPrefix checks the prefix a path becomes (prefixOf). Contour refuses
// a prefix that does not start with '/' (pathMatchConditionsValid) and
// merges repeated slashes (mergePathMatchConditions), so "/a//b" would
// route "/a/b". Envoy matches the prefix against the request path after
// normalizing it (RFC 3986, normalize_path, which Contour always sets):
// dot segments removed, escapes of unreserved characters decoded, and a
// request path holds only URI characters, so a prefix with anything else
// (a space, a control or non-ASCII byte, '?', '#', '\') matches no
// request. Only prefixes a normalized path can begin with are accepted.
func validPrefix(field, path string) error {
	prefix := prefixOf(path)
	bad := func(why string) error {
		return &SpecError{Reason: "InvalidPath", Message: fmt.Sprintf("%s: %q %s", field, path, why)}
	}
	if strings.Contains(prefix, "//") {
		return bad("has an empty segment ('//'), which Contour merges into one '/': write the path with single slashes")
	}
	for _, seg := range strings.Split(prefix, "/") {
		if seg == "." || seg == ".." {
			return bad("has a dot segment ('" + seg + "'), which Envoy removes from request paths before routing: write the path without it")
		}
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		switch {
		case c == '%':
			if i+2 >= len(prefix) || !isHex(prefix[i+1]) || !isHex(prefix[i+2]) {
				return bad("has a '%' that does not start a %XX escape: write '%25' for a literal '%'")
			}
			v, _ := strconv.ParseUint(prefix[i+1:i+3], 16, 8)
			if isUnreserved(byte(v)) {
				return bad(fmt.Sprintf("escapes %q as %s, which Envoy decodes in request paths before routing: write the character itself", rune(v), prefix[i:i+3]))
			}
			i += 2
		case c == '?' || c == '#':
			return bad(fmt.Sprintf("has %q, which starts the query or fragment, not part of a path: remove it, or write it escaped", c))
		case c <= ' ' || c >= 0x7f:
			return bad(fmt.Sprintf("has the byte 0x%02X, which no request path holds raw: write it %%-escaped", c))
		case !isPathChar(c):
			return bad(fmt.Sprintf("has %q, which is not a URI path character: write it %%-escaped", c))
		}
	}
	return nil
}

// validHeaderMatches checks the exact header matches of a path. Contour
// drops a condition whose exact value is empty (headerMatchConditions),
// which would serve the route to every request, and refuses two exact
// conditions on one header, names compared case-insensitively
// (headerMatchConditionsValid). A name that is not an HTTP token, or a value
// with a control character or surrounding whitespace (Envoy strips it from
// request headers), can match no request.
func validHeaderMatches(field string, headers map[string]netv1alpha1.HeaderMatch) error {
	seen := map[string]string{}
	for _, name := range sortedKeys(headers) {
		f := fmt.Sprintf("%s[%q]", field, name)
		bad := func(why string) error {
			return &SpecError{Reason: "InvalidHeader", Message: f + ": " + why}
		}
		if name == "" {
			return bad("the header name is empty: name the request header to match")
		}
		if !isToken(name) {
			return bad("the header name is not an HTTP token (RFC 7230: letters, digits and !#$%&'*+-.^_`|~), so no request carries it: fix the name")
		}
		if other, ok := seen[strings.ToLower(name)]; ok {
			return bad(fmt.Sprintf("matches the same header as %q (header names are case-insensitive), which Contour refuses: keep one", other))
		}
		switch http.CanonicalHeaderKey(name) {
		case http.CanonicalHeaderKey(header.HashKey):
			// The path's probe route (ingress.InsertProbe) matches it too:
			// Contour refuses two exact conditions on one header and
			// would invalidate the proxy, taking the host down.
			return bad("is matched by the ingress's probe routes (K-Network-Hash: override), so Contour would refuse the route: match another header")
		case http.CanonicalHeaderKey(probekey.Header):
			return bad("is the header of hitless's prober, reserved to its probe routes: match another header")
		}
		seen[strings.ToLower(name)] = name
		v := headers[name].Exact
		switch {
		case v == "":
			return bad("exact is empty, which Contour would drop, matching every request: give the value to match")
		case strings.TrimLeft(v, " \t") != v || strings.TrimRight(v, " \t") != v:
			return bad(fmt.Sprintf("exact %q has leading or trailing whitespace, which Envoy strips from request headers, so it never matches: trim it", v))
		case strings.IndexFunc(v, isCtl) >= 0:
			return bad(fmt.Sprintf("exact %q holds a control character, which no request header value holds: remove it", v))
		}
	}
	return nil
}

// validRewriteHost checks a Host rewrite: Envoy sends it upstream as the
// Host header as it is, so it must be a host name, with a port at most.
func validRewriteHost(field, h string) error {
	host, port, hasPort := strings.Cut(h, ":")
	if errs := validation.IsDNS1123Subdomain(host); len(errs) > 0 {
		return &SpecError{Reason: "InvalidRewriteHost", Message: fmt.Sprintf(
			"%s: %q is not a host name (%s): give the host the backend expects", field, h, strings.Join(errs, "; "))}
	}
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return &SpecError{Reason: "InvalidRewriteHost", Message: fmt.Sprintf(
				"%s: %q has port %q, not a number from 1 to 65535", field, h, port)}
		}
	}
	return nil
}

// envoyVariable matches what Contour's escapeHeaderValue leaves unescaped
// in a header value, so that Envoy substitutes it instead of sending the
// text: %REQ(header)%, its own %CONTOUR_NAMESPACE%, and Envoy's
// %DOWNSTREAM_...%, %HOSTNAME%, %PROTOCOL%, %UPSTREAM_REMOTE_ADDRESS%,
// %RESPONSE_FLAGS% and %RESPONSE_CODE_DETAILS% (every DOWNSTREAM_ name is
// matched, a few more than Contour lists, all refused alike).
var envoyVariable = regexp.MustCompile(`%(REQ\(:?[\w-]+(\?:?[\w-]+)?\)(:\d+)?|CONTOUR_[A-Z_]+|DOWNSTREAM_[A-Z0-9_]+|HOSTNAME|PROTOCOL|UPSTREAM_REMOTE_ADDRESS|RESPONSE_FLAGS|RESPONSE_CODE_DETAILS)%`)

// maxHeaderBytes is the most Envoy takes in a header name or value it adds
// (HeaderValue's proto validation).
const maxHeaderBytes = 16384

// validSetHeaders checks headers set on a route or a split. Contour refuses
// the proxy (headersPolicyRoute, headersPolicyService) for a name that is
// not letters, digits and '-' (validation.IsHTTPHeaderName, which also
// refuses pseudo-headers ':...'), for two names equal once canonicalized,
// and for Host, which is rewriteHost's. Its CRD refuses an empty value.
// Envoy refuses a value holding NUL, CR or LF, and with it the whole route
// configuration of every host on the fleet. K-Network-Hash is set by the
// probe routes of the same path, which a second spelling of it would make
// a duplicate there.
func validSetHeaders(field string, set map[string]string) error {
	seen := map[string]string{}
	for _, name := range sortedKeys(set) {
		f := fmt.Sprintf("%s[%q]", field, name)
		bad := func(why string) error {
			return &SpecError{Reason: "InvalidHeader", Message: f + ": " + why}
		}
		if err := setHeaderNameError(name); err != "" {
			return bad(err)
		}
		canon := http.CanonicalHeaderKey(name)
		if other, ok := seen[canon]; ok {
			return bad(fmt.Sprintf("sets the same header as %q (header names are case-insensitive), which Contour refuses: keep one", other))
		}
		seen[canon] = name
		if err := setHeaderValueError(set[name]); err != "" {
			return bad(err)
		}
	}
	return nil
}

// setHeaderNameError says what is wrong with the name of a header to set,
// or "" when Contour and Envoy take it.
func setHeaderNameError(name string) string {
	canon := http.CanonicalHeaderKey(name)
	switch {
	case name == "":
		return "the header name is empty: name the header to set"
	case strings.HasPrefix(name, ":"):
		return "is a pseudo-header, which Contour and Envoy do not let routes set: remove it"
	case len(validation.IsHTTPHeaderName(name)) > 0:
		return "Contour sets only header names of letters, digits and '-': fix the name"
	case len(name) > maxHeaderBytes:
		return fmt.Sprintf("the name is longer than Envoy's %d bytes", maxHeaderBytes)
	case canon == "Host":
		return "the Host header is set by rewriteHost: use it instead"
	case canon == http.CanonicalHeaderKey(header.HashKey):
		return "is set by the ingress's probe routes: remove it"
	case canon == http.CanonicalHeaderKey(probekey.Header):
		return "is the header of hitless's prober, which its probe routes remove: remove it"
	}
	return ""
}

// setHeaderValueError says what is wrong with the value of a header to set,
// or "" when Contour and Envoy take it literally.
func setHeaderValueError(v string) string {
	switch {
	case v == "":
		return "the value is empty, which Contour's HTTPProxy does not take: give a value, or remove the header"
	case strings.ContainsAny(v, "\x00\r\n"):
		return fmt.Sprintf("the value %q holds NUL, CR or LF, which Envoy refuses together with every route of the fleet: remove them", v)
	case len(v) > maxHeaderBytes:
		return fmt.Sprintf("the value is longer than Envoy's %d bytes", maxHeaderBytes)
	case envoyVariable.MatchString(v):
		return fmt.Sprintf("the value %q holds %s, which Contour passes to Envoy as a variable to substitute, not as text: remove it",
			v, envoyVariable.FindString(v))
	}
	return ""
}

// validSplits checks the shares of a path's splits. Contour reads them as
// relative weights (30 and 20 would be 60 % and 40 %), so they must be
// what Knative means by them: each a percent, together 100. A single split
// takes everything whatever it says (makeServices), and splits that are
// all 0 share evenly, which is what Contour does with no weights at all.
// A path without splits is refused where it is read (makeServices).
func validSplits(field string, splits []netv1alpha1.IngressBackendSplit) error {
	total := 0
	for k, s := range splits {
		if s.Percent < 0 || s.Percent > 100 {
			return &SpecError{Reason: "InvalidSplit", Message: fmt.Sprintf(
				"%s[%d].percent: %d is not a percent: give a share from 0 to 100", field, k, s.Percent)}
		}
		total += s.Percent
	}
	if len(splits) > 1 && total != 0 && total != 100 {
		return &SpecError{Reason: "InvalidSplit", Message: fmt.Sprintf(
			"%s: the percents total %d: make them total 100", field, total)}
	}
	return nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// isUnreserved is RFC 3986's unreserved set, which normalization decodes.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~", c) >= 0
}

// isPathChar is an RFC 3986 pchar other than a %-escape, or '/'.
func isPathChar(c byte) bool {
	return isUnreserved(c) || strings.IndexByte("!$&'()*+,;=:@/", c) >= 0
}

// isToken tells an RFC 7230 token: a header name a request can carry.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

func isCtl(r rune) bool {
	return r < ' ' && r != '\t' || r == 0x7f
}
