package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/netshim/netshim/pkg/runcwrap"
)

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

// clampBundle applies clampConfig to bundle/config.json, in place.
func clampBundle(bundle string) error {
	return runcwrap.EditFile(filepath.Join(bundle, "config.json"), clampConfig)
}
