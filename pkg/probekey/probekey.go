// Package probekey proves that a request reaching a probe or warm route
// comes from hitless's own prober.
//
// Those routes differ from the user routes of a host on purpose: they skip
// the authorization server, they answer over plain HTTP where the user
// routes redirect, and warm routes reach backends on hosts that have no TLS
// at all. Each of them therefore matches only requests that carry Header
// with the token of the route's namespace, an HMAC of the namespace under a
// key that only the controller holds (in a Secret of its own namespace, so
// every replica and every restart uses the same one). Envoy removes the
// header before the request goes upstream, so a backend never learns a
// token; whoever may read HTTPProxies of a namespace can read that
// namespace's token, and it opens the probe routes of that namespace alone.
package probekey

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// Header carries the token on every request of the prober.
const Header = "Hitless-Probe-Token"

// Size is the length of a key in bytes.
const Size = 32

// Key is the controller's secret. Its zero value is no key: Token refuses
// to derive anything from it, so a builder that was given no key fails
// instead of writing routes anyone could open.
type Key []byte

// New returns a fresh random key.
func New() (Key, error) {
	k := make(Key, Size)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("failed to read random bytes for the probe key: %w", err)
	}
	return k, nil
}

// Parse checks a stored key.
func Parse(b []byte) (Key, error) {
	if len(b) < Size {
		return nil, fmt.Errorf("the probe key has %d bytes, want at least %d", len(b), Size)
	}
	return Key(append([]byte(nil), b...)), nil
}

// Token is the header value that opens the probe and warm routes of a
// namespace: tokens of other namespaces cannot be derived from it.
func (k Key) Token(namespace string) (string, error) {
	if len(k) < Size {
		return "", fmt.Errorf("no probe key: the routes of namespace %s cannot be protected", namespace)
	}
	m := hmac.New(sha256.New, k)
	m.Write([]byte("hitless-probe-token\x00"))
	m.Write([]byte(namespace))
	return hex.EncodeToString(m.Sum(nil)), nil
}

type keyCtx struct{}

// WithKey attaches the key to ctx, for the builders of probe and warm routes.
func WithKey(ctx context.Context, k Key) context.Context {
	return context.WithValue(ctx, keyCtx{}, k)
}

// FromContext returns the key WithKey attached, or the zero Key.
func FromContext(ctx context.Context) Key {
	k, _ := ctx.Value(keyCtx{}).(Key)
	return k
}

// HashHeader is the response header every probe route of hitless's sets
// (Envoy adds it to the backend's answer): the hash of the configuration the
// pod serves, which the prober confirms. The backend's echo of
// K-Network-Hash cannot carry it: that is Knative's hash of the KIngress
// spec, which Knative's conformance suite checks, and it stays the same
// when config-contour, config-network or a backend's port names change what
// Envoy is asked to serve.
const HashHeader = "Hitless-Hash"
