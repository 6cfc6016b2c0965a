package procutil

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
)

// PidsWithEnv returns the pids of the processes under procRoot whose
// environment (as they were started) sets key to one of values, and for
// each the value. Processes that exit or cannot be read meanwhile are
// skipped.
func PidsWithEnv(procRoot, key string, values map[string]bool) (map[int]string, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	prefix := []byte(key + "=")
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		env, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "environ"))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
				continue
			}
			continue // a process exiting while read: ESRCH and friends
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, prefix); ok {
				if values[string(v)] {
					out[pid] = string(v)
				}
				break
			}
		}
	}
	return out, nil
}
