package harness

import "testing"

func TestDefaultRouteInterface(t *testing.T) {
	const header = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
	for _, tc := range []struct {
		name, routes, want string
	}{
		{"default first", header + "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", "eth0"},
		{"default after others", header + "br0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\nwlan0\t00000000\t0100A8C0\t0003\t0\t0\t600\t00000000\t0\t0\t0\n", "wlan0"},
		{"none", header + "br0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n", ""},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := defaultRouteInterface([]byte(tc.routes))
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Errorf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
