package podns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ociNamespace is an entry of an OCI config's linux.namespaces.
type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// ApplyToConfig edits an OCI runtime config (a bundle's config.json) as
// the marker in its process.env asks, and returns the marker accept read
// from it (Verifier.Accept), for what the config cannot say (the idmapped
// rootfs of a container in a user namespace):
//
//   - each pinned namespace gets its path in linux.namespaces, and the
//     sysctls of its kind leave linux.sysctl (dropSysctlsOf); with the
//     netns, Docker's libnetwork hook goes (dropLibnetworkHooks);
//   - with a user namespace, linux.uidMappings and gidMappings go: runc
//     reads the maps from the namespace it joins, and warns when given
//     both;
//   - each bind mount whose destination the marker lists as idmapped gets
//     the namespace's maps (the mount's uidMappings and gidMappings,
//     which runc makes an idmapped mount of); a destination no bind mount
//     has is an error, as a mount kubelet asked for and did not get;
//   - with StrictGroups, process.user.additionalGids keeps only the
//     process's gid and the marker's Groups (strictGroups);
//   - the marker leaves the environment.
//
// A config without the marker comes back unchanged (false). Every member
// the edit does not touch keeps its bytes.
func ApplyToConfig(config []byte, accept func(value string) (Marker, error)) ([]byte, Marker, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, Marker{}, false, fmt.Errorf("parsing the runtime config: %w", err)
	}
	proc, env, value, found, err := takeMarker(top["process"])
	if err != nil || !found {
		return config, Marker{}, false, err
	}
	m, err := accept(value)
	if err != nil {
		return nil, Marker{}, false, err
	}
	if len(m.Paths) > 0 {
		if top["linux"], err = applyToLinux(top["linux"], m.Paths); err != nil {
			return nil, Marker{}, false, err
		}
	}
	if _, ok := m.Paths[Net]; ok {
		if top["hooks"], err = dropLibnetworkHooks(top["hooks"]); err != nil {
			return nil, Marker{}, false, err
		}
		if top["hooks"] == nil {
			delete(top, "hooks")
		}
	}
	if len(m.IDMapMounts) > 0 {
		if top["mounts"], err = idmapMounts(top["mounts"], m); err != nil {
			return nil, Marker{}, false, err
		}
	}
	if m.StrictGroups {
		if proc["user"], err = strictGroups(proc["user"], m.Groups); err != nil {
			return nil, Marker{}, false, err
		}
	}
	if proc["env"], err = json.Marshal(env); err != nil {
		return nil, Marker{}, false, err
	}
	if top["process"], err = json.Marshal(proc); err != nil {
		return nil, Marker{}, false, err
	}
	out, err := json.Marshal(top)
	if err != nil {
		return nil, Marker{}, false, err
	}
	return out, m, true, nil
}

// applyToLinux puts the pinned paths in an OCI config's linux section:
// linux.namespaces, without the sysctls of their kinds, and without
// linux's own id maps when the user namespace is pinned.
func applyToLinux(raw json.RawMessage, paths Paths) (json.RawMessage, error) {
	var linux map[string]json.RawMessage
	if len(raw) > 0 && !isNull(raw) {
		if err := json.Unmarshal(raw, &linux); err != nil {
			return nil, fmt.Errorf("parsing the runtime config's linux: %w", err)
		}
	}
	if linux == nil {
		linux = map[string]json.RawMessage{}
	}
	var nss []ociNamespace
	if raw, ok := linux["namespaces"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &nss); err != nil {
			return nil, fmt.Errorf("parsing linux.namespaces: %w", err)
		}
	}
	for _, kind := range sortedKinds(paths) {
		i := 0
		for ; i < len(nss) && nss[i].Type != kind.ociType(); i++ {
		}
		if i == len(nss) {
			nss = append(nss, ociNamespace{Type: kind.ociType()})
		}
		nss[i].Path = paths[kind]
	}
	var err error
	if linux["namespaces"], err = json.Marshal(nss); err != nil {
		return nil, err
	}
	if linux["sysctl"], err = dropSysctlsOf(linux["sysctl"], paths); err != nil {
		return nil, err
	}
	if linux["sysctl"] == nil {
		delete(linux, "sysctl")
	}
	if _, ok := paths[User]; ok {
		// Docker writes them only with userns-remap. The joined
		// namespace's own maps are the ones that count: runc reads them
		// from it, and warns when given both.
		delete(linux, "uidMappings")
		delete(linux, "gidMappings")
	}
	return json.Marshal(linux)
}

