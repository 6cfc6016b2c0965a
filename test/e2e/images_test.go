//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The image service against a real registry: Debian's docker-registry
// (distribution 2.8), started by the test on 127.0.0.1 only, on free ports
// from registryPortMin (5000 is left to `make conformance`'s registry).

const (
	registryPortMin = 5010
	registryPortMax = 5099
	registryUser    = "nse2e"
	registryPass    = "s3cret:with-colon"
)

// registry is a docker-registry process of the test's own.
type registry struct {
	t    *testing.T
	addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startRegistry starts a registry on a free 127.0.0.1 port, with htpasswd
// basic auth for registryUser when auth is set, and stops it (by its PID)
// when the test ends.
func startRegistry(t *testing.T, auth bool) *registry {
	t.Helper()
	for _, tool := range []string{"docker-registry", "htpasswd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("e2e: %s is not installed (apt-get install docker-registry apache2-utils): %v", tool, err)
		}
	}
	dir := t.TempDir()
	var port int
	for p := registryPortMin; p <= registryPortMax; p++ {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			port = p
			break
		}
	}
	if port == 0 {
		t.Fatalf("no free port on 127.0.0.1 in %d-%d for the test registry", registryPortMin, registryPortMax)
	}
	r := &registry{t: t, addr: fmt.Sprintf("127.0.0.1:%d", port), done: make(chan struct{}), log: filepath.Join(dir, "registry.log")}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "storage"), r.addr)
	if auth {
		htpasswd := filepath.Join(dir, "htpasswd")
		mustRun(t, "htpasswd", "-Bbc", htpasswd, registryUser, registryPass)
		cfg += fmt.Sprintf("auth:\n  htpasswd:\n    realm: nse2e\n    path: %s\n", htpasswd)
	}
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	r.cmd = exec.Command("docker-registry", "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	if err := r.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("starting docker-registry: %v", err)
	}
	go func() {
		_ = r.cmd.Wait()
		logFile.Close()
		close(r.done)
	}()
	t.Cleanup(r.stop)

	// Up when /v2/ answers: 200, or 401 with auth.
	var last string
	if !poll(startDeadline, func() bool {
		select {
		case <-r.done:
			return true
		default:
		}
		resp, err := http.Get("http://" + r.addr + "/v2/")
		if err != nil {
			last = err.Error()
			return false
		}
		resp.Body.Close()
		last = resp.Status
		return resp.StatusCode == http.StatusOK || (auth && resp.StatusCode == http.StatusUnauthorized)
	}) {
		t.Fatalf("registry on %s did not answer within %s (last: %s)\n%s", r.addr, startDeadline, last, r.logTail())
	}
	select {
	case <-r.done:
		t.Fatalf("docker-registry exited at start-up\n%s", r.logTail())
	default:
	}
	t.Logf("registry on %s (auth %v), PID %d", r.addr, auth, r.cmd.Process.Pid)
	return r
}

