package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	contourv1 "github.com/projectcontour/contour/apis/projectcontour/v1"
)

// parseCORS reads a cors-policy value. Every entry is checked against what
// the HTTPProxy CRD and Contour accept, because the policy is copied onto
// HTTPProxies: an entry either refuses would make the API server refuse, or
// Contour invalidate, every proxy hitless writes with it, where refusing the
// ConfigMap keeps the last valid policy serving. Unknown fields (a newer
// Contour's) are ignored and returned for the caller to report.
func parseCORS(raw string) (*contourv1.CORSPolicy, []string, error) {
	var p contourv1.CORSPolicy
	unknown, err := decodeLenient(raw, &p)
	if err != nil {
		return nil, nil, fmt.Errorf("not a Contour CORS policy (allowOrigin, allowMethods, allowHeaders, exposeHeaders, maxAge, allowCredentials): %w", err)
	}
	if len(p.AllowOrigin) == 0 {
		return nil, nil, fmt.Errorf("allowOrigin must list at least one origin")
	}
	for i, origin := range p.AllowOrigin {
		if err := validOrigin(origin); err != nil {
			return nil, nil, fmt.Errorf("allowOrigin[%d] %q %w", i, origin, err)
		}
	}
	if len(p.AllowMethods) == 0 {
		return nil, nil, fmt.Errorf("allowMethods must list at least one method")
	}
	for _, list := range []struct {
		field  string
		values []contourv1.CORSHeaderValue
	}{{"allowMethods", p.AllowMethods}, {"allowHeaders", p.AllowHeaders}, {"exposeHeaders", p.ExposeHeaders}} {
		for i, v := range list.values {
			if !isToken(string(v)) {
				return nil, nil, fmt.Errorf("%s[%d] %q is not an HTTP token: one name per entry, of letters, digits and %s only",
					list.field, i, v, tokenPunctuation)
			}
		}
	}
	if p.MaxAge != "" && !validMaxAge(p.MaxAge) {
		return nil, nil, fmt.Errorf("maxAge %q is not a duration Contour accepts: 0, or a Go duration without a sign (e.g. 10m, 1h30m)", p.MaxAge)
	}
	return &p, ignoredFields(unknown), nil
}

// tokenPunctuation is the punctuation RFC 7230 allows in a token (tchar).
// The CRD's pattern for every CORSHeaderValue (allowMethods, allowHeaders,
// exposeHeaders) is exactly one or more tchar.
const tokenPunctuation = "!#$%&'*+-.^_`|~"

// isToken reports whether s is an RFC 7230 token: one or more ASCII
// letters, digits or tokenPunctuation.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.ContainsRune(tokenPunctuation, c):
		default:
			return false
		}
	}
	return true
}

// validOrigin accepts an allowOrigin entry as Contour does: "*", an exact
// origin (scheme://host[:port], nothing more), or else a regular expression
// that compiles. The CRD lets any string through; Contour marks a proxy
// with any other entry invalid, and Envoy would then serve none of its
// routes.
func validOrigin(origin string) error {
	if origin == "*" {
		return nil
	}
	if u, err := url.Parse(origin); err == nil && u.Scheme != "" && u.Host != "" && u.Scheme+"://"+u.Host == origin {
		return nil
	}
	if _, err := regexp.Compile(origin); err != nil {
		return fmt.Errorf(`is neither "*", an origin (scheme://host[:port]) nor a regular expression (%v); `+
			`subdomains are matched by a regular expression such as https://.*\.example\.com`, err)
	}
	return nil
}

// maxAgeUnit and maxAgePattern restate the CRD's pattern for maxAge: "0",
// or one or more number-and-unit parts where the number may be empty or
// have a fraction. No sign is allowed.
const maxAgeUnit = `(h|m|s|ms|us|µs|ns)`

var maxAgePattern = regexp.MustCompile(`^((\d*(\.\d*)?` + maxAgeUnit + `)+|0)$`)

// validMaxAge reports whether both gates a maxAge passes accept it: the
// API server checks the CRD's pattern, and Contour then parses it with
// time.ParseDuration, which refuses parts without a number ("s") that the
// pattern lets through. A negative value never matches the pattern.
func validMaxAge(s string) bool {
	if !maxAgePattern.MatchString(s) {
		return false
	}
	_, err := time.ParseDuration(s)
	return err == nil
}