// sortedKinds are the kinds of paths in a fixed order, so that namespaces
// a config lacks are added in the same order every time.
func sortedKinds(paths Paths) []Kind {
	kinds := make([]Kind, 0, len(paths))
	for k := range paths {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	return kinds
}

// ociIDMap is a range of an OCI id map (linux.uidMappings, a mount's
// uidMappings).
type ociIDMap struct {
	ContainerID uint32 `json:"containerID"`
	HostID      uint32 `json:"hostID"`
	Size        uint32 `json:"size"`
}

func ociIDMaps(ms []IDMap) []ociIDMap {
	out := make([]ociIDMap, len(ms))
	for i, m := range ms {
		out[i] = ociIDMap(m)
	}
	return out
}

// idmapMounts gives the bind mounts of an OCI config's mounts whose
// destinations m lists the maps of m's user namespace, which makes runc
// mount them idmapped: what the container's root writes there lands on
// the node as the source's root, as kubelet asked with a CRI mount's
// uidMappings. Only bind mounts: the kernel idmaps a bind's mount, not a
// new filesystem's. A listed destination that no bind mount has is an
// error naming it.
func idmapMounts(raw json.RawMessage, m Marker) (json.RawMessage, error) {
	want := map[string]bool{}
	for _, d := range m.IDMapMounts {
		want[filepath.Clean(d)] = false
	}
	var mounts []json.RawMessage
	if len(raw) > 0 && !isNull(raw) {
		if err := json.Unmarshal(raw, &mounts); err != nil {
			return nil, fmt.Errorf("parsing mounts: %w", err)
		}
	}
	uids, err := json.Marshal(ociIDMaps(m.UIDs))
	if err != nil {
		return nil, err
	}
	gids, err := json.Marshal(ociIDMaps(m.GIDs))
	if err != nil {
		return nil, err
	}
	for i, rawMount := range mounts {
		var mount map[string]json.RawMessage
		if err := json.Unmarshal(rawMount, &mount); err != nil {
			return nil, fmt.Errorf("parsing mounts[%d]: %w", i, err)
		}
		var fields struct {
			Destination string   `json:"destination"`
			Type        string   `json:"type"`
			Options     []string `json:"options"`
		}
		if err := json.Unmarshal(rawMount, &fields); err != nil {
			return nil, fmt.Errorf("parsing mounts[%d]: %w", i, err)
		}
		dest := filepath.Clean(fields.Destination)
		if _, ok := want[dest]; !ok {
			continue
		}
		if fields.Type != "bind" && !slices.Contains(fields.Options, "bind") && !slices.Contains(fields.Options, "rbind") {
			continue
		}
		mount["uidMappings"], mount["gidMappings"] = uids, gids
		if mounts[i], err = json.Marshal(mount); err != nil {
			return nil, err
		}
		want[dest] = true
	}
	var missing []string
	for d, found := range want {
		if !found {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%s asks for idmapped mounts at %s, where the runtime config has no bind mount", EnvKey, strings.Join(missing, ", "))
	}
	return json.Marshal(mounts)
}

// strictGroups applies SupplementalGroupsPolicy Strict to an OCI
// process's user: its additionalGids keep the ids Docker put there that
// are the process's gid or one of groups, and every id of groups Docker
// did not put there is added. Docker's list holds the CRI's supplemental
// groups (its GroupAdd) and the groups the image's /etc/group gives the
// user; Strict wants the latter gone. The user comes back unchanged (its
// bytes) when nothing changes.
func strictGroups(raw json.RawMessage, groups []uint32) (json.RawMessage, error) {
	var user map[string]json.RawMessage
	if len(raw) > 0 && !isNull(raw) {
		if err := json.Unmarshal(raw, &user); err != nil {
			return nil, fmt.Errorf("parsing process.user: %w", err)
		}
	}
	var ids struct {
		GID            uint32   `json:"gid"`
		AdditionalGids []uint32 `json:"additionalGids"`
	}
	if len(raw) > 0 && !isNull(raw) {
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, fmt.Errorf("parsing process.user: %w", err)
		}
	}
	allowed := map[uint32]bool{ids.GID: true}
	for _, g := range groups {
		allowed[g] = true
	}
	kept := []uint32{}
	seen := map[uint32]bool{}
	for _, g := range ids.AdditionalGids {
		if allowed[g] && !seen[g] {
			kept = append(kept, g)
			seen[g] = true
		}
	}
	for _, g := range groups {
		if !seen[g] {
			kept = append(kept, g)
			seen[g] = true
		}
	}
	if slices.Equal(kept, ids.AdditionalGids) {
		return raw, nil
	}
	if user == nil {
		user = map[string]json.RawMessage{}
	}
	var err error
	if user["additionalGids"], err = json.Marshal(kept); err != nil {
		return nil, err
	}
	return json.Marshal(user)
}

// dropSysctlsOf removes from an OCI config's linux.sysctl those of the
// namespace kinds paths puts the container in. netshim wrote the pod's
// sysctls there before its network was set up (WriteSysctls; "Sysctls and
// the network" in docs/design/sandbox-modes.md), and nothing may write them
// again once the CNI ADD ran: Docker gives every container with a network
// namespace of its own (network "none", which is what it sees here) its
// defaults, net.ipv4.ip_unprivileged_port_start=0 and
// net.ipv4.ping_group_range, and runc would write them into the pod's
// shared namespace at each container's start, over the pod's own values
// and after the ADD.
func dropSysctlsOf(raw json.RawMessage, paths Paths) (json.RawMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return raw, nil
	}
	var sysctls map[string]string
	if err := json.Unmarshal(raw, &sysctls); err != nil {
		return nil, fmt.Errorf("parsing linux.sysctl: %w", err)
	}
	dropped := false
	for name := range sysctls {
		parts, ok := SplitSysctl(name)
		if !ok {
			continue // runc refuses it, as it would have
		}
		if _, ok := paths[SysctlKind(parts)]; ok {
			delete(sysctls, name)
			dropped = true
		}
	}
	switch {
	case !dropped:
		return raw, nil
	case len(sysctls) == 0:
		return nil, nil
	}
	return json.Marshal(sysctls)
}

