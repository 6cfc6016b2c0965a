package nodeconformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ShadowPath fills dir with a symlink to every executable found in the
// directories of path (the first one of each name wins, as for a lookup),
// except those named in hide, and returns dir for use as the only PATH
// entry.
//
// Why: the node e2e suite starts kubelet through systemd-run whenever
// systemd-run is on PATH, and systemd is installed here but is not PID 1,
// so that start fails. With systemd-run hidden the suite starts kubelet as
// its own child, which also keeps kubelet's PATH (it inherits the suite's)
// complete otherwise.
func ShadowPath(dir, path string, hide ...string) (string, error) {
	hidden := map[string]bool{}
	for _, h := range hide {
		hidden[h] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	seen := map[string]bool{}
	for _, d := range filepath.SplitList(path) {
		if d == "" || !filepath.IsAbs(d) {
			continue // a relative entry would follow the suite's cwd
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if seen[name] || hidden[name] || strings.HasPrefix(name, ".") {
				continue
			}
			target := filepath.Join(d, name)
			fi, err := os.Stat(target)
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				continue
			}
			seen[name] = true
			if err := os.Symlink(target, filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("linking %s: %w", target, err)
			}
		}
	}
	return dir, nil
}
