package resources

import "strings"

// ChallengePathPrefix starts the path of every ACME HTTP-01 challenge.
// Knative Serving's auto-TLS (cert-manager's http01 solver) puts one path
// per pending challenge, /.well-known/acme-challenge/<token>, in front of
// the external rule's paths, split 100% to the solver's Service.
const ChallengePathPrefix = "/.well-known/acme-challenge"

// isChallengePath tells whether a KIngress path is an ACME challenge's.
// Such a path is served like any other but never probed, warmed or held:
// the solver answers its one token and 404 to everything else, Knative's
// probes included, so a probe of it never confirms, and a KIngress waiting
// on it would keep the challenge unserved and the certificate unissued.
// The solver's self-check (and the ACME server) retry until the route is
// served, so the few milliseconds Envoy may take to have the solver's
// cluster after the route cost a retry of theirs, never a user's request.
func isChallengePath(path string) bool {
	return strings.HasPrefix(prefixOf(path), ChallengePathPrefix+"/") || prefixOf(path) == ChallengePathPrefix
}
