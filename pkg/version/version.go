// Package version holds build-time version information.
package version

// Version is set at build time with
// -ldflags "-X github.com/netshim/netshim/pkg/version.Version=...".
var Version = "dev"

// CRIVersion is the CRI API version netshim implements.
const CRIVersion = "v1"
