package podns

import (
	"crypto/hmac"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
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

// Marker is what netshim asks of the wrapper for one container: the
// pinned namespaces it joins and, for a pod in its own user namespace or
// with SupplementalGroupsPolicy Strict, what Docker cannot say in a
// container's config.
type Marker struct {
	// Paths are the pinned namespaces the container joins (User among
	// them for a pod with hostUsers: false).
	Paths Paths
	// UIDs and GIDs are the maps of Paths[User], for the idmapped mounts
	// (the namespace has them already; runc reads them from it).
	UIDs, GIDs []IDMap
	// IDMapMounts are the destinations of the bind mounts kubelet asked
	// to be idmapped (CRI Mount.uidMappings), with UIDs and GIDs.
	IDMapMounts []string
	// StrictGroups: the process's supplementary groups are exactly its
	// gid and Groups, not the ones the image's /etc/group adds.
	StrictGroups bool
	Groups       []uint32
	// Dir is the directory whose key signs a marker that names no
	// namespace (a Strict container of a pod without a pinned one);
	// otherwise the directory of Paths, where it may be left out.
	Dir string
}

// The items of a marker that are not namespace kinds.
const (
	itemUIDMap = "uidmap"
	itemGIDMap = "gidmap"
	itemIDMap  = "idmap"
	itemGroups = "groups"
	itemDir    = "dir"
)

// Empty says whether the marker asks for nothing.
func (m Marker) Empty() bool {
	return len(m.Paths) == 0 && len(m.UIDs) == 0 && len(m.GIDs) == 0 && len(m.IDMapMounts) == 0 && !m.StrictGroups
}

// spec is the marker's list: "key=value" items sorted by key, the
// namespace kinds' values paths, the others as their parsers read them
// (lists joined with '+', mount destinations query-escaped).
func (m Marker) spec() string {
	items := map[string]string{}
	for k, p := range m.Paths {
		items[string(k)] = p
	}
	if len(m.UIDs) > 0 {
		items[itemUIDMap] = joinMaps(m.UIDs)
	}
	if len(m.GIDs) > 0 {
		items[itemGIDMap] = joinMaps(m.GIDs)
	}
	if len(m.IDMapMounts) > 0 {
		esc := make([]string, len(m.IDMapMounts))
		for i, d := range m.IDMapMounts {
			esc[i] = escapeDest(d)
		}
		items[itemIDMap] = strings.Join(esc, "+")
	}
	if m.StrictGroups {
		gs := make([]string, len(m.Groups))
		for i, g := range m.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		items[itemGroups] = strings.Join(gs, "+")
	}
	if m.Dir != "" {
		items[itemDir] = m.Dir
	}
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + items[k])
	}
	return b.String()
}

// escapeDest escapes a mount destination for the idmap item, whose
// entries are joined with '+' in a list joined with ',': QueryEscape
// escapes both (and ';', '=', '%'), but writes a space as '+', which is
// written "%20" instead.
func escapeDest(d string) string {
	return strings.ReplaceAll(url.QueryEscape(d), "+", "%20")
}

func joinMaps(ms []IDMap) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, "+")
}

// Env is the "KEY=value" environment entry naming the paths, signed with
// key, the key of the directory they are in. Naming nothing it is
// "KEY=", unsigned: set on every container netshim runs under the
// wrapper, it overrides an entry an image's ENV may have.
func (ps Paths) Env(key *Key) string { return Marker{Paths: ps}.Env(key) }

// Env is the "KEY=value" environment entry of the marker, signed with
// key, the key of its directory. Asking nothing it is "KEY=", unsigned.
func (m Marker) Env(key *Key) string {
	if m.Empty() {
		return EnvKey + "="
	}
	spec := m.spec()
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

// Accept returns what a marker's value asks, if it may be applied: every
// path in one directory (one of Dirs), the value signed with that
// directory's key, each path passing Check. The empty value asks nothing
// and is accepted. Errors say why, for the operator.
func (v Verifier) Accept(value string) (Marker, error) {
	if value == "" {
		return Marker{Paths: Paths{}}, nil
	}
	spec, mac, signed := strings.Cut(value, macSep)
	if !signed {
		return Marker{}, fmt.Errorf("%s carries no netshim signature: it was set by the container's image (ENV) or its creator, not by netshim, which signs the namespaces it names; refusing to run the container in %q", EnvKey, value)
	}
	m, err := ParseMarker(spec)
	if err != nil {
		return Marker{}, err
	}
	if m.Empty() {
		return Marker{}, fmt.Errorf("%s: a signature but nothing asked", EnvKey)
	}
	dir := m.Dir
	if dir != "" && (!filepath.IsAbs(dir) || filepath.Clean(dir) != dir) {
		return Marker{}, fmt.Errorf("%s: directory %q: want an absolute, clean path", EnvKey, dir)
	}
	for kind, path := range m.Paths {
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			return Marker{}, fmt.Errorf("%s: %s namespace path %q: want an absolute, clean path", EnvKey, kind, path)
		}
		d := filepath.Dir(path)
		if dir != "" && d != dir {
			return Marker{}, fmt.Errorf("%s: namespaces in two directories, %s and %s: netshim pins a pod's in one", EnvKey, dir, d)
		}
		dir = d
	}
	if dir == "" {
		return Marker{}, fmt.Errorf("%s: names no namespace and no directory whose key signed it", EnvKey)
	}
	if len(v.Dirs) > 0 && !slices.Contains(v.Dirs, dir) {
		return Marker{}, fmt.Errorf("%s names namespaces in %s, which is not a netns directory this wrapper accepts (%s)", EnvKey, dir, strings.Join(v.Dirs, ", "))
	}
	key, err := v.ReadKey(dir)
	if err != nil {
		return Marker{}, fmt.Errorf("%s names namespaces in %s, which holds no usable key of netshim's (so netshim never pinned namespaces there): %w", EnvKey, dir, err)
	}
	if !hmac.Equal([]byte(mac), []byte(key.mac(spec))) {
		return Marker{}, fmt.Errorf("%s: the signature does not match the key in %s: the marker was not made by the netshim using that directory", EnvKey, filepath.Join(dir, KeyFile))
	}
	for kind, path := range m.Paths {
		if err := v.Check(path, kind); err != nil {
			return Marker{}, err
		}
	}
	return m, nil
}

