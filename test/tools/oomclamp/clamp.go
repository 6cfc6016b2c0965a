package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// runcGlobalValueFlags are runc's global flags that take a value in the
// next argument (when not written --flag=value).
var runcGlobalValueFlags = map[string]bool{"log": true, "log-format": true, "root": true, "criu": true, "rootless": true}

// runcCreateValueFlags are the flags of `runc create` and `runc run` that
// take a value, other than the bundle.
var runcCreateValueFlags = map[string]bool{"console-socket": true, "pid-file": true, "preserve-fds": true, "pidfd-socket": true}

// flagName returns the name of a flag argument ("--root=x" -> "root",
// true for an inline value; "-b" -> "b") and false for a non-flag.
func flagName(arg string) (name string, inline bool, ok bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false, false
	}
	// runc's CLI takes -flag and --flag alike.
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	if n, _, found := strings.Cut(name, "="); found {
		return n, true, true
	}
	return name, false, true
}

// bundleOf finds the bundle of a runc command line (without argv[0]):
// ok is true for `create` and `run`, whose bundle is then the --bundle
// (-b) value, or "" for runc's default, the working directory.
func bundleOf(args []string) (bundle string, ok bool) {
	i := 0
	for ; i < len(args); i++ {
		name, inline, isFlag := flagName(args[i])
		if !isFlag {
			break
		}
		if runcGlobalValueFlags[name] && !inline {
			i++
		}
	}
	if i >= len(args) || (args[i] != "create" && args[i] != "run") {
		return "", false
	}
	for i++; i < len(args); i++ {
		name, inline, isFlag := flagName(args[i])
		if !isFlag {
			continue
		}
		switch {
		case name == "bundle" || name == "b":
			if inline {
				_, bundle, _ = strings.Cut(args[i], "=")
			} else if i+1 < len(args) {
				bundle = args[i+1]
				i++
			}
		case runcCreateValueFlags[name] && !inline:
			i++
		}
	}
	return bundle, true
}

// clampConfig returns config (an OCI runtime config.json) with a negative
// process.oomScoreAdj raised to 0, and whether it changed anything; every
// other byte of each member stays as it was.
func clampConfig(config []byte) ([]byte, bool, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(config, &top); err != nil {
		return nil, false, fmt.Errorf("parsing the runtime config: %w", err)
	}
	rawProc, ok := top["process"]
	if !ok || bytes.Equal(bytes.TrimSpace(rawProc), []byte("null")) {
		return config, false, nil
	}
	var proc map[string]json.RawMessage
	if err := json.Unmarshal(rawProc, &proc); err != nil {
		return nil, false, fmt.Errorf("parsing the runtime config's process: %w", err)
	}
	rawAdj, ok := proc["oomScoreAdj"]
	if !ok || bytes.Equal(bytes.TrimSpace(rawAdj), []byte("null")) {
		return config, false, nil
	}
	var adj int
	if err := json.Unmarshal(rawAdj, &adj); err != nil {
		return nil, false, fmt.Errorf("parsing process.oomScoreAdj %s: %w", rawAdj, err)
	}
	if adj >= 0 {
		return config, false, nil
	}
	proc["oomScoreAdj"] = json.RawMessage("0")
	var err error
	if top["process"], err = json.Marshal(proc); err != nil {
		return nil, false, err
	}
	out, err := json.Marshal(top)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// clampBundle applies clampConfig to bundle/config.json, in place (a
// renamed temp file, same mode). A bundle without a config is left to
// runc, which says so in its own words.
func clampBundle(bundle string) error {
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	out, changed, err := clampConfig(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if !changed {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(bundle, ".config.json.oomclamp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
