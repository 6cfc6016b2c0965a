package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// fakeImageID makes a Docker-style image ID.
func fakeImageID(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func imgSpec(s string) *runtimeapi.ImageSpec { return &runtimeapi.ImageSpec{Image: s} }

func (e *testEnv) imageStatus(t *testing.T, spec string) *runtimeapi.Image {
	t.Helper()
	resp, err := e.svc.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: imgSpec(spec)})
	if err != nil {
		t.Fatalf("ImageStatus %q: %v", spec, err)
	}
	return resp.Image
}

func (e *testEnv) listImages(t *testing.T, filter string) []*runtimeapi.Image {
	t.Helper()
	req := &runtimeapi.ListImagesRequest{}
	if filter != "" {
		req.Filter = &runtimeapi.ImageFilter{Image: imgSpec(filter)}
	}
	resp, err := e.svc.ListImages(context.Background(), req)
	if err != nil {
		t.Fatalf("ListImages %q: %v", filter, err)
	}
	return resp.Images
}

// presentImages lists the references remembered as present, for messages.
func (e *testEnv) presentImages() []string { return e.svc.present.list() }

func (e *testEnv) imageRemembered(ref string) bool {
	return e.svc.present.has(ref)
}

func TestPullImageNormalisesAndReturnsImageID(t *testing.T) {
	e := newTestEnv(t)
	resp, err := e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: imgSpec("busybox")})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	const full = "docker.io/library/busybox:latest"
	if n := e.docker.Count("ImagePull " + full); n != 1 {
		t.Errorf("Docker was asked to pull %s %d times, want 1 (calls %v)", full, n, e.docker.Calls())
	}
	if want := fakeImageID(full); resp.ImageRef != want {
		t.Errorf("ImageRef = %q, want the image ID %q", resp.ImageRef, want)
	}
	if got := e.docker.PullOptions()[0].RegistryAuth; got != "" {
		t.Errorf("anonymous pull sent credentials %q", got)
	}
	if !e.imageRemembered("busybox") || !e.imageRemembered(full) {
		t.Errorf("pulled image not remembered as present under its spec and normalised name: %v", e.presentImages())
	}
	// EnsurePresent trusts the mark: no Docker call.
	e.docker.ResetCalls()
	if err := e.svc.EnsurePresent(context.Background(), full); err != nil || len(e.docker.Calls()) != 0 {
		t.Errorf("EnsurePresent after PullImage: err %v, calls %v; want no Docker call", err, e.docker.Calls())
	}
	// The returned ref is what ImageStatus and ListImages report as ID.
	if st := e.imageStatus(t, "busybox"); st == nil || st.Id != resp.ImageRef {
		t.Errorf("ImageStatus(busybox) = %v, want id %s", st, resp.ImageRef)
	}
	if st := e.imageStatus(t, resp.ImageRef); st == nil || st.Id != resp.ImageRef {
		t.Errorf("ImageStatus(%s) = %v", resp.ImageRef, st)
	}
}

func TestPullImageSendsCredentials(t *testing.T) {
	e := newTestEnv(t)
	_, err := e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{
		Image: imgSpec("127.0.0.1:5000/test/busybox:1"),
		Auth:  &runtimeapi.AuthConfig{Username: "alice", Password: "pw"},
	})
	if err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	ac := decodeAuthHeader(t, e.docker.PullOptions()[0].RegistryAuth)
	if ac.Username != "alice" || ac.Password != "pw" || ac.ServerAddress != "127.0.0.1:5000" {
		t.Errorf("X-Registry-Auth = %+v", ac)
	}
}

func TestPullImageErrors(t *testing.T) {
	e := newTestEnv(t)
	const ref = "127.0.0.1:5000/private/app:1"
	e.docker.Do(func(s *fakedocker.State) {
		s.PullErrs[ref] = "Head http://127.0.0.1:5000/v2/private/app/manifests/1: no basic auth credentials"
	})
	_, err := e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: imgSpec(ref)})
	if err == nil || !strings.Contains(err.Error(), "no basic auth credentials") {
		t.Errorf("PullImage of a failing pull: err %v, want the stream's error", err)
	}
	if e.imageRemembered(ref) {
		t.Errorf("failed pull marked the image present")
	}

	for _, spec := range []string{"", "Not/Valid", fakeImageID("x")} {
		_, err := e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: imgSpec(spec)})
		if codeOf(err) != codes.InvalidArgument {
			t.Errorf("PullImage %q: err %v, want InvalidArgument", spec, err)
		}
	}
	_, err = e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{})
	if codeOf(err) != codes.InvalidArgument {
		t.Errorf("PullImage with no image spec: err %v, want InvalidArgument", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	_, err = e.svc.PullImage(ctx, &runtimeapi.PullImageRequest{Image: imgSpec("busybox")})
	if codeOf(err) != codes.DeadlineExceeded {
		t.Errorf("PullImage past its deadline: err %v (code %v), want DeadlineExceeded", err, codeOf(err))
	}
}

func TestImageStatusOfMissingImageIsNilNotError(t *testing.T) {
	e := newTestEnv(t)
	for _, spec := range []string{"busybox", "docker.io/library/nothere:1", fakeImageID("none"), "abcdef012345"} {
		resp, err := e.svc.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: imgSpec(spec), Verbose: true})
		if err != nil {
			t.Errorf("ImageStatus %q: %v, want no error", spec, err)
			continue
		}
		if resp.Image != nil || len(resp.Info) != 0 {
			t.Errorf("ImageStatus %q = %v, want no image", spec, resp)
		}
	}
	for _, spec := range []string{"", "UPPER"} {
		_, err := e.svc.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: imgSpec(spec)})
		if codeOf(err) != codes.InvalidArgument {
			t.Errorf("ImageStatus %q: err %v, want InvalidArgument", spec, err)
		}
	}
}

