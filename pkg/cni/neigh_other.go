//go:build !linux

package cni

import "net"

// forgetNeighbors is a no-op where there is no netlink.
func forgetNeighbors([]net.IP) error { return nil }
