package podns

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// ociNamespace is an entry of an OCI config's linux.namespaces.
type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// ApplyToConfig edits an OCI runtime config (a bundle's config.json) as
// the marker in its process.env asks: accept reads the marker's value
// (Verifier.Accept) and says which namespaces it names, each of which gets
// its pinned path in linux.namespaces, and the marker leaves the
// environment. A config without the marker comes back unchanged (false).
// Every member the edit does not touch keeps its bytes.
func ApplyToConfig(config []byte, accept func(value string) (Paths, error)) ([]byte, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, false, fmt.Errorf("parsing the runtime config: %w", err)
	}
	proc, env, value, found, err := takeMarker(top["process"])
	if err != nil || !found {
		return config, false, err
	}
	paths, err := accept(value)
	if err != nil {
		return nil, false, err
	}
	var linux map[string]json.RawMessage
	if raw, ok := top["linux"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &linux); err != nil {
			return nil, false, fmt.Errorf("parsing the runtime config's linux: %w", err)
		}
	}
	if linux == nil {
		linux = map[string]json.RawMessage{}
	}
	var nss []ociNamespace
	if raw, ok := linux["namespaces"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &nss); err != nil {
			return nil, false, fmt.Errorf("parsing linux.namespaces: %w", err)
		}
	}
	for kind, path := range paths {
		i := 0
		for ; i < len(nss) && nss[i].Type != kind.ociType(); i++ {
		}
		if i == len(nss) {
			nss = append(nss, ociNamespace{Type: kind.ociType()})
		}
		nss[i].Path = path
	}
	if linux["namespaces"], err = json.Marshal(nss); err != nil {
		return nil, false, err
	}
	if linux["sysctl"], err = dropSysctlsOf(linux["sysctl"], paths); err != nil {
		return nil, false, err
	}
	if linux["sysctl"] == nil {
		delete(linux, "sysctl")
	}
	if _, ok := paths[Net]; ok {
		if top["hooks"], err = dropLibnetworkHooks(top["hooks"]); err != nil {
			return nil, false, err
		}
		if top["hooks"] == nil {
			delete(top, "hooks")
		}
	}
	if top["linux"], err = json.Marshal(linux); err != nil {
		return nil, false, err
	}
	if proc["env"], err = json.Marshal(env); err != nil {
		return nil, false, err
	}
	if top["process"], err = json.Marshal(proc); err != nil {
		return nil, false, err
	}
	out, err := json.Marshal(top)
	return out, err == nil, err
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

// StripFromProcess removes the marker from an OCI process (the file of
// `runc exec --process`): Docker builds an exec's environment from the
// container's, so it would carry the marker into the exec otherwise.
func StripFromProcess(process []byte) ([]byte, bool, error) {
	proc, env, _, found, err := takeMarker(process)
	if err != nil || !found {
		return process, false, err
	}
	if proc["env"], err = json.Marshal(env); err != nil {
		return nil, false, err
	}
	out, err := json.Marshal(proc)
	return out, err == nil, err
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
