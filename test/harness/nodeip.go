package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
)

// DefaultNodeIP is the IPv4 address of the interface the host's default
// route leaves by: the address kubelet settles on by itself when it cannot
// resolve its node name. The harness gives it to kubelet as --node-ip,
// because without one kubelet looks its node name up in DNS each time it
// builds its node status (standalone, at every pod admission): queries to
// a resolver outside the machine, which the tests must not send, and which
// stalled kubelet's admissions for the resolver's 5-second timeout when
// some went unanswered (seen as pods admitted in waves 5 s apart).
func DefaultNodeIP() (string, error) {
	data, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	name, err := defaultRouteInterface(data)
	if err != nil {
		return "", err
	}
	iface, err := net.InterfaceByName(name)
	if err != nil {
		return "", err
	}
	addrs, err := iface.Addrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
			return ipn.IP.String(), nil
		}
	}
	return "", fmt.Errorf("interface %s of the default route has no IPv4 address", name)
}

// defaultRouteInterface finds the interface of the IPv4 default route in
// the contents of /proc/net/route (destination and mask 0).
func defaultRouteInterface(routes []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(routes))
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0], nil
		}
	}
	return "", fmt.Errorf("no IPv4 default route")
}
