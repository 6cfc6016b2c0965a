package podns

import (
	"crypto/hmac"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// EnvKey is the environment variable through which netshim names, in a
// container's Docker config, the pinned namespaces the container must run
// in: "net=/run/netshim/netns/pod-x.net[,ipc=...];mac=<hex>". Docker 20.10
// cannot pass annotations to the OCI runtime, but it puts the environment
// in the bundle's config.json, where cmd/netshim-oci reads it, applies it
// to linux.namespaces and removes it, so the container's processes never
// see it. Docker merges an image's ENV into that environment, and the
// wrapper may run containers netshim did not create, so the wrapper
// trusts a marker only if it is signed with the key of the directory its
// files are in (KeyFile; Verifier). netshim also refuses it in a pod's own
// environment.
const EnvKey = "NETSHIM_OCI_NAMESPACES"

// macSep ends a marker's namespace list and starts its MAC.
const macSep = ";mac="

// Paths are pinned namespace files by kind.
type Paths map[Kind]string

// spec is the namespace list of a marker: "kind=path" items sorted by kind.
func (ps Paths) spec() string {
	kinds := make([]string, 0, len(ps))
	for k := range ps {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	var b strings.Builder
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + ps[Kind(k)])
	}
	return b.String()
}

// Env is the "KEY=value" environment entry naming the paths, signed with
// key, the key of the directory they are in. Naming nothing it is
// "KEY=", unsigned: set on every container netshim runs under the
// wrapper, it overrides an entry an image's ENV may have.
func (ps Paths) Env(key *Key) string {
	if len(ps) == 0 {
		return EnvKey + "="
	}
	spec := ps.spec()
	return EnvKey + "=" + spec + macSep + key.mac(spec)
}

// Verifier decides which markers the OCI wrapper applies.
type Verifier struct {
	// Dirs, if not empty, are the only directories whose namespaces may
	// be named (the wrapper's --netshim-netns-dir); empty, any directory
	// holding a KeyFile.
	Dirs []string
	// ReadKey reads a directory's key (podns.ReadKey).
	ReadKey func(dir string) (*Key, error)
	// Check checks each path before it is applied (podns.Verify).
	Check func(path string, kind Kind) error
}

// Accept returns the namespaces a marker's value names, if it may be
// applied: every path in one directory (one of Dirs), the value signed
// with that directory's key, each path passing Check. The empty value
// names nothing and is accepted. Errors say why, for the operator.
func (v Verifier) Accept(value string) (Paths, error) {
	if value == "" {
		return Paths{}, nil
	}
	spec, mac, signed := strings.Cut(value, macSep)
	if !signed {
		return nil, fmt.Errorf("%s carries no netshim signature: it was set by the container's image (ENV) or its creator, not by netshim, which signs the namespaces it names; refusing to run the container in %q", EnvKey, value)
	}
	paths, err := ParseEnv(spec)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: a signature but no namespaces", EnvKey)
	}
	dir := ""
	for kind, path := range paths {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return nil, fmt.Errorf("%s: %s namespace path %q: want an absolute, clean path", EnvKey, kind, path)
		}
		d := filepath.Dir(path)
		if dir != "" && d != dir {
			return nil, fmt.Errorf("%s: namespaces in two directories, %s and %s: netshim pins a pod's in one", EnvKey, dir, d)
		}
		dir = d
	}
	if len(v.Dirs) > 0 && !slices.Contains(v.Dirs, dir) {
		return nil, fmt.Errorf("%s names namespaces in %s, which is not a netns directory this wrapper accepts (%s)", EnvKey, dir, strings.Join(v.Dirs, ", "))
	}
	key, err := v.ReadKey(dir)
	if err != nil {
		return nil, fmt.Errorf("%s names namespaces in %s, which holds no usable key of netshim's (so netshim never pinned namespaces there): %w", EnvKey, dir, err)
	}
	if !hmac.Equal([]byte(mac), []byte(key.mac(spec))) {
		return nil, fmt.Errorf("%s: the signature does not match the key in %s: the marker was not made by the netshim using that directory", EnvKey, filepath.Join(dir, KeyFile))
	}
	for kind, path := range paths {
		if err := v.Check(path, kind); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// ParseEnv reads the value of an EnvKey entry.
func ParseEnv(value string) (Paths, error) {
	ps := Paths{}
	if value == "" {
		return ps, nil
	}
	for _, item := range strings.Split(value, ",") {
		k, path, ok := strings.Cut(item, "=")
		if !ok || path == "" {
			return nil, fmt.Errorf("%s: item %q: want KIND=PATH", EnvKey, item)
		}
		kind := Kind(k)
		if _, err := kind.cloneFlag(); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKey, err)
		}
		if _, dup := ps[kind]; dup {
			return nil, fmt.Errorf("%s: %s named twice", EnvKey, kind)
		}
		ps[kind] = path
	}
	return ps, nil
}

// IsEnvEntry says whether an environment entry ("KEY=value") sets EnvKey.
func IsEnvEntry(entry string) bool {
	k, _, _ := strings.Cut(entry, "=")
	return k == EnvKey
}
