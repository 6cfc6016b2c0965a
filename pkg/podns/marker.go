package podns

import (
	"fmt"
	"sort"
	"strings"
)

// EnvKey is the environment variable through which netshim names, in a
// container's Docker config, the pinned namespaces the container must run
// in: "net=/run/netshim/netns/pod-x.net[,ipc=...]". Docker 20.10 cannot
// pass annotations to the OCI runtime, but it puts the environment in the
// bundle's config.json, where cmd/netshim-oci reads it, applies it to
// linux.namespaces and removes it, so the container's processes never see
// it. netshim sets it only on containers it runs with that wrapper, and
// refuses it in a pod's own environment.
const EnvKey = "NETSHIM_OCI_NAMESPACES"

// Paths are pinned namespace files by kind.
type Paths map[Kind]string

// Env is the "KEY=value" environment entry naming the paths.
func (ps Paths) Env() string {
	kinds := make([]string, 0, len(ps))
	for k := range ps {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	var b strings.Builder
	b.WriteString(EnvKey + "=")
	for i, k := range kinds {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + ps[Kind(k)])
	}
	return b.String()
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
