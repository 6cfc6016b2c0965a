package critest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/netshim/netshim/test/harness"
)

// runDirPattern names the temp dirs of the runs (under /tmp): a run killed
// before its cleanup leaves one, which the next run cleans.
const runDirPattern = "nsconf.*"

var sandboxIDRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// runSandboxes are the IDs of the sandboxes the netshim of the run in dir
// made and did not remove: it keeps a checkpoint per sandbox in
// ROOT/sandbox/ID.json. netshim lists every sandbox of the Docker engine,
// and other critest runs on this engine use the same pod namespaces: only
// these are this run's.
func runSandboxes(dir string) []string {
	files, _ := filepath.Glob(filepath.Join(dir, "root", "sandbox", "*.json"))
	var ids []string
	for _, f := range files {
		if id := strings.TrimSuffix(filepath.Base(f), ".json"); sandboxIDRE.MatchString(id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// leftoverContainers are the Docker containers of the sandboxes of the run
// in dir that netshim did not remove: the pause container (named by the
// sandbox ID) and the containers labelled with its sandbox ID.
func leftoverContainers(cli harness.DockerCLI, dir string) []string {
	var ids []string
	for _, sb := range runSandboxes(dir) {
		if _, err := cli.Docker("container", "inspect", "--format", "{{.Id}}", sb); err == nil {
			ids = append(ids, sb)
		}
		out, err := cli.Docker("ps", "-aq", "--no-trunc", "--filter", "label=netshim.io/sandbox-id="+sb)
		if err == nil {
			ids = append(ids, strings.Fields(out)...)
		}
	}
	return ids
}

// removeLeftoverContainers force-removes leftoverContainers, saying so
// through logf.
func removeLeftoverContainers(cli harness.DockerCLI, dir string, logf func(string, ...any)) error {
	ids := leftoverContainers(cli, dir)
	if len(ids) == 0 {
		return nil
	}
	logf("removing %d leftover container(s) of critest's pods", len(ids))
	if out, err := cli.Docker(append([]string{"rm", "-f"}, ids...)...); err != nil {
		return fmt.Errorf("docker rm -f: %w\n%s", err, strings.TrimSpace(out))
	}
	return nil
}

// staleRunDirs are the run dirs under tmp other than current.
func staleRunDirs(tmp, current string) []string {
	dirs, _ := filepath.Glob(filepath.Join(tmp, runDirPattern))
	var stale []string
	for _, d := range dirs {
		if st, err := os.Stat(d); err != nil || !st.IsDir() || filepath.Clean(d) == filepath.Clean(current) {
			continue
		}
		stale = append(stale, d)
	}
	return stale
}

// repoRoot is the directory of netshim's go.mod, looked for from the
// working directory up: the package dir under `go test`, the checkout
// when hack/conformance.sh runs the compiled test.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/netshim/netshim\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no netshim checkout (go.mod) above the working directory")
		}
		dir = parent
	}
}