func TestImageStatusFields(t *testing.T) {
	e := newTestEnv(t)
	id := fakeImageID("app")
	e.docker.AddImage(fakedocker.Image{ID: id, User: "www-data:1004", Size: 4242},
		"busybox:1.36", "quay.io/x/app:v1", "busybox@"+testDigest)

	st := e.imageStatus(t, "busybox:1.36")
	want := &runtimeapi.Image{
		Id:          id,
		RepoTags:    []string{"docker.io/library/busybox:1.36", "quay.io/x/app:v1"},
		RepoDigests: []string{"docker.io/library/busybox@" + testDigest},
		Size:        4242,
		Username:    "www-data",
		Spec:        &runtimeapi.ImageSpec{Image: id},
	}
	if !proto.Equal(st, want) {
		t.Fatalf("ImageStatus = %v\nwant %v", st, want)
	}
	// The same status whichever way the image is named (critest "all
	// kinds of references").
	for _, spec := range []string{id, id[7:], id[7:19], "docker.io/library/busybox:1.36", "quay.io/x/app:v1", "busybox@" + testDigest, "docker.io/library/busybox@" + testDigest} {
		if got := e.imageStatus(t, spec); !proto.Equal(got, want) {
			t.Errorf("ImageStatus %q = %v\nwant %v", spec, got, want)
		}
	}

	resp, err := e.svc.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: imgSpec(id), Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info image.InspectResponse
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		t.Fatalf("verbose info is not Docker's inspect JSON: %v\n%s", err, resp.Info["info"])
	}
	if info.ID != id || info.Config == nil || info.Config.User != "www-data:1004" {
		t.Errorf("verbose info = %s", resp.Info["info"])
	}
}

func TestImageStatusUIDAndUsername(t *testing.T) {
	e := newTestEnv(t)
	for i, c := range []struct {
		user     string
		uid      *runtimeapi.Int64Value
		username string
	}{
		{"1002", &runtimeapi.Int64Value{Value: 1002}, ""},
		{"www-data", nil, "www-data"},
		{"1003:1004", &runtimeapi.Int64Value{Value: 1003}, ""},
		{"www-data:1004", nil, "www-data"},
		{"", nil, ""},
		{"0", &runtimeapi.Int64Value{Value: 0}, ""},
	} {
		ref := "localhost:5000/user-test:" + string(rune('a'+i))
		e.docker.AddImage(fakedocker.Image{ID: fakeImageID(ref), User: c.user}, ref)
		for _, st := range []*runtimeapi.Image{e.imageStatus(t, ref), e.listImages(t, ref)[0]} {
			if !proto.Equal(st.Uid, c.uid) || st.Username != c.username {
				t.Errorf("user %q: uid %v username %q, want uid %v username %q", c.user, st.Uid, st.Username, c.uid, c.username)
			}
		}
	}
}

func TestPodInfraImageIsPinned(t *testing.T) {
	e := newTestEnv(t)
	e.docker.AddImage(fakedocker.Image{ID: fakeImageID("other")}, "docker.io/library/busybox:latest")
	if st := e.imageStatus(t, testPauseImage); st == nil || !st.Pinned {
		t.Errorf("pause image status %v, want pinned", st)
	}
	if st := e.imageStatus(t, "busybox"); st == nil || st.Pinned {
		t.Errorf("busybox status %v, want not pinned", st)
	}
	for _, img := range e.listImages(t, "") {
		if img.Pinned != slices.Contains(img.RepoTags, testPauseImage) {
			t.Errorf("ListImages: %v pinned=%v", img.RepoTags, img.Pinned)
		}
	}
}

