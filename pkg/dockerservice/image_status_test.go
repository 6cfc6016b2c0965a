package dockerservice

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/network"
)

// The same three images as two engines answer for them: Docker 20.10
// (API 1.41, overlay2 graph driver) and Docker 29 (negotiated API 1.51,
// containerd image store). pause and netshim.local/busybox are imported
// locally (hack/images.sh); busybox:1.36 was pulled by its short name
// from a registry whose index has two platforms, on Docker 29 both
// pulled (`--platform`); 127.0.0.1:5000/netshim/app:1 was pulled from
// the local registry.
//
// What differs, in the engines' own words:
//   - ID: the config digest on 20.10, the manifest (or index) digest on 29;
//   - RepoDigests: none for an imported image on 20.10; name@<manifest
//     digest> for every name on 29;
//   - Size: the unpacked layers on 20.10 (list and inspect alike); on 29
//     compressed content plus unpacked snapshots, in the list summed over
//     every platform present, in inspect for the node's platform only;
//   - RepoTags: familiar names on both ("busybox:1.36").

const (
	d20PauseID   = "sha256:873ed75102791e5b0b8a7fcd41606c92fcec98d56d05ead4ac5131650004c136"
	d20BusyboxID = "sha256:8135583d97feb82398909c9c97607159e6db2c4ca2c885c0b8f590ee0f9fe90d"
	d20Hub136ID  = "sha256:3f57d9401f8d42f986df300f0c69192fc41da28ccc8d797829467780db3dd741"
	d20AppID     = "sha256:a416a98b71e224a31ee99cff8e16063554498227d2b696152a9c3e0aa65e5824"

	d29PauseID   = "sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a"
	d29BusyboxID = "sha256:1ac6a7d4d5c4e8a9ebcbcd6f4e0a3e6c4d77b7a3f3a2d0c1b9e8f7a6b5c4d3e2"
	// The index of busybox:1.36, the same digest on both engines.
	hub136Index = "sha256:7c3c3cea5d4d6133d6a694d23382f6a7b32652f23855abdba3eb039ca5995447"
	// The manifest of 127.0.0.1:5000/netshim/app:1, the same on both.
	appManifest = "sha256:5e9e7a3d2d1b6b3a9f4f0d9c2c6a1f7e8b5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b"
)

const docker20ImageList = `[
 {"Containers":-1,"Created":1763900000,"Id":"` + d20PauseID + `","Labels":{"netshim.image.key":"p1"},"ParentId":"",
  "RepoDigests":null,"RepoTags":["registry.k8s.io/pause:3.10"],"SharedSize":-1,"Size":742080,"VirtualSize":742080},
 {"Containers":-1,"Created":1763900001,"Id":"` + d20BusyboxID + `","Labels":{"netshim.image.key":"b1"},"ParentId":"",
  "RepoDigests":null,"RepoTags":["netshim.local/busybox:latest"],"SharedSize":-1,"Size":2214432,"VirtualSize":2214432},
 {"Containers":-1,"Created":1683590400,"Id":"` + d20Hub136ID + `","Labels":null,"ParentId":"",
  "RepoDigests":["busybox@` + hub136Index + `"],"RepoTags":["busybox:1.36"],"SharedSize":-1,"Size":4261550,"VirtualSize":4261550},
 {"Containers":-1,"Created":1763900100,"Id":"` + d20AppID + `","Labels":null,"ParentId":"",
  "RepoDigests":["127.0.0.1:5000/netshim/app@` + appManifest + `"],"RepoTags":["127.0.0.1:5000/netshim/app:1"],"SharedSize":-1,"Size":2214432,"VirtualSize":2214432}
]`

// Docker 20.10's inspect, trimmed to the fields netshim reads.
const docker20ImageInspect = `[
 {"Id":"` + d20PauseID + `","RepoTags":["registry.k8s.io/pause:3.10"],"RepoDigests":[],"Size":742080,"VirtualSize":742080,
  "Config":{"User":"65535:65535","Entrypoint":["/pause"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlay2"}},
 {"Id":"` + d20BusyboxID + `","RepoTags":["netshim.local/busybox:latest"],"RepoDigests":[],"Size":2214432,"VirtualSize":2214432,
  "Config":{"User":"","Cmd":["sh"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlay2"}},
 {"Id":"` + d20Hub136ID + `","RepoTags":["busybox:1.36"],"RepoDigests":["busybox@` + hub136Index + `"],"Size":4261550,"VirtualSize":4261550,
  "Config":{"User":"","Cmd":["sh"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlay2"}},
 {"Id":"` + d20AppID + `","RepoTags":["127.0.0.1:5000/netshim/app:1"],"RepoDigests":["127.0.0.1:5000/netshim/app@` + appManifest + `"],"Size":2214432,"VirtualSize":2214432,
  "Config":{"User":"1000"},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlay2"}}
]`

