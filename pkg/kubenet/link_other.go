//go:build !linux

package kubenet

import "net"

func defaultRouteMTU() (int, error) { return 0, nil }

func clearStaleBridgeAddrs(string, []*net.IPNet) error { return nil }
