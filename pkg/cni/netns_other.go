//go:build !linux

package cni

import (
	"errors"
	"net"
)

var errNetNSGone = errors.New("network namespace is gone")

// podIPsInNetNS is only implemented on Linux; elsewhere the cached CNI
// result is used.
func podIPsInNetNS(path, ifName string) ([]net.IP, error) {
	return nil, errNetNSGone
}