const docker29ImageList = `[
 {"Containers":1,"Created":1763900000,"Id":"` + d29PauseID + `","Labels":{"netshim.image.key":"p1"},"ParentId":"",
  "Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d29PauseID + `","size":482},
  "RepoDigests":["registry.k8s.io/pause@` + d29PauseID + `"],"RepoTags":["registry.k8s.io/pause:3.10"],"SharedSize":-1,"Size":1058816},
 {"Containers":0,"Created":1763900001,"Id":"` + d29BusyboxID + `","Labels":{"netshim.image.key":"b1"},"ParentId":"",
  "Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d29BusyboxID + `","size":482},
  "RepoDigests":["netshim.local/busybox@` + d29BusyboxID + `"],"RepoTags":["netshim.local/busybox:latest"],"SharedSize":-1,"Size":3256320},
 {"Containers":0,"Created":1683590400,"Id":"` + hub136Index + `","Labels":null,"ParentId":"",
  "Descriptor":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + hub136Index + `","size":9541},
  "RepoDigests":["busybox@` + hub136Index + `"],"RepoTags":["busybox:1.36"],"SharedSize":-1,"Size":12607488},
 {"Containers":0,"Created":1763900100,"Id":"` + appManifest + `","Labels":null,"ParentId":"",
  "Descriptor":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"` + appManifest + `","size":527},
  "RepoDigests":["127.0.0.1:5000/netshim/app@` + appManifest + `"],"RepoTags":["127.0.0.1:5000/netshim/app:1"],"SharedSize":-1,"Size":3256320}
]`

// Docker 29's inspect gives the size of the node's platform (linux/amd64).
const docker29ImageInspect = `[
 {"Id":"` + d29PauseID + `","RepoTags":["registry.k8s.io/pause:3.10"],"RepoDigests":["registry.k8s.io/pause@` + d29PauseID + `"],"Size":1058816,
  "Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d29PauseID + `","size":482},
  "Config":{"User":"65535:65535","Entrypoint":["/pause"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlayfs"}},
 {"Id":"` + d29BusyboxID + `","RepoTags":["netshim.local/busybox:latest"],"RepoDigests":["netshim.local/busybox@` + d29BusyboxID + `"],"Size":3256320,
  "Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + d29BusyboxID + `","size":482},
  "Config":{"User":"","Cmd":["sh"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlayfs"}},
 {"Id":"` + hub136Index + `","RepoTags":["busybox:1.36"],"RepoDigests":["busybox@` + hub136Index + `"],"Size":6418470,
  "Descriptor":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + hub136Index + `","size":9541},
  "Config":{"User":"","Cmd":["sh"]},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlayfs"}},
 {"Id":"` + appManifest + `","RepoTags":["127.0.0.1:5000/netshim/app:1"],"RepoDigests":["127.0.0.1:5000/netshim/app@` + appManifest + `"],"Size":3256320,
  "Descriptor":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"` + appManifest + `","size":527},
  "Config":{"User":"1000"},"Architecture":"amd64","Os":"linux","GraphDriver":{"Name":"overlayfs"}}
]`

// recordedEngine answers the image calls from recorded JSON; everything
// else goes to the embedded fake. It removes images as the engine's
// store does: a name untags, the image goes with its last name; on the
// containerd store a digest reference untags every name of that
// repository pointing at the image.
type recordedEngine struct {
	*fakeDocker
	containerdStore bool

	mu      sync.Mutex
	list    []image.Summary
	inspect map[string]image.InspectResponse // by ID
}

func newRecordedEngine(t *testing.T, listJSON, inspectJSON string, containerdStore bool) *recordedEngine {
	t.Helper()
	r := &recordedEngine{fakeDocker: newFakeDocker(), containerdStore: containerdStore, inspect: map[string]image.InspectResponse{}}
	if err := json.Unmarshal([]byte(listJSON), &r.list); err != nil {
		t.Fatalf("image list fixture: %v", err)
	}
	var ins []image.InspectResponse
	if err := json.Unmarshal([]byte(inspectJSON), &ins); err != nil {
		t.Fatalf("image inspect fixture: %v", err)
	}
	for _, i := range ins {
		r.inspect[i.ID] = i
	}
	return r
}

// resolveLocked finds the image a reference, ID or ID prefix names.
func (r *recordedEngine) resolveLocked(ref string) (string, bool) {
	if fakeHexRE.MatchString(ref) {
		want := "sha256:" + strings.TrimPrefix(ref, "sha256:")
		for id := range r.inspect {
			if strings.HasPrefix(id, want) {
				return id, true
			}
		}
	}
	for id, i := range r.inspect {
		for _, n := range slices.Concat(i.RepoTags, i.RepoDigests) {
			if sameRef(n, ref) {
				return id, true
			}
		}
	}
	return "", false
}

func (r *recordedEngine) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	r.record("ImageInspect " + ref)
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.resolveLocked(ref)
	if !ok {
		return image.InspectResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return r.inspect[id], nil
}

func (r *recordedEngine) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	r.record("ImageList")
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []image.Summary
	for _, s := range r.list {
		if _, ok := r.inspect[s.ID]; ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// ImagePull has nothing to fetch: the recorded image is there already.
func (r *recordedEngine) ImagePull(_ context.Context, ref string, _ image.PullOptions) (io.ReadCloser, error) {
	r.record("ImagePull " + ref)
	return io.NopCloser(strings.NewReader(`{"status":"Status: Image is up to date for ` + ref + `"}` + "\n")), nil
}

func (r *recordedEngine) ImageRemove(_ context.Context, ref string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
	r.record("ImageRemove " + ref)
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.resolveLocked(ref)
	if !ok {
		return nil, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	i := r.inspect[id]
	drop := func(names []string, gone func(string) bool) []string {
		return slices.DeleteFunc(slices.Clone(names), gone)
	}
	switch {
	case strings.HasPrefix(id, "sha256:"+strings.TrimPrefix(ref, "sha256:")) && fakeHexRE.MatchString(ref):
		if len(i.RepoTags) > 1 {
			return nil, errdefs.ErrConflict.WithMessage("conflict: unable to delete " + ref + " (must be forced) - image is referenced in multiple repositories")
		}
		i.RepoTags = nil
	case strings.Contains(ref, "@"):
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		i.RepoDigests = drop(i.RepoDigests, func(d string) bool { return sameRef(d, ref) })
		if r.containerdStore {
			// The digest is derived from the names: it goes with them.
			i.RepoTags = drop(i.RepoTags, func(tag string) bool {
				n, err := reference.ParseNormalizedNamed(tag)
				return err == nil && n.Name() == named.Name()
			})
		}
	default:
		i.RepoTags = drop(i.RepoTags, func(tag string) bool { return sameRef(tag, ref) })
	}
	if r.containerdStore || len(i.RepoTags) == 0 {
		// On the containerd store a digest reference exists only
		// through a name.
		i.RepoDigests = drop(i.RepoDigests, func(d string) bool {
			n, err := reference.ParseNormalizedNamed(d)
			return err == nil && !slices.ContainsFunc(i.RepoTags, func(tag string) bool {
				tn, err := reference.ParseNormalizedNamed(tag)
				return err == nil && tn.Name() == n.Name()
			})
		})
	}
	if len(i.RepoTags) == 0 && (r.containerdStore || len(i.RepoDigests) == 0) {
		delete(r.inspect, id)
		return []image.DeleteResponse{{Deleted: id}}, nil
	}
	r.inspect[id] = i
	return []image.DeleteResponse{{Untagged: ref}}, nil
}

// newImageEnv serves the image RPCs from an engine's recordings.
func newImageEnv(t *testing.T, eng *recordedEngine) *DockerService {
	t.Helper()
	ckpt, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := NewDockerService(Config{PodInfraImage: "registry.k8s.io/pause:3.10", NetworkPluginName: "fake"}, eng, ckpt, []network.NetworkPlugin{&fakePlugin{}})
	if err != nil {
		t.Fatal(err)
	}
	startService(t, ds)
	return ds
}

type engineFixture struct {
	name            string
	list, inspect   string
	containerdStore bool
	// ids of pause, netshim.local/busybox, busybox:1.36 and the app.
	ids [4]string
	// importedDigests are the RepoDigests an imported image has.
	importedDigests func(name, id string) []string
	// sizes are what ImageInspect says, for the node's platform.
	sizes [4]uint64
}

var engineFixtures = []engineFixture{
	{
		name: "docker 20.10", list: docker20ImageList, inspect: docker20ImageInspect,
		ids:             [4]string{d20PauseID, d20BusyboxID, d20Hub136ID, d20AppID},
		importedDigests: func(string, string) []string { return nil },
		sizes:           [4]uint64{742080, 2214432, 4261550, 2214432},
	},
	{
		name: "docker 29 containerd store", list: docker29ImageList, inspect: docker29ImageInspect, containerdStore: true,
		ids:             [4]string{d29PauseID, d29BusyboxID, hub136Index, appManifest},
		importedDigests: func(name, id string) []string { return []string{name + "@" + id} },
		sizes:           [4]uint64{1058816, 3256320, 6418470, 3256320},
	},
}

// wantImages is what netshim must answer for the recorded images on an
// engine: IDs as the engine gives them, names in the normalised form,
// the same on both engines, and sizes as ImageInspect gives them.
func (f engineFixture) wantImages() []*runtimeapi.Image {
	img := func(i int, tags, digests []string, uid *runtimeapi.Int64Value, pinned bool) *runtimeapi.Image {
		return &runtimeapi.Image{Id: f.ids[i], RepoTags: tags, RepoDigests: digests, Size: f.sizes[i], Uid: uid,
			Spec: &runtimeapi.ImageSpec{Image: f.ids[i]}, Pinned: pinned}
	}
	return []*runtimeapi.Image{
		img(0, []string{"registry.k8s.io/pause:3.10"}, f.importedDigests("registry.k8s.io/pause", f.ids[0]), &runtimeapi.Int64Value{Value: 65535}, true),
		img(1, []string{"netshim.local/busybox:latest"}, f.importedDigests("netshim.local/busybox", f.ids[1]), nil, false),
		img(2, []string{"docker.io/library/busybox:1.36"}, []string{"docker.io/library/busybox@" + hub136Index}, nil, false),
		img(3, []string{"127.0.0.1:5000/netshim/app:1"}, []string{"127.0.0.1:5000/netshim/app@" + appManifest}, &runtimeapi.Int64Value{Value: 1000}, false),
	}
}

func TestImageAnswersOnBothEngines(t *testing.T) {
	for _, f := range engineFixtures {
		t.Run(f.name, func(t *testing.T) {
			ds := newImageEnv(t, newRecordedEngine(t, f.list, f.inspect, f.containerdStore))
			ctx := context.Background()
			want := f.wantImages()

			list, err := ds.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Images) != len(want) {
				t.Fatalf("ListImages gave %d images, want %d: %v", len(list.Images), len(want), list.Images)
			}
			for i, w := range want {
				if !proto.Equal(list.Images[i], w) {
					t.Errorf("ListImages[%d] =\n  %v\nwant\n  %v", i, list.Images[i], w)
				}
			}
			// ImageStatus answers the same as the list, by every name.
			for _, w := range want {
				specs := slices.Concat([]string{w.Id, w.Id[7:19]}, w.RepoTags, w.RepoDigests)
				for _, spec := range specs {
					st, err := ds.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: spec}})
					if err != nil {
						t.Fatalf("ImageStatus %s: %v", spec, err)
					}
					if !proto.Equal(st.Image, w) {
						t.Errorf("ImageStatus %s =\n  %v\nwant\n  %v", spec, st.Image, w)
					}
				}
			}
			// The familiar short name kubelet passes for a pod's image.
			st, err := ds.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}})
			if err != nil || st.Image.GetId() != f.ids[2] {
				t.Errorf("ImageStatus busybox:1.36 = %v, %v; want id %s", st.GetImage(), err, f.ids[2])
			}
			// PullImage answers the ID the list and status report.
			pulled, err := ds.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}})
			if err != nil || pulled.ImageRef != f.ids[2] {
				t.Errorf("PullImage busybox:1.36 = %v, %v; want %s", pulled, err, f.ids[2])
			}
			// The filter by repository, tag, digest and ID. An imported
			// image has a digest on the containerd store only.
			var pauseByDigest []string
			if f.containerdStore {
				pauseByDigest = []string{f.ids[0]}
			}
			for _, c := range []struct {
				spec    string
				wantIDs []string
			}{
				{"busybox", []string{f.ids[2]}},
				{"docker.io/library/busybox:1.36", []string{f.ids[2]}},
				{"netshim.local/busybox", []string{f.ids[1]}},
				{f.ids[3], []string{f.ids[3]}},
				{"127.0.0.1:5000/netshim/app:1", []string{f.ids[3]}},
				{"127.0.0.1:5000/netshim/app@" + appManifest, []string{f.ids[3]}},
				{"registry.k8s.io/pause@" + f.ids[0], pauseByDigest},
			} {
				spec, wantIDs := c.spec, c.wantIDs
				resp, err := ds.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: spec}}})
				if err != nil {
					t.Fatalf("ListImages %s: %v", spec, err)
				}
				var got []string
				for _, img := range resp.Images {
					got = append(got, img.Id)
				}
				if !slices.Equal(got, wantIDs) {
					t.Errorf("ListImages filter %s = %v, want %v", spec, got, wantIDs)
				}
			}
		})
	}
}

