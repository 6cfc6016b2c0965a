//go:build !linux

package crilog

import (
	"errors"
	"os"
)

// openFile is Linux-only: the confinement rests on openat2 and O_PATH.
func openFile(path string, _ openMode) (*os.File, error) {
	return nil, &os.PathError{Op: "open", Path: path, Err: errors.ErrUnsupported}
}

// ReplaceLink is Linux-only, as openFile is.
func ReplaceLink(path, _ string) (bool, error) {
	return false, &os.PathError{Op: "replace", Path: path, Err: errors.ErrUnsupported}
}