// ParseEnv reads the namespaces of an EnvKey entry's value (without its
// signature).
func ParseEnv(value string) (Paths, error) {
	m, err := ParseMarker(value)
	if err != nil {
		return nil, err
	}
	return m.Paths, nil
}

// ParseMarker reads a marker's list (Marker.spec), and checks that what
// it asks holds together: a user namespace with both maps, each mapping
// container root; maps or idmapped mounts only with a user namespace.
func ParseMarker(value string) (Marker, error) {
	m := Marker{Paths: Paths{}}
	if value == "" {
		return m, nil
	}
	seen := map[string]bool{}
	for _, item := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return Marker{}, fmt.Errorf("%s: item %q: want KEY=VALUE", EnvKey, item)
		}
		if seen[k] {
			return Marker{}, fmt.Errorf("%s: %s named twice", EnvKey, k)
		}
		seen[k] = true
		var err error
		switch k {
		case itemUIDMap:
			m.UIDs, err = parseMaps(v)
		case itemGIDMap:
			m.GIDs, err = parseMaps(v)
		case itemIDMap:
			for _, e := range strings.Split(v, "+") {
				d, uerr := url.QueryUnescape(e)
				if uerr != nil || !filepath.IsAbs(d) {
					return Marker{}, fmt.Errorf("%s: idmapped mount %q: want an absolute path", EnvKey, e)
				}
				m.IDMapMounts = append(m.IDMapMounts, d)
			}
		case itemGroups:
			m.StrictGroups = true
			if v != "" {
				for _, g := range strings.Split(v, "+") {
					n, perr := strconv.ParseUint(g, 10, 32)
					if perr != nil {
						return Marker{}, fmt.Errorf("%s: group %q: %w", EnvKey, g, perr)
					}
					m.Groups = append(m.Groups, uint32(n))
				}
			}
		case itemDir:
			m.Dir = v
		default:
			kind := Kind(k)
			if _, ferr := kind.cloneFlag(); ferr != nil {
				return Marker{}, fmt.Errorf("%s: %w", EnvKey, ferr)
			}
			if v == "" {
				return Marker{}, fmt.Errorf("%s: item %q: want KIND=PATH", EnvKey, item)
			}
			m.Paths[kind] = v
		}
		if err != nil {
			return Marker{}, fmt.Errorf("%s: %s: %w", EnvKey, k, err)
		}
	}
	_, user := m.Paths[User]
	switch {
	case user && (len(m.UIDs) == 0 || len(m.GIDs) == 0):
		return Marker{}, fmt.Errorf("%s: a user namespace without its uid and gid maps", EnvKey)
	case user && (!MapsRoot(m.UIDs) || !MapsRoot(m.GIDs)):
		return Marker{}, fmt.Errorf("%s: the user namespace's maps do not map container root", EnvKey)
	case !user && (len(m.UIDs) > 0 || len(m.GIDs) > 0 || len(m.IDMapMounts) > 0):
		return Marker{}, fmt.Errorf("%s: id maps or idmapped mounts without a user namespace", EnvKey)
	}
	return m, nil
}

func parseMaps(v string) ([]IDMap, error) {
	var out []IDMap
	for _, s := range strings.Split(v, "+") {
		m, err := ParseIDMap(s)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// IsEnvEntry says whether an environment entry ("KEY=value") sets EnvKey.
func IsEnvEntry(entry string) bool {
	k, _, _ := strings.Cut(entry, "=")
	return k == EnvKey
}
