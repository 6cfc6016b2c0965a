package nodeconformance

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Leftovers lists, up to max of them, the files under dir that are not
// directories: the state another kubelet left there (pods, volumes,
// checkpoints, sockets), which the suite's kubelet would take over or its
// log GC delete. Empty directories are no one's state: a kubelet killed
// before its cleanup leaves /var/lib/kubelet/device-plugins, say, and that
// must not keep the suite from running. A missing dir holds nothing.
func Leftovers(dir string, max int) ([]string, error) {
	var found []string
	errEnough := errors.New("enough")
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		found = append(found, p)
		if len(found) == max {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return found, err
	}
	return found, nil
}
