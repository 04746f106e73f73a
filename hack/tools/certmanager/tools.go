//go:build tools

// The ACME server and its DNS test server, built from this module so that
// go.mod pins them (hack/build-deps.sh --certmanager builds them).
package tools

import (
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble"
	_ "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv"
)
