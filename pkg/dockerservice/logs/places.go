package logs

import (
	"fmt"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/pkg/crilog"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/dockerspec"
)

// Where a container's CRI log goes is up to the pod spec: kubelet sends
// the sandbox's log_directory (/var/log/pods/<ns>_<pod>_<uid>) and the
// container's log_path (<container>/<restart>.log) relative to it. netshim
// writes that file as root, so the pair is checked before anything is
// created:
//
//   - log_directory is absolute and clean (RunPodSandbox checks that
//     already, dockerspec.ValidateLogDirectory); log_path is relative, clean and
//     has no ".." component, so the joined path is textually under the
//     directory;
//   - no component of the joined path that exists is a symlink, and the
//     file, if it exists, is a regular file holding CRI entries (the same
//     rules crilog applies, without the kernel's help, when the file is
//     opened; this check only turns a bad path into a clear
//     InvalidArgument before the container exists);
//   - the file is not under netshim's own --root-dir.
//
// The directories need not exist yet. kubelet makes them before
// CreateContainer, crictl users often do not: StartContainer makes the
// missing ones, each relative to its parent's fd without following a
// symlink (crilog.NewWriter), so making them cannot escape either.
//
// An empty log_path means no log file. A log_path with no log_directory
// also means none, as with containerd: there is nothing to anchor it to.

// Places is where container log files may be: anywhere kubelet says but
// under netshim's own root directory.
type Places struct {
	// RootDir is netshim's state directory (--root-dir).
	RootDir string
}

// Resolve checks the sandbox's log directory and the container's
// log path, and returns the log file's path ("" for no log). Errors are
// InvalidArgument and say what to fix.
func (p Places) Resolve(dir, rel string) (string, error) {
	if rel == "" || dir == "" {
		return "", nil
	}
	if err := dockerspec.ValidateLogDirectory(dir); err != nil {
		return "", err
	}
	switch {
	case strings.ContainsRune(rel, 0):
		return "", crirpc.InvalidArgf("container log_path %q contains a NUL byte", rel)
	case filepath.IsAbs(rel):
		return "", crirpc.InvalidArgf("container log_path %q must be relative to the pod sandbox's log_directory %s", rel, dir)
	case dockerspec.HasDotDot(rel):
		return "", crirpc.InvalidArgf("container log_path %q must not contain a \"..\" component: the log file must stay under the log_directory %s", rel, dir)
	case rel == "." || strings.HasSuffix(rel, "/"):
		return "", crirpc.InvalidArgf("container log_path %q must name a file under the log_directory %s", rel, dir)
	case filepath.Clean(rel) != rel:
		return "", crirpc.InvalidArgf("container log_path %q is not a clean path: write it as %q", rel, filepath.Clean(rel))
	}
	path := filepath.Join(dir, rel)
	if !isUnder(path, dir) {
		// Unreachable after the checks above; kept as the rule itself.
		return "", crirpc.InvalidArgf("container log_path %q leaves the log_directory %s", rel, dir)
	}
	if err := p.CheckFile(path); err != nil {
		return "", crirpc.WithCode(codes.InvalidArgument, err)
	}
	return path, nil
}

// CheckFile applies the rules that hold for a log file path however
// it was obtained: from a CreateContainer just now, or from the label of a
// container created by an older netshim. It only reads the file system.
func (p Places) CheckFile(path string) error {
	if err := p.CheckPlace(path); err != nil {
		return err
	}
	if err := crilog.Check(path); err != nil {
		return fmt.Errorf("log file %s: %w", path, err)
	}
	return nil
}

// CheckPlace is the part of CheckFile that does not look at
// the file: the path is absolute, clean and outside netshim's root dir.
func (p Places) CheckPlace(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("log file path %q is not an absolute clean path", path)
	}
	for _, root := range rootDirForms(p.RootDir) {
		if isUnder(path, root) || path == root {
			return fmt.Errorf("log file %s is inside netshim's root directory %s, which holds netshim's own state; use a log_directory outside it", path, root)
		}
	}
	return nil
}

// isUnder reports whether the clean absolute path is strictly below dir.
func isUnder(path, dir string) bool {
	if dir == "/" {
		return path != "/"
	}
	return strings.HasPrefix(path, dir+"/")
}

// rootDirForms is netshim's root directory as given and, if it differs,
// with its symlinks resolved: a log path has no symlinks (they are
// refused), so it can only be under the resolved form, yet an operator
// reads the given one.
func rootDirForms(rootDir string) []string {
	if rootDir == "" {
		return nil
	}
	abs, err := filepath.Abs(rootDir)
	if err != nil {
		return nil
	}
	forms := []string{abs}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		forms = append(forms, real)
	}
	return forms
}