func (r *registry) stop() {
	select {
	case <-r.done:
		return
	default:
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	if r.t.Failed() {
		r.t.Logf("registry %s log:\n%s", r.addr, r.logTail())
	}
}

func (r *registry) logTail() string {
	data, _ := os.ReadFile(r.log)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// pushTestImage makes a small image of its own (a marker file, so its ID
// is new; the given USER), pushes it as ref (logging in first when
// dockerConfig is set, a Docker CLI config dir of the test's own), and
// removes it locally so that a pull really downloads it.
func pushTestImage(t *testing.T, ref, user, dockerConfig string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	marker := fmt.Sprintf("%s %d\n", ref, time.Now().UnixNano())
	for _, h := range []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/nse2e-marker", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(marker))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(marker)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), commandDeadline)
	defer cancel()
	imp := exec.CommandContext(ctx, "docker", "import", "--change", "USER "+user, "--change", `CMD ["/bin/sh"]`, "-", ref)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v\n%s", ref, err, out)
	}
	// Whatever happens, do not leave the image behind.
	t.Cleanup(func() { _, _ = runCmd("docker", "rmi", "-f", ref) })

	cli := []string{}
	if dockerConfig != "" {
		cli = []string{"--config", dockerConfig}
		host, _, _ := strings.Cut(ref, "/")
		login := exec.CommandContext(ctx, "docker", append(cli, "login", "-u", registryUser, "--password-stdin", host)...)
		login.Stdin = strings.NewReader(registryPass)
		if out, err := login.CombinedOutput(); err != nil {
			t.Fatalf("docker login %s: %v\n%s", host, err, out)
		}
	}
	mustRun(t, "docker", append(cli, "push", ref)...)
	mustRun(t, "docker", "rmi", ref)
	if _, err := runCmd("docker", "image", "inspect", ref); err == nil {
		t.Fatalf("%s is still present locally after docker rmi", ref)
	}
}

// dockerImageID is the ID Docker gives a reference, or "" if it has none.
func dockerImageID(ref string) string {
	out, err := runCmd("docker", "image", "inspect", "--format", "{{.Id}}", ref)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

func (e *env) images() runtimeapi.ImageServiceClient {
	return runtimeapi.NewImageServiceClient(e.conn)
}

// criImage is the part of crictl's image JSON the tests read.
type criImage struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests"`
	Size        string   `json:"size"`
	UID         *struct {
		Value string `json:"value"`
	} `json:"uid"`
	Username string `json:"username"`
	Pinned   bool   `json:"pinned"`
}

// crictlPull runs `crictl pull` and returns the image ref it printed.
func (e *env) crictlPull(args ...string) string {
	e.t.Helper()
	out := e.mustCrictl(append([]string{"pull"}, args...)...)
	// "Image is up to date for sha256:..."
	f := strings.Fields(out)
	if len(f) == 0 || !strings.HasPrefix(f[len(f)-1], "sha256:") {
		e.t.Fatalf("crictl pull %v printed %q, want an image ID", args, out)
	}
	return f[len(f)-1]
}

// TestImagePullListStatusRemove: crictl pull from a local registry returns
// the image ID; crictl images / inspecti show tags, digests, size and the
// image's user; rmi removes it, and RemoveImage of the removed image and
// ImageStatus of it succeed (idempotent, nil image); imagefsinfo reports
// Docker's storage directory.
func TestImagePullListStatusRemove(t *testing.T) {
	reg := startRegistry(t, false)
	e := newEnv(t, envOptions{})
	e.start()

	ref := reg.addr + "/nse2e/img:1"
	pushTestImage(t, ref, "1002", "")

	id := e.crictlPull(ref)
	if got := dockerImageID(ref); got != id {
		t.Fatalf("crictl pull returned %s, Docker has %s as %q: the image ref must be the image ID", id, got, ref)
	}

	// crictl images, unfiltered and filtered by the reference.
	var list struct {
		Images []criImage `json:"images"`
	}
	for _, filter := range []string{"", ref, reg.addr + "/nse2e/img", id} {
		args := []string{"images", "-o", "json"}
		if filter != "" {
			args = append(args, filter)
		}
		out := e.mustCrictl(args...)
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("parsing crictl images: %v\n%s", err, out)
		}
		var found *criImage
		for i := range list.Images {
			if list.Images[i].ID == id {
				found = &list.Images[i]
			}
		}
		if found == nil {
			t.Fatalf("crictl images %q does not list %s:\n%s", filter, id, out)
		}
		if filter != "" && len(list.Images) != 1 {
			t.Errorf("crictl images %q listed %d images, want 1", filter, len(list.Images))
		}
		if len(found.RepoTags) != 1 || found.RepoTags[0] != ref || len(found.RepoDigests) != 1 ||
			!strings.HasPrefix(found.RepoDigests[0], reg.addr+"/nse2e/img@sha256:") || found.Size == "" || found.Size == "0" {
			t.Errorf("crictl images %q: %+v, want tag %s, one digest of that repository and a size", filter, *found, ref)
		}
	}

	// crictl inspecti: status and verbose info.
	insp := e.inspecti(ref)
	if insp.Status.ID != id || insp.Status.UID == nil || insp.Status.UID.Value != "1002" || insp.Status.Username != "" {
		t.Errorf("crictl inspecti %s: %+v, want id %s and uid 1002", ref, insp.Status, id)
	}
	if insp.Info.ID != id || insp.Info.Config.User != "1002" {
		t.Errorf("crictl inspecti %s verbose info: %+v, want Docker's inspect of %s with User 1002", ref, insp.Info, id)
	}

	// The pause image is pinned (kubelet's image GC keeps it).
	ctx, cancel := e.rpcCtx()
	defer cancel()
	st, err := e.images().ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: pauseImage}})
	if err != nil || st.Image == nil || !st.Image.Pinned {
		t.Errorf("ImageStatus %s = %v, %v; want a pinned image", pauseImage, st, err)
	}

	// imagefsinfo: Docker's storage driver directory, with usage. On the
	// containerd image store (Docker 29) there is no such directory: the
	// root dir, bytes from Docker's disk usage API, inodes unknown.
	root := strings.TrimSpace(mustRun(t, "docker", "info", "--format", "{{.DockerRootDir}}/{{.Driver}}"))
	containerdStore := strings.Contains(mustRun(t, "docker", "info", "--format", "{{json .DriverStatus}}"), "io.containerd.snapshotter.v1")
	if containerdStore {
		root = strings.TrimSpace(mustRun(t, "docker", "info", "--format", "{{.DockerRootDir}}"))
	}
	out := e.mustCrictl("imagefsinfo", "-o", "json")
	var fsInfo struct {
		Status struct {
			ImageFilesystems     []fsUsageJSON `json:"imageFilesystems"`
			ContainerFilesystems []fsUsageJSON `json:"containerFilesystems"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &fsInfo); err != nil {
		t.Fatalf("parsing crictl imagefsinfo: %v\n%s", err, out)
	}
	if len(fsInfo.Status.ImageFilesystems) != 1 || len(fsInfo.Status.ContainerFilesystems) != 1 {
		t.Fatalf("crictl imagefsinfo: want one image and one container filesystem:\n%s", out)
	}
	img := fsInfo.Status.ImageFilesystems[0]
	inodesOK := img.InodesUsed.Value != "" && img.InodesUsed.Value != "0"
	if containerdStore {
		inodesOK = img.InodesUsed.Value == ""
	}
	if img.FsID.Mountpoint != root || img.UsedBytes.Value == "" || img.UsedBytes.Value == "0" || !inodesOK {
		t.Errorf("crictl imagefsinfo image filesystem %+v, want mountpoint %s and non-zero usage", img, root)
	}
	if c := fsInfo.Status.ContainerFilesystems[0]; c.FsID.Mountpoint != root {
		t.Errorf("crictl imagefsinfo container filesystem %+v, want mountpoint %s", c, root)
	}

	// crictl rmi, then the CRI calls on a removed image.
	e.mustCrictl("rmi", ref)
	if got := dockerImageID(ref); got != "" {
		t.Fatalf("crictl rmi %s: Docker still has it as %s", ref, got)
	}
	if got := dockerImageID(id); got != "" {
		t.Fatalf("crictl rmi %s: Docker still has image %s", ref, id)
	}
	for _, spec := range []string{id, ref} {
		if _, err := e.images().RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: spec}}); err != nil {
			t.Errorf("RemoveImage %s of a removed image: %v, want success", spec, err)
		}
		st, err := e.images().ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: spec}})
		if err != nil || st.Image != nil {
			t.Errorf("ImageStatus %s of a removed image = %v, %v; want no image and no error", spec, st, err)
		}
	}
}

// inspectiJSON is the part of `crictl inspecti -o json` the tests read:
// crictl puts the status and, at top level, each verbose info entry
// (netshim's "info" is Docker's image inspect document).
type inspectiJSON struct {
	Status criImage `json:"status"`
	Info   struct {
		ID     string `json:"Id"`
		Config struct {
			User string `json:"User"`
		} `json:"Config"`
	} `json:"info"`
}

func (e *env) inspecti(ref string) inspectiJSON {
	e.t.Helper()
	out := e.mustCrictl("inspecti", "-o", "json", ref)
	var v inspectiJSON
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("parsing crictl inspecti: %v\n%s", err, out)
	}
	return v
}

type fsUsageJSON struct {
	FsID struct {
		Mountpoint string `json:"mountpoint"`
	} `json:"fsId"`
	UsedBytes struct {
		Value string `json:"value"`
	} `json:"usedBytes"`
	InodesUsed struct {
		Value string `json:"value"`
	} `json:"inodesUsed"`
}

// TestImagePullWithCredentials: a registry with basic auth refuses an
// anonymous pull and a wrong password, and serves `crictl pull --creds`
// and a PullImage whose AuthConfig carries only `auth` (base64
// user:password).
func TestImagePullWithCredentials(t *testing.T) {
	reg := startRegistry(t, true)
	e := newEnv(t, envOptions{})
	e.start()

	ref := reg.addr + "/nse2e/private:1"
	pushTestImage(t, ref, "www-data:1004", filepath.Join(t.TempDir(), "docker-config"))

	for _, args := range [][]string{{ref}, {"--creds", registryUser + ":wrong", ref}} {
		so, se, err := e.crictl(append([]string{"pull"}, args...)...)
		if err == nil {
			t.Fatalf("crictl pull %v from a registry with auth succeeded:\n%s", args, so)
		}
		if !strings.Contains(se, "auth") && !strings.Contains(se, "unauthorized") {
			t.Errorf("crictl pull %v: the error does not say it is about credentials:\n%s", args, se)
		}
	}
	if got := dockerImageID(ref); got != "" {
		t.Fatalf("a refused pull left %s present", ref)
	}

	id := e.crictlPull("--creds", registryUser+":"+registryPass, ref)
	if got := dockerImageID(ref); got != id {
		t.Fatalf("crictl pull --creds returned %s, Docker has %q", id, got)
	}
	if st := e.inspecti(ref).Status; st.Username != "www-data" || st.UID != nil {
		t.Errorf("crictl inspecti of an image with USER www-data:1004: %+v, want username www-data and no uid", st)
	}
	e.mustCrictl("rmi", id)
	if got := dockerImageID(ref); got != "" {
		t.Fatalf("crictl rmi %s left %s", id, got)
	}

	ctx, cancel := e.rpcCtx()
	defer cancel()
	resp, err := e.images().PullImage(ctx, &runtimeapi.PullImageRequest{
		Image: &runtimeapi.ImageSpec{Image: ref},
		Auth:  &runtimeapi.AuthConfig{Auth: base64.StdEncoding.EncodeToString([]byte(registryUser + ":" + registryPass))},
	})
	if err != nil {
		t.Fatalf("PullImage with AuthConfig.auth: %v\n%s", err, e.logTail(20))
	}
	if resp.ImageRef != id {
		t.Errorf("PullImage returned %s, want the image ID %s", resp.ImageRef, id)
	}
	if _, err := e.images().RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: resp.ImageRef}}); err != nil {
		t.Errorf("RemoveImage %s: %v", resp.ImageRef, err)
	}
}
