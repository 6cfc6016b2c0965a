//go:build deb

package deb

import (
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/netshim/netshim/test/harness"
)

const (
	pkg      = "netshim"
	binary   = "/usr/bin/netshim"
	unitDir  = "/lib/systemd/system"
	conffile = "/etc/default/netshim"
	// socket is where a started netshim (or its socket unit) listens.
	socket = "/run/netshim/netshim.sock"
)

// units are the systemd units the package ships and enables.
var units = []string{"netshim.service", "netshim.socket"}

// shipped are the files the package must hold, with their modes. It may hold
// more (each is checked for root ownership and a sane mode); these it must.
var shipped = map[string]fs.FileMode{
	binary:                                 0o755,
	unitDir + "/netshim.service":           0o644,
	unitDir + "/netshim.socket":            0o644,
	conffile:                               0o644,
	"/usr/share/man/man8/netshim.8.gz":     0o644,
	"/usr/bin/netshim-oci":                 0o755,
	"/usr/share/man/man8/netshim-oci.8.gz": 0o644,
	"/usr/share/doc/netshim/copyright":     0o644,
	"/usr/share/doc/netshim/changelog.gz":  0o644,
}

// TestPackage installs the package make deb built (NETSHIM_DEB) into this
// machine, checks what it put there, reinstalls it over an operator's edited
// conffile and disabled service, removes it, purges it, and checks the
// machine is as it was before. Each step needs the one before it.
func TestPackage(t *testing.T) {
	deb := preflight(t)
	before, err := Snapshot("/", WatchedPaths)
	if err != nil {
		t.Fatal(err)
	}
	_, socketBefore := os.Lstat(socket)

	// Whatever happens below, the machine gets its state back.
	t.Cleanup(func() {
		if status := packageStatus(t); status != "" {
			if out, err := harness.RunCmd("dpkg", "--purge", pkg); err != nil {
				t.Errorf("cleanup: dpkg --purge %s: %v\n%s", pkg, err, out)
			}
		}
	})

	version := strings.TrimSpace(harness.MustRun(t, "dpkg-deb", "--field", deb, "Version"))
	var shippedSum string // of the conffile as the package ships it
	// The enable links of each unit, read from the installed units (after
	// --remove the units are gone, the links are not).
	links := map[string][]string{}
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"install", func(t *testing.T) {
			dpkg(t, "-i", deb)
			for _, unit := range units {
				links[unit] = enableLinks(t, unit)
			}
			shippedSum = checkInstalled(t, version, false)
			if sum, err := md5File(conffile); err != nil || sum != shippedSum {
				t.Errorf("dpkg records %s with sum %q, the file's is %q (%v)", conffile, shippedSum, sum, err)
			}
			checkEnabled(t, links, units...)
			checkNotStarted(t, socketBefore)
		}},
		{"reinstall keeps the operator's conffile and disabled service", func(t *testing.T) {
			edited := "# edited by TestPackage\nNETSHIM_OPTS=\"-v=2\"\n"
			if err := os.WriteFile(conffile, []byte(edited), 0o644); err != nil {
				t.Fatal(err)
			}
			// The operator disables the service (systemctl edits the
			// links itself when systemd is not running, as here). The
			// service's Also=netshim.socket disables the socket with it.
			_, err := exec.LookPath("systemctl")
			disabled := err == nil
			if disabled {
				harness.MustRun(t, "systemctl", "--no-reload", "disable", "netshim.service")
				checkDisabled(t, links, "netshim.service", "netshim.socket")
			} else {
				t.Log("no systemctl on this machine: the operator's disabled service is not tried")
			}

			dpkg(t, "-i", "--force-confold", deb)
			if sum := checkInstalled(t, version, true); sum != shippedSum {
				t.Errorf("dpkg records %s with sum %q after the reinstall, want the shipped file's %q", conffile, sum, shippedSum)
			}
			if got, err := os.ReadFile(conffile); err != nil || string(got) != edited {
				t.Errorf("%s after the reinstall = %q, %v; want the operator's %q", conffile, got, err, edited)
			}
			if left, _ := filepath.Glob(conffile + ".dpkg-*"); len(left) > 0 {
				t.Errorf("dpkg left %v beside the conffile", left)
			}
			if disabled {
				checkDisabled(t, links, "netshim.service", "netshim.socket")
				// Enabled again, so that the next steps see what remove
				// and purge do to the links.
				harness.MustRun(t, "systemctl", "--no-reload", "enable", "netshim.service")
			}
			checkEnabled(t, links, "netshim.service", "netshim.socket")
			checkNotStarted(t, socketBefore)
		}},
		{"remove keeps the configuration", func(t *testing.T) {
			dpkg(t, "--remove", pkg)
			if status := packageStatus(t); status != "deinstall ok config-files" {
				t.Errorf("dpkg status after --remove = %q, want %q", status, "deinstall ok config-files")
			}
			for path := range shipped {
				_, err := os.Lstat(path)
				switch {
				case path == conffile && err != nil:
					t.Errorf("%s is gone after --remove; a conffile stays until purge", path)
				case path != conffile && err == nil:
					t.Errorf("%s is still there after --remove", path)
				}
			}
			checkEnabled(t, links, "netshim.socket") // the links are configuration too
			checkNotStarted(t, socketBefore)
		}},
		{"purge leaves nothing behind", func(t *testing.T) {
			dpkg(t, "--purge", pkg)
			if status := packageStatus(t); status != "" {
				t.Errorf("dpkg status after --purge = %q, want the package unknown", status)
			}
			after, err := Snapshot("/", WatchedPaths)
			if err != nil {
				t.Fatal(err)
			}
			if d := Diff(before, after); len(d) > 0 {
				t.Errorf("the machine differs from before the installation:\n%s", strings.Join(d, "\n"))
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return
		}
	}
}

// preflight checks the test may run here, and returns the package's path.
func preflight(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the package test installs into this machine: run it as root (make test-deb)")
	}
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query", "deb-systemd-helper"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: this test needs a Debian machine", tool)
		}
	}
	deb := os.Getenv("NETSHIM_DEB")
	if deb == "" {
		t.Fatal("NETSHIM_DEB is not set: run make test-deb, which builds the package first")
	}
	if _, err := os.Stat(deb); err != nil {
		t.Fatalf("NETSHIM_DEB: %v", err)
	}
	// Never touch an operator's netshim: this test purges what it installs.
	if status := packageStatus(t); status != "" {
		t.Fatalf("a %s package is on this machine already (dpkg status %q): the test installs and purges "+
			"its own and will not touch that one; purge it first (dpkg --purge %s) if it may go", pkg, status, pkg)
	}
	// The package's Depends: without them dpkg -i leaves it unconfigured.
	if !installed(t, "docker.io") && !installed(t, "docker-ce") {
		t.Fatal("neither docker.io nor docker-ce is installed (the package depends on one): run make deps")
	}
	return deb
}

// packageStatus is dpkg's status of the netshim package ("install ok
// installed", "deinstall ok config-files", ...), or "" when dpkg does not
// know it at all.
func packageStatus(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", pkg).Output()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return "" // dpkg-query: no packages found matching netshim
	case err != nil:
		t.Fatalf("dpkg-query: %v", err)
	}
	if s := strings.TrimSpace(string(out)); s != "unknown ok not-installed" {
		return s
	}
	return ""
}

func installed(t testing.TB, name string) bool {
	out, err := exec.Command("dpkg-query", "-W", "-f=${Status}", name).Output()
	return err == nil && strings.TrimSpace(string(out)) == "install ok installed"
}

// dpkg runs dpkg non-interactively (no terminal: a conffile question would
// fail rather than hang) and logs what it said.
func dpkg(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command("dpkg", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	t.Logf("dpkg %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("dpkg %s: %v", strings.Join(args, " "), err)
	}
}

// checkInstalled checks dpkg's record of the package, every file it lists,
// dpkg's own verification of them (edited: the operator changed the
// conffile), the conffile record and the binary's version. It returns the
// sum dpkg recorded for the conffile.
func checkInstalled(t *testing.T, version string, edited bool) string {
	t.Helper()
	if status := packageStatus(t); status != "install ok installed" {
		t.Fatalf("dpkg status = %q, want %q", status, "install ok installed")
	}

	var files []string
	for _, path := range strings.Split(strings.TrimSpace(harness.MustRun(t, "dpkg", "-L", pkg)), "\n") {
		if path == "/." {
			continue
		}
		fi, err := os.Stat(path) // follows /lib -> usr/lib on merged-/usr systems
		if err != nil {
			t.Errorf("dpkg lists %s: %v", path, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want root:root", path, st.Uid, st.Gid)
		}
		if fi.IsDir() {
			continue
		}
		files = append(files, path)
		want, ok := shipped[path]
		if !ok {
			want = 0o644
			if strings.HasPrefix(path, "/usr/bin/") || strings.HasPrefix(path, "/usr/sbin/") {
				want = 0o755
			}
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %s, want a regular file with %s", path, fi.Mode(), want)
		}
	}
	for path := range shipped {
		if !slices.Contains(files, path) {
			t.Errorf("the package does not ship %s", path)
		}
	}
	t.Logf("the package's files: %s", strings.Join(files, " "))

	// dpkg compares every file with the package's md5sums: silent, but
	// for the conffile once the operator edited it ("??5?????? c PATH").
	out, _ := harness.RunCmd("dpkg", "--verify", pkg)
	out = strings.TrimSpace(out)
	if edited {
		if !strings.HasSuffix(out, " c "+conffile) || strings.Contains(out, "\n") {
			t.Errorf("dpkg --verify %s = %q, want only the edited %s reported", pkg, out, conffile)
		}
	} else if out != "" {
		t.Errorf("dpkg --verify %s: installed files differ from the package's:\n%s", pkg, out)
	}

	// Every file under /etc is a conffile.
	fields, err := exec.Command("dpkg-query", "-W", "-f=${Conffiles}", pkg).Output()
	if err != nil {
		t.Fatalf("dpkg-query Conffiles: %v", err)
	}
	conffiles, err := ParseConffiles(string(fields))
	if err != nil {
		t.Fatal(err)
	}
	var etc []string
	for _, f := range files {
		if strings.HasPrefix(f, "/etc/") {
			etc = append(etc, f)
		}
	}
	if got := slices.Sorted(maps.Keys(conffiles)); !slices.Equal(got, etc) {
		t.Errorf("conffiles = %v, want every file under /etc: %v", got, etc)
	}

	// One version string: the binary's and the package's.
	got := strings.TrimSpace(harness.MustRun(t, binary, "version"))
	if want := fmt.Sprintf("netshim %s ", version); !strings.HasPrefix(got, want) {
		t.Errorf("%s version = %q, want it to start with %q (dpkg-deb's Version)", binary, got, want)
	}
	if v := strings.TrimSpace(harness.MustRun(t, "dpkg-query", "-W", "-f=${Version}", pkg)); v != version {
		t.Errorf("dpkg-query Version = %q, want %q", v, version)
	}
	return conffiles[conffile]
}

// enableLinks returns the links that enabling unit makes, from its
// installed [Install] section.
func enableLinks(t *testing.T, unit string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(unitDir, unit))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dirs, err := InstallTargets(f)
	if err != nil {
		t.Fatalf("%s: %v", unit, err)
	}
	var links []string
	for _, d := range dirs {
		links = append(links, filepath.Join("/etc/systemd/system", d, unit))
	}
	return links
}

// checkEnabled checks each unit's enable links point at the unit.
func checkEnabled(t *testing.T, links map[string][]string, units ...string) {
	t.Helper()
	for _, unit := range units {
		for _, link := range links[unit] {
			target, err := os.Readlink(link)
			if err != nil || filepath.Base(target) != unit {
				t.Errorf("%s is not enabled: %s -> %q, %v", unit, link, target, err)
			}
		}
	}
}

func checkDisabled(t *testing.T, links map[string][]string, units ...string) {
	t.Helper()
	for _, unit := range units {
		for _, link := range links[unit] {
			if _, err := os.Lstat(link); err == nil {
				t.Errorf("%s is enabled (%s exists); the operator disabled it", unit, link)
			}
		}
	}
}

// checkNotStarted checks that no netshim runs from the package's binary
// and that no socket appeared where the units would listen: the package
// enables its units but never starts them. (netshim processes of other
// binaries, such as a test's, are not the package's.)
func checkNotStarted(t *testing.T, socketBefore error) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/exe")
	if err != nil {
		t.Fatal(err)
	}
	for _, exe := range procs {
		target, err := os.Readlink(exe)
		if err == nil && strings.TrimSuffix(target, " (deleted)") == binary {
			t.Errorf("%s runs (%s): the package must not start netshim", binary, filepath.Dir(exe))
		}
	}
	if _, err := os.Lstat(socket); err == nil && socketBefore != nil {
		t.Errorf("%s appeared: the package must not start netshim or its socket", socket)
	}
}

// md5File is the MD5 sum dpkg records for a conffile.
func md5File(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := md5.Sum(data)
	return hex.EncodeToString(sum[:]), nil
}
