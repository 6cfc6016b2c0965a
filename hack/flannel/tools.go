//go:build tools

// Package flannel is a wrapper module that builds flanneld, flannel's own
// main package, from the Go module proxy; see go.mod and
// hack/cluster-images.sh. The import makes go mod tidy resolve what flanneld
// needs.
package flannel

import (
	_ "github.com/flannel-io/flannel"
)
