package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// unitSettings reads KEY=VALUE lines of a unit file (the last one wins).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// netshim.service starts netshim without --listen: the socket systemd
// passes must be the one netshim's default --listen names, or netshim
// warns on every start (and kubelet may be pointed at the other one).
func TestSocketUnitIsTheDefaultListen(t *testing.T) {
	socket := unitSettings(t, "../../deploy/systemd/netshim.socket")
	if got, want := "unix://"+socket["ListenStream"], defaultOptions().listen; got != want {
		t.Errorf("netshim.socket listens on %s, netshim's default --listen is %s", got, want)
	}
	service := unitSettings(t, "../../deploy/systemd/netshim.service")
	if strings.Contains(service["ExecStart"], "--listen") {
		t.Errorf("netshim.service passes --listen (%s): the socket unit names the socket", service["ExecStart"])
	}
	if service["Type"] != "notify" {
		t.Errorf("netshim.service Type=%s, want notify (netshim sends READY=1)", service["Type"])
	}
}