// libnetworkHook is the first argument of the prestart hook through which
// Docker's libnetwork takes over a container's network namespace.
const libnetworkHook = "libnetwork-setkey"

// dropLibnetworkHooks removes Docker's libnetwork hook from an OCI config's
// hooks. In a pinned netns the network is netshim's (CNI's): Docker's
// network mode is "none" and has nothing to set up there, but Docker up to
// 25 begins its setup by disabling IPv6 on every interface of the netns,
// which would remove the IPv6 addresses a CNI ADD running at the same time
// has just made. Without the hook Docker leaves the namespace alone.
func dropLibnetworkHooks(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || isNull(raw) {
		return raw, nil
	}
	var hooks map[string]json.RawMessage
	if err := json.Unmarshal(raw, &hooks); err != nil {
		return nil, fmt.Errorf("parsing hooks: %w", err)
	}
	for kind, rawList := range hooks {
		var list []json.RawMessage
		if err := json.Unmarshal(rawList, &list); err != nil {
			return nil, fmt.Errorf("parsing hooks.%s: %w", kind, err)
		}
		kept := list[:0]
		for _, h := range list {
			var hook struct {
				Args []string `json:"args"`
			}
			if err := json.Unmarshal(h, &hook); err != nil {
				return nil, fmt.Errorf("parsing a hook of hooks.%s: %w", kind, err)
			}
			if len(hook.Args) > 0 && hook.Args[0] == libnetworkHook {
				continue
			}
			kept = append(kept, h)
		}
		if len(kept) == 0 {
			delete(hooks, kind)
			continue
		}
		var err error
		if hooks[kind], err = json.Marshal(kept); err != nil {
			return nil, err
		}
	}
	if len(hooks) == 0 {
		return nil, nil
	}
	return json.Marshal(hooks)
}

// ApplyToProcess edits an OCI process (the file of `runc exec
// --process`) as the marker in its env asks: Docker builds an exec's
// environment from the container's, so the marker the container was
// created with comes with it. It leaves the environment; with
// StrictGroups, user.additionalGids is filtered as ApplyToConfig does
// (Docker lists the image's /etc/group memberships for an exec too).
// accept reads the marker (Verifier.Accept): only a signed one is
// trusted for its groups, and an unsigned one that asks something is an
// error, since no container created through the wrapper carries one. A
// process without the marker comes back unchanged (false).
func ApplyToProcess(process []byte, accept func(value string) (Marker, error)) ([]byte, bool, error) {
	proc, env, value, found, err := takeMarker(process)
	if err != nil || !found {
		return process, false, err
	}
	if value != "" {
		if !strings.Contains(value, macSep) {
			return nil, false, fmt.Errorf("%s carries no netshim signature in an exec's process: the container could not have been created with it; refusing the exec", EnvKey)
		}
		m, err := accept(value)
		if err != nil {
			return nil, false, err
		}
		if m.StrictGroups {
			if proc["user"], err = strictGroups(proc["user"], m.Groups); err != nil {
				return nil, false, err
			}
		}
	}
	if proc["env"], err = json.Marshal(env); err != nil {
		return nil, false, err
	}
	out, err := json.Marshal(proc)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// takeMarker parses an OCI process and returns it with its environment
// without the marker entries, and the value of the last one.
func takeMarker(raw json.RawMessage) (proc map[string]json.RawMessage, env []string, value string, found bool, err error) {
	if len(raw) == 0 || isNull(raw) {
		return nil, nil, "", false, nil
	}
	if err := json.Unmarshal(raw, &proc); err != nil {
		return nil, nil, "", false, fmt.Errorf("parsing the process: %w", err)
	}
	rawEnv, ok := proc["env"]
	if !ok || isNull(rawEnv) {
		return proc, nil, "", false, nil
	}
	var all []string
	if err := json.Unmarshal(rawEnv, &all); err != nil {
		return nil, nil, "", false, fmt.Errorf("parsing process.env: %w", err)
	}
	env = make([]string, 0, len(all))
	for _, e := range all {
		if IsEnvEntry(e) {
			value, found = strings.TrimPrefix(e, EnvKey+"="), true
			continue
		}
		env = append(env, e)
	}
	return proc, env, value, found, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }
