package deb

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// WatchedPaths are the glob patterns of everything the package, its
// maintainer scripts or dpkg may create for netshim: the shipped files,
// dpkg's conffile leftovers (.dpkg-old, .dpkg-dist), the enable links and
// deb-systemd-helper's records of them, dpkg's own records of the package,
// and the socket a started netshim would make. A directory that matches is
// taken whole.
var WatchedPaths = []string{
	"/usr/bin/netshim*",
	"/lib/systemd/system/netshim*",
	"/etc/default/netshim*",
	"/etc/systemd/system/netshim*",
	"/etc/systemd/system/*/netshim*",
	"/var/lib/systemd/deb-systemd-helper-enabled/netshim*",
	"/var/lib/systemd/deb-systemd-helper-enabled/*/netshim*",
	"/var/lib/systemd/deb-systemd-helper-masked/netshim*",
	"/usr/share/doc/netshim*",
	"/usr/share/lintian/overrides/netshim*",
	"/usr/share/man/man8/netshim*",
	"/var/lib/dpkg/info/netshim.*",
	"/run/netshim",
}

// State maps each path that matched a pattern to a description of what is
// there: its type, mode and owner, and a regular file's SHA-256 or a
// symlink's target. Two snapshots are equal when nothing that matters to
// the package changed between them.
type State map[string]string

// Snapshot records what matches patterns, each rooted at root ("/" for the
// machine; a temp dir in unit tests).
func Snapshot(root string, patterns []string) (State, error) {
	s := State{}
	for _, pattern := range patterns {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			return nil, fmt.Errorf("pattern %s: %w", pattern, err)
		}
		for _, m := range matches {
			err := filepath.WalkDir(m, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				desc, err := describe(path)
				if err != nil {
					return err
				}
				rel, err := filepath.Rel(root, path)
				if err != nil {
					return err
				}
				s["/"+filepath.ToSlash(rel)] = desc
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("recording %s: %w", m, err)
			}
		}
	}
	return s, nil
}

func describe(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	owner := "?"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	head := fmt.Sprintf("%s %s", fi.Mode(), owner)
	switch {
	case fi.Mode().IsRegular():
		sum, err := fileSHA256(path)
		if err != nil {
			return "", err
		}
		return head + " sha256:" + sum, nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		return head + " -> " + target, nil
	default:
		return head, nil
	}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Diff lists, sorted, how after differs from before: "+ path: desc" for
// what appeared, "- path: desc" for what went, "~ path: old => new" for what
// changed. Empty means equal.
func Diff(before, after State) []string {
	var d []string
	for p, a := range after {
		b, ok := before[p]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("+ %s: %s", p, a))
		case a != b:
			d = append(d, fmt.Sprintf("~ %s: %s => %s", p, b, a))
		}
	}
	for p, b := range before {
		if _, ok := after[p]; !ok {
			d = append(d, fmt.Sprintf("- %s: %s", p, b))
		}
	}
	slices.SortFunc(d, func(x, y string) int { return strings.Compare(x[2:], y[2:]) })
	return d
}

// InstallTargets returns the units a systemd unit file's [Install] section
// makes it wanted or required by (WantedBy=, RequiredBy=): enabling it
// makes a link to it in each TARGET.wants or TARGET.requires directory of
// /etc/systemd/system. The link directories are returned, relative to that
// directory: "multi-user.target.wants".
func InstallTargets(unitFile io.Reader) ([]string, error) {
	var dirs []string
	section := ""
	sc := bufio.NewScanner(unitFile)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			continue
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line
			continue
		case section != "[Install]":
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		suffix := map[string]string{"WantedBy": ".wants", "RequiredBy": ".requires"}[strings.TrimSpace(key)]
		if suffix == "" {
			continue
		}
		for _, target := range strings.Fields(value) {
			dirs = append(dirs, target+suffix)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(dirs) == 0 {
		return nil, errors.New("no WantedBy= or RequiredBy= in its [Install] section")
	}
	return dirs, nil
}

// ParseConffiles parses dpkg-query's ${Conffiles}: one " PATH MD5SUM" line
// a conffile (dpkg adds " obsolete" or " remove-on-upgrade" to some). It
// maps each path to its MD5 sum as dpkg recorded it at installation.
func ParseConffiles(field string) (map[string]string, error) {
	m := map[string]string{}
	for _, line := range strings.Split(field, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 || !strings.HasPrefix(f[0], "/") {
			return nil, fmt.Errorf("conffile line %q: want PATH MD5SUM", line)
		}
		m[f[0]] = f[1]
	}
	return m, nil
}