// The same names on both engines: kubelet and crictl see one image
// whichever engine runs it.
func TestImageNamesAgreeAcrossEngines(t *testing.T) {
	a, b := engineFixtures[0].wantImages(), engineFixtures[1].wantImages()
	for i := range a {
		if !slices.Equal(a[i].RepoTags, b[i].RepoTags) {
			t.Errorf("image %d: tags %v on %s, %v on %s", i, a[i].RepoTags, engineFixtures[0].name, b[i].RepoTags, engineFixtures[1].name)
		}
	}
}

func TestRemoveImageOnBothEngines(t *testing.T) {
	for _, f := range engineFixtures {
		for _, how := range []struct {
			name string
			spec func(ids [4]string) string
		}{
			{"by tag", func([4]string) string { return "busybox:1.36" }},
			{"by normalised tag", func([4]string) string { return "docker.io/library/busybox:1.36" }},
			{"by ID", func(ids [4]string) string { return ids[2] }},
			{"by ID prefix", func(ids [4]string) string { return ids[2][7:19] }},
			{"by digest", func([4]string) string { return "busybox@" + hub136Index }},
		} {
			t.Run(f.name+"/"+how.name, func(t *testing.T) {
				eng := newRecordedEngine(t, f.list, f.inspect, f.containerdStore)
				ds := newImageEnv(t, eng)
				ctx := context.Background()
				spec := how.spec(f.ids)
				for range 2 { // idempotent
					if _, err := ds.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: spec}}); err != nil {
						t.Fatalf("RemoveImage %s: %v", spec, err)
					}
				}
				list, err := ds.ListImages(ctx, &runtimeapi.ListImagesRequest{})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, img := range list.Images {
					ids = append(ids, img.Id)
				}
				if want := []string{f.ids[0], f.ids[1], f.ids[3]}; !slices.Equal(ids, want) {
					t.Errorf("after RemoveImage %s, images %v, want %v", spec, ids, want)
				}
				st, err := ds.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: f.ids[2]}})
				if err != nil || st.Image != nil {
					t.Errorf("ImageStatus of the removed image = %v, %v; want no image", st.GetImage(), err)
				}
			})
		}
	}
}

// ListImages reports an image once even if the engine lists it twice,
// with the names of both entries.
func TestListImagesMergesDuplicateIDs(t *testing.T) {
	f := engineFixtures[1]
	eng := newRecordedEngine(t, f.list, f.inspect, f.containerdStore)
	dup := eng.list[2]
	dup.RepoTags = []string{"busybox:stable"}
	dup.RepoDigests = []string{"busybox@" + hub136Index}
	eng.list = append(eng.list, dup)
	ds := newImageEnv(t, eng)
	list, err := ds.ListImages(context.Background(), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got *runtimeapi.Image
	n := 0
	for _, img := range list.Images {
		if img.Id == hub136Index {
			got = img
			n++
		}
	}
	if n != 1 || !slices.Equal(got.RepoTags, []string{"docker.io/library/busybox:1.36", "docker.io/library/busybox:stable"}) ||
		!slices.Equal(got.RepoDigests, []string{"docker.io/library/busybox@" + hub136Index}) || got.Size != 6418470 {
		t.Errorf("image %s listed %d times, last as %v", hub136Index, n, got)
	}
}