func TestListImagesFilter(t *testing.T) {
	e := newTestEnv(t)
	b1, b2, ng := fakeImageID("b1"), fakeImageID("b2"), fakeImageID("ng")
	e.docker.AddImage(fakedocker.Image{ID: b1, Size: 10}, "busybox:1")
	e.docker.AddImage(fakedocker.Image{ID: b2, Size: 20}, "busybox:2", "busybox@"+testDigest)
	e.docker.AddImage(fakedocker.Image{ID: ng, Size: 30}, "nginx:latest", "localhost:5000/e2e/nginx:1.14-2")
	pause := fakeImageID(testPauseImage) // the fake's ID for an image without metadata

	ids := func(imgs []*runtimeapi.Image) []string {
		var out []string
		for _, i := range imgs {
			out = append(out, i.Id)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	for filter, want := range map[string][]string{
		"":                                sorted(b1, b2, ng, pause),
		"busybox":                         sorted(b1, b2),
		"docker.io/library/busybox":       sorted(b1, b2),
		"busybox:1":                       {b1},
		"docker.io/library/busybox:2":     {b2},
		"busybox:3":                       nil,
		"busybox@" + testDigest:           {b2},
		"nginx":                           {ng},
		"localhost:5000/e2e/nginx:1.14-2": {ng},
		"localhost:5000/e2e/nginx":        {ng},
		"localhost:5000/e2e/nginx:latest": nil,
		ng:                                {ng},
		ng[7:19]:                          {ng},
		"registry.k8s.io/pause:3.10":      {pause},
		"registry.k8s.io/pause":           {pause},
		"quay.io/nothing/here":            nil,
	} {
		if got := ids(e.listImages(t, filter)); !slices.Equal(got, want) {
			t.Errorf("ListImages filter %q = %v, want %v", filter, got, want)
		}
	}
	for _, bad := range []string{"UPPER", "sha256:zz", "a b"} {
		_, err := e.svc.ListImages(context.Background(), &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: imgSpec(bad)}})
		if codeOf(err) != codes.InvalidArgument {
			t.Errorf("ListImages filter %q: err %v, want InvalidArgument", bad, err)
		}
	}

	// Fields, normalised references.
	for _, img := range e.listImages(t, "nginx") {
		if !slices.Equal(sorted(img.RepoTags...), []string{"docker.io/library/nginx:latest", "localhost:5000/e2e/nginx:1.14-2"}) || img.Size != 30 || img.Spec.GetImage() != ng {
			t.Errorf("ListImages nginx = %v", img)
		}
	}
	// A user is inspected once per image ID, then cached.
	e.docker.ResetCalls()
	e.listImages(t, "")
	if n := e.docker.Count("ImageInspect"); n != 0 {
		t.Errorf("second ListImages inspected %d images, want 0 (users cached by ID)", n)
	}
}

func TestRemoveImageRemovesAllTagsAndIsIdempotent(t *testing.T) {
	e := newTestEnv(t)
	id := fakeImageID("multi")
	refs := []string{"docker.io/library/busybox:latest", "docker.io/library/busybox:1.36", "quay.io/x/app:v1", "docker.io/library/busybox@" + testDigest}
	e.docker.AddImage(fakedocker.Image{ID: id}, refs...)
	e.svc.markPresent("busybox", "quay.io/x/app:v1", testPauseImage)

	if _, err := e.svc.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: imgSpec(id)}); err != nil {
		t.Fatalf("RemoveImage by ID: %v", err)
	}
	for _, r := range refs {
		if e.docker.HasImageRef(r) {
			t.Errorf("reference %s survived RemoveImage", r)
		}
	}
	if e.imageStatus(t, id) != nil {
		t.Errorf("image still has a status after RemoveImage")
	}
	if e.imageRemembered("busybox") || e.imageRemembered("quay.io/x/app:v1") {
		t.Errorf("removed image still remembered as present: %v", e.presentImages())
	}
	if !e.imageRemembered(testPauseImage) {
		t.Errorf("RemoveImage forgot an unrelated image")
	}
	// Again, and for images that never existed: success.
	for _, spec := range []string{id, "busybox", "nothere:1", id[7:19]} {
		if _, err := e.svc.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: imgSpec(spec)}); err != nil {
			t.Errorf("RemoveImage %q of a missing image: %v, want success", spec, err)
		}
	}
	if _, err := e.svc.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: imgSpec("")}); codeOf(err) != codes.InvalidArgument {
		t.Errorf("RemoveImage with an empty spec: err %v, want InvalidArgument", err)
	}
}

func TestRemoveImageByTagRemovesTheImage(t *testing.T) {
	e := newTestEnv(t)
	id := fakeImageID("t")
	e.docker.AddImage(fakedocker.Image{ID: id}, "docker.io/library/busybox:latest", "docker.io/library/busybox:2")
	if _, err := e.svc.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: imgSpec("busybox")}); err != nil {
		t.Fatalf("RemoveImage by tag: %v", err)
	}
	if e.docker.HasImageRef("docker.io/library/busybox:2") {
		t.Errorf("removing by one tag left the image's other tag")
	}
}

func TestRemoveImageInUseFails(t *testing.T) {
	e := newTestEnv(t)
	id := fakeImageID("used")
	e.docker.AddImage(fakedocker.Image{ID: id}, "docker.io/library/busybox:latest")
	if _, err := e.docker.ContainerCreate(context.Background(), &container.Config{Image: "docker.io/library/busybox:latest"}, &container.HostConfig{}, nil, nil, "user"); err != nil {
		t.Fatal(err)
	}
	_, err := e.svc.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: imgSpec(id)})
	if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is using") {
		t.Errorf("RemoveImage of an image in use: err %v (code %v), want FailedPrecondition naming the container", err, codeOf(err))
	}
	if !e.docker.HasImageRef("docker.io/library/busybox:latest") {
		t.Errorf("image in use was removed")
	}
}
