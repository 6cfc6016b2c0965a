package critest

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/netshim/netshim/test/harness"
)

// The list hack/critest-images.sh prints is the one the test reads: the
// script and the parser agree.
func TestParseImageListOfTheScript(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "hack", "critest-images.sh"), "list").CombinedOutput()
	if err != nil {
		t.Fatalf("critest-images.sh list: %v\n%s", err, out)
	}
	images, err := parseImageList(string(out))
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]testImage{}
	for _, img := range images {
		byKey[img.Key] = img
	}
	if b := byKey["busybox"]; b.Kind != kindContainer || !slices.Equal(b.Names, []string{defaultTestImage}) {
		t.Errorf("busybox: %+v", b)
	}
	if n := byKey["nginx"]; !slices.Equal(n.Names, []string{webServerImage}) {
		t.Errorf("nginx: %+v", n)
	}
	if tags := byKey["test-image-tags"]; tags.Kind != kindPulled || len(tags.Names) != 3 {
		t.Errorf("test-image-tags: %+v", tags)
	}
}

func TestParseImageListRejectsBadLines(t *testing.T) {
	for _, in := range []string{
		"",
		"busybox container\n",
		"busybox kept registry.k8s.io/x:1\n",
	} {
		if _, err := parseImageList(in); err == nil {
			t.Errorf("parseImageList(%q) accepted it", in)
		}
	}
}

func newRegistry(t *testing.T) *harness.Registry {
	t.Helper()
	r, err := harness.NewRegistry(harness.WithRegistryDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every name goes under its own tag, each path once more as :latest;
// container images keep their names, the others lose their registry
// names, pulled ones their original names too.
func TestPlanPush(t *testing.T) {
	const g = "gcr.io/k8s-staging-cri-tools/"
	images := []testImage{
		{"busybox", kindContainer, []string{"registry.k8s.io/e2e-test-images/busybox:1.29-2"}},
		{"user-uid", kindStatus, []string{g + "test-image-user-uid:latest"}},
		{"tags", kindPulled, []string{g + "test-image-tags:1", g + "test-image-tags:2"}},
		{"tag-test", kindPulled, []string{g + "test-image-tag:test"}},
		{"tag-all", kindPulled, []string{g + "test-image-tag:all"}},
	}
	p, err := planPush(images, newRegistry(t).NameWithTag)
	if err != nil {
		t.Fatal(err)
	}
	const l = "localhost:5000/k8s-staging-cri-tools/"
	wantPushes := []pushStep{
		{"registry.k8s.io/e2e-test-images/busybox:1.29-2", "localhost:5000/e2e-test-images/busybox:1.29-2"},
		{"registry.k8s.io/e2e-test-images/busybox:1.29-2", "localhost:5000/e2e-test-images/busybox:latest"},
		{g + "test-image-user-uid:latest", l + "test-image-user-uid:latest"},
		{g + "test-image-tags:1", l + "test-image-tags:1"},
		{g + "test-image-tags:1", l + "test-image-tags:latest"},
		{g + "test-image-tags:2", l + "test-image-tags:2"},
		{g + "test-image-tag:test", l + "test-image-tag:test"},
		{g + "test-image-tag:test", l + "test-image-tag:latest"},
		{g + "test-image-tag:all", l + "test-image-tag:all"},
	}
	if !slices.Equal(p.Pushes, wantPushes) {
		t.Errorf("pushes\n%q\nwant\n%q", p.Pushes, wantPushes)
	}
	wantDrop := []string{
		l + "test-image-user-uid:latest",
		l + "test-image-tags:1", l + "test-image-tags:latest", g + "test-image-tags:1",
		l + "test-image-tags:2", g + "test-image-tags:2",
		l + "test-image-tag:test", l + "test-image-tag:latest", g + "test-image-tag:test",
		l + "test-image-tag:all", g + "test-image-tag:all",
	}
	if !slices.Equal(p.Drop, wantDrop) {
		t.Errorf("drop\n%q\nwant\n%q", p.Drop, wantDrop)
	}
	if _, err := planPush([]testImage{{"d", kindPulled, []string{"x@sha256:" + strings.Repeat("0", 64)}}}, newRegistry(t).NameWithTag); err == nil {
		t.Error("a digest reference was planned")
	}
}

// fakeDocker answers image inspect for the images it holds and records
// everything else.
type fakeDocker struct {
	images map[string]bool
	calls  []string
}

func (f *fakeDocker) Docker(args ...string) (string, error) {
	if len(args) >= 2 && args[0] == "image" && args[1] == "inspect" {
		if f.images[args[len(args)-1]] {
			return "sha256:1", nil
		}
		return "Error: No such image", errors.New("exit status 1")
	}
	f.calls = append(f.calls, strings.Join(args, " "))
	switch args[0] {
	case "tag":
		f.images[args[2]] = true
	case "image":
		delete(f.images, args[2])
	}
	return "", nil
}

func TestPushImages(t *testing.T) {
	const src = "gcr.io/k8s-staging-cri-tools/test-image-1:latest"
	images := []testImage{{"test-image-1", kindPulled, []string{src}}}
	cli := &fakeDocker{images: map[string]bool{}}
	err := pushImages(t.Context(), newRegistry(t), cli, images)
	if err == nil || !strings.Contains(err.Error(), src+" is missing: run hack/critest-images.sh build first") || len(cli.calls) != 0 {
		t.Fatalf("missing image: %v, calls %q", err, cli.calls)
	}
	cli.images[src] = true
	reg := newRegistry(t)
	if err := pushImages(t.Context(), reg, cli, images); err != nil {
		t.Fatal(err)
	}
	dst := "localhost:5000/k8s-staging-cri-tools/test-image-1:latest"
	want := []string{"tag " + src + " " + dst, "push " + dst, "image rm " + dst, "image rm " + src}
	if !slices.Equal(cli.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", cli.calls, want)
	}
	if len(cli.images) != 0 {
		t.Errorf("names left: %v", cli.images)
	}
}
