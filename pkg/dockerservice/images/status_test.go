package images

import (
	"context"
	"encoding/json"
	"io"
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

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// Recorded answers of two engines for the same three names (the raw
// JSON of GET /images/json and GET /images/{name}/json, recorded by the
// d29engine work in _prompts/docker29-images.json; the 20.10 list is
// trimmed to these images): Docker 20.10.24 (API 1.41, overlay2) and
// Docker 29.0.0 (moby v2.0.0-beta.24, containerd image store). pause and
// netshim.local/busybox were imported locally (hack/images.sh); the
// busybox was pushed from Docker 29 to a registry on localhost:5000 and
// pulled back by both engines.
//
// What differs, in the engines' own words:
//   - ID: the config digest on 20.10, the manifest digest on 29; on 29 the
//     imported busybox and the one pulled from the registry are one image
//     with two names, on 20.10 two images;
//   - RepoDigests: none for an imported image on 20.10, name@<manifest
//     digest> on 29 -- and on 29 the list names the digest of one name
//     only, where inspect names one per name;
//   - Size: the unpacked layers on 20.10; compressed content plus unpacked
//     snapshot on 29 (1069680 + 2011136 for the busybox);
//   - RepoTags: familiar names on both.

const docker20ImageList = `[
{"Containers":-1,"Created":1795514801,"Id":"sha256:8072f9ca6963fa1435a875cdfd3cedebc5a0c4a8d5afc521b0ef9a9e9081f5be","Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"},"ParentId":"","RepoDigests":["localhost:5000/netshim/busybox@sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"],"RepoTags":["localhost:5000/netshim/busybox:registry"],"SharedSize":-1,"Size":1982365,"VirtualSize":1982365},
{"Containers":-1,"Created":1795509935,"Id":"sha256:fc6c3b131fd299f93d87a6d9588aad2b9a9b7b6d6ef5dbba2fd024d495333602","Labels":{"io.netshim.content-sha256":"cc7ea9a9bf55e54c39e497fe770106cfffd1a0a4b4fea2a85f724c2ef90624fb"},"ParentId":"","RepoDigests":null,"RepoTags":["registry.k8s.io/pause:3.10"],"SharedSize":-1,"Size":682696,"VirtualSize":682696},
{"Containers":-1,"Created":1795509935,"Id":"sha256:bfa38246f50d2f09014881d428aa1e2e2cece40ea17425226a77c42d06b9b99f","Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"},"ParentId":"","RepoDigests":null,"RepoTags":["netshim.local/busybox:latest"],"SharedSize":-1,"Size":1982365,"VirtualSize":1982365}
]`

const docker20ImageInspect = `[
{"Id":"sha256:fc6c3b131fd299f93d87a6d9588aad2b9a9b7b6d6ef5dbba2fd024d495333602","RepoTags":["registry.k8s.io/pause:3.10"],"RepoDigests":[],"Parent":"","Comment":"Imported from -","Created":"2026-11-24T08:45:35.170880494Z","Container":"","ContainerConfig":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"DockerVersion":"20.10.24+dfsg1","Author":"","Config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":["/pause"],"OnBuild":null,"Labels":{"io.netshim.content-sha256":"cc7ea9a9bf55e54c39e497fe770106cfffd1a0a4b4fea2a85f724c2ef90624fb"}},"Architecture":"amd64","Os":"linux","Size":682696,"VirtualSize":682696,"GraphDriver":{"Data":{"MergedDir":"/var/lib/docker/overlay2/19f603284ba7d46fede3cf80c42c30e758f39cf3ec07e098eb8a4da01b185588/merged","UpperDir":"/var/lib/docker/overlay2/19f603284ba7d46fede3cf80c42c30e758f39cf3ec07e098eb8a4da01b185588/diff","WorkDir":"/var/lib/docker/overlay2/19f603284ba7d46fede3cf80c42c30e758f39cf3ec07e098eb8a4da01b185588/work"},"Name":"overlay2"},"RootFS":{"Type":"layers","Layers":["sha256:f4826d99fd3961227fe946261f43abc6b41f4e2eb644b73a56b00c17c1189e1f"]},"Metadata":{"LastTagTime":"2026-11-24T08:45:35.17206388Z"}},
{"Id":"sha256:bfa38246f50d2f09014881d428aa1e2e2cece40ea17425226a77c42d06b9b99f","RepoTags":["netshim.local/busybox:latest"],"RepoDigests":[],"Parent":"","Comment":"Imported from -","Created":"2026-11-24T08:45:35.499432482Z","Container":"","ContainerConfig":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"DockerVersion":"20.10.24+dfsg1","Author":"","Config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":["sh"],"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"}},"Architecture":"amd64","Os":"linux","Size":1982365,"VirtualSize":1982365,"GraphDriver":{"Data":{"MergedDir":"/var/lib/docker/overlay2/255f22a6c5401128fa37156a6fd4b23603e0a047b22d0aa5d3cfd8a24d1f797c/merged","UpperDir":"/var/lib/docker/overlay2/255f22a6c5401128fa37156a6fd4b23603e0a047b22d0aa5d3cfd8a24d1f797c/diff","WorkDir":"/var/lib/docker/overlay2/255f22a6c5401128fa37156a6fd4b23603e0a047b22d0aa5d3cfd8a24d1f797c/work"},"Name":"overlay2"},"RootFS":{"Type":"layers","Layers":["sha256:d219117dd9520e035076cd738869a5e78d6d0af794720b3f5d5c7ad2c6dbe98d"]},"Metadata":{"LastTagTime":"2026-11-24T08:45:35.500215417Z"}},
{"Id":"sha256:8072f9ca6963fa1435a875cdfd3cedebc5a0c4a8d5afc521b0ef9a9e9081f5be","RepoTags":["localhost:5000/netshim/busybox:registry"],"RepoDigests":["localhost:5000/netshim/busybox@sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"],"Parent":"","Comment":"Imported from -","Created":"2026-11-24T10:06:41.551067951Z","Container":"","ContainerConfig":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"DockerVersion":"","Author":"","Config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":["sh"],"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"}},"Architecture":"amd64","Os":"linux","Size":1982365,"VirtualSize":1982365,"GraphDriver":{"Data":{"MergedDir":"/var/lib/docker/overlay2/32caa61a4c5ec6dbec745d2f1bf0c176ceb53614026aee9eedfa553b5b32064c/merged","UpperDir":"/var/lib/docker/overlay2/32caa61a4c5ec6dbec745d2f1bf0c176ceb53614026aee9eedfa553b5b32064c/diff","WorkDir":"/var/lib/docker/overlay2/32caa61a4c5ec6dbec745d2f1bf0c176ceb53614026aee9eedfa553b5b32064c/work"},"Name":"overlay2"},"RootFS":{"Type":"layers","Layers":["sha256:1aeddb93eb099c789ce59816f420270df9a2d8adbd5147af4349c288ec3cb328"]},"Metadata":{"LastTagTime":"0001-01-01T00:00:00Z"}}
]`

const docker29ImageList = `[
{"Containers":0,"Created":1795514801,"Id":"sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0","Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"},"ParentId":"","Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0","size":405},"RepoDigests":["netshim.local/busybox@sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"],"RepoTags":["localhost:5000/netshim/busybox:registry","netshim.local/busybox:latest"],"SharedSize":-1,"Size":3080816},
{"Containers":0,"Created":1795514801,"Id":"sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487","Labels":{"io.netshim.content-sha256":"cc7ea9a9bf55e54c39e497fe770106cfffd1a0a4b4fea2a85f724c2ef90624fb"},"ParentId":"","Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487","size":404},"RepoDigests":["registry.k8s.io/pause@sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487"],"RepoTags":["registry.k8s.io/pause:3.10"],"SharedSize":-1,"Size":1003165}
]`

const docker29ImageInspect = `[
{"Id":"sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487","RepoTags":["registry.k8s.io/pause:3.10"],"RepoDigests":["registry.k8s.io/pause@sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487"],"Comment":"Imported from -","Created":"2026-11-24T10:06:41.15980325Z","Config":{"Entrypoint":["/pause"],"Labels":{"io.netshim.content-sha256":"cc7ea9a9bf55e54c39e497fe770106cfffd1a0a4b4fea2a85f724c2ef90624fb"}},"Architecture":"amd64","Os":"linux","Size":1003165,"RootFS":{"Type":"layers","Layers":["sha256:808a3004020bc67fbbd2bd6bde41c6f7192e9594212ef64c0d81f42714c6647a"]},"Metadata":{"LastTagTime":"2026-11-24T10:06:41.165396044Z"},"Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487","size":404}},
{"Id":"sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0","RepoTags":["localhost:5000/netshim/busybox:registry","netshim.local/busybox:latest"],"RepoDigests":["localhost:5000/netshim/busybox@sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0","netshim.local/busybox@sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"],"Comment":"Imported from -","Created":"2026-11-24T10:06:41.551067951Z","Config":{"Cmd":["sh"],"Labels":{"io.netshim.content-sha256":"0233a6e914ef5678b51542836dae136bfb601cdc19cff6fcdeb9851c12458aa9"}},"Architecture":"amd64","Os":"linux","Size":3080816,"RootFS":{"Type":"layers","Layers":["sha256:1aeddb93eb099c789ce59816f420270df9a2d8adbd5147af4349c288ec3cb328"]},"Metadata":{"LastTagTime":"2026-11-24T10:06:59.864863613Z"},"Descriptor":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0","size":405},"Identity":{"Pull":[{"Repository":"localhost/netshim/busybox"}]}}
]`

// docker29MultiPlatform is not recorded: it is what moby's containerd
// image store (daemon/containerd/image_list.go, image_inspect.go) answers
// for an index with two platforms present, both pulled: the list's Size
// adds up the content and snapshots of every platform, inspect's is the
// node's platform's.
const (
	multiIndex                = "sha256:7c3c3cea5d4d6133d6a694d23382f6a7b32652f23855abdba3eb039ca5995447"
	docker29MultiPlatformList = `[{"Containers":0,"Created":1683590400,"Id":"` + multiIndex + `","Labels":null,"ParentId":"",
  "Descriptor":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + multiIndex + `","size":9541},
  "RepoDigests":["busybox@` + multiIndex + `"],"RepoTags":["busybox:1.36"],"SharedSize":-1,"Size":12607488}]`
	docker29MultiPlatformInspect = `[{"Id":"` + multiIndex + `","RepoTags":["busybox:1.36"],"RepoDigests":["busybox@` + multiIndex + `"],"Size":6418470,
  "Descriptor":{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"` + multiIndex + `","size":9541},
  "Config":{"Cmd":["sh"]},"Architecture":"amd64","Os":"linux"}]`
)

// recordedEngine answers the image calls from recorded JSON; everything
// else goes to the embedded fake. It removes images as the engine's
// store does: a name untags, the image goes with its last name; on the
// containerd store a digest reference untags every name of that
// repository pointing at the image.
type recordedEngine struct {
	*fakedocker.Engine
	containerdStore bool

	mu      sync.Mutex
	list    []image.Summary
	inspect map[string]image.InspectResponse // by ID
}

func newRecordedEngine(t *testing.T, listJSON, inspectJSON string, containerdStore bool) *recordedEngine {
	t.Helper()
	r := &recordedEngine{Engine: fakedocker.New(), containerdStore: containerdStore, inspect: map[string]image.InspectResponse{}}
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
	if fakedocker.LooksLikeID(ref) {
		want := "sha256:" + strings.TrimPrefix(ref, "sha256:")
		for id := range r.inspect {
			if strings.HasPrefix(id, want) {
				return id, true
			}
		}
	}
	for id, i := range r.inspect {
		for _, n := range slices.Concat(i.RepoTags, i.RepoDigests) {
			if fakedocker.SameRef(n, ref) {
				return id, true
			}
		}
	}
	return "", false
}

func (r *recordedEngine) ImageInspect(_ context.Context, ref string, _ ...client.ImageInspectOption) (image.InspectResponse, error) {
	r.Record("ImageInspect " + ref)
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.resolveLocked(ref)
	if !ok {
		return image.InspectResponse{}, errdefs.ErrNotFound.WithMessage("No such image: " + ref)
	}
	return r.inspect[id], nil
}

func (r *recordedEngine) ImageList(context.Context, image.ListOptions) ([]image.Summary, error) {
	r.Record("ImageList")
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
	r.Record("ImagePull " + ref)
	return io.NopCloser(strings.NewReader(`{"status":"Status: Image is up to date for ` + ref + `"}` + "\n")), nil
}

func (r *recordedEngine) ImageRemove(_ context.Context, ref string, _ image.RemoveOptions) ([]image.DeleteResponse, error) {
	r.Record("ImageRemove " + ref)
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
	case strings.HasPrefix(id, "sha256:"+strings.TrimPrefix(ref, "sha256:")) && fakedocker.LooksLikeID(ref):
		if len(i.RepoTags) > 1 {
			return nil, errdefs.ErrConflict.WithMessage("conflict: unable to delete " + ref + " (must be forced) - image is referenced in multiple repositories")
		}
		i.RepoTags = nil
	case strings.Contains(ref, "@"):
		named, err := reference.ParseNormalizedNamed(ref)
		if err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
		i.RepoDigests = drop(i.RepoDigests, func(d string) bool { return fakedocker.SameRef(d, ref) })
		if r.containerdStore {
			// The digest is derived from the names: it goes with them.
			i.RepoTags = drop(i.RepoTags, func(tag string) bool {
				n, err := reference.ParseNormalizedNamed(tag)
				return err == nil && n.Name() == named.Name()
			})
		}
	default:
		i.RepoTags = drop(i.RepoTags, func(tag string) bool { return fakedocker.SameRef(tag, ref) })
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
func newImageEnv(t *testing.T, eng *recordedEngine) *Service {
	t.Helper()
	return New(engine.New(eng), Options{PodInfraImage: "registry.k8s.io/pause:3.10"})
}

const (
	d20PauseID    = "sha256:fc6c3b131fd299f93d87a6d9588aad2b9a9b7b6d6ef5dbba2fd024d495333602"
	d20BusyboxID  = "sha256:bfa38246f50d2f09014881d428aa1e2e2cece40ea17425226a77c42d06b9b99f"
	d20RegistryID = "sha256:8072f9ca6963fa1435a875cdfd3cedebc5a0c4a8d5afc521b0ef9a9e9081f5be"
	d29PauseID    = "sha256:a27721e6a2c94284098943867bc01145a0189f1594a643b5886bd94bd24f5487"
	// The busybox's manifest: its ID on 29, its registry digest on both.
	busyboxManifest = "sha256:40f1004005db787a32eb15452ca0e6ac44375a5dc534b931d285634d4c0623d0"

	recordedRegistryImage = "localhost:5000/netshim/busybox:registry"
	recordedRegistryRepo  = "localhost:5000/netshim/busybox"
)

type engineFixture struct {
	name            string
	list, inspect   string
	containerdStore bool
	// want is what netshim answers, by image ID: the engine's IDs and
	// sizes (ImageInspect's), names normalised.
	want []*runtimeapi.Image
}

func criImageWant(id string, tags, digests []string, size uint64, pinned bool) *runtimeapi.Image {
	return &runtimeapi.Image{Id: id, RepoTags: tags, RepoDigests: digests, Size: size, Spec: &runtimeapi.ImageSpec{Image: id}, Pinned: pinned}
}

var engineFixtures = []engineFixture{
	{
		name: "docker 20.10", list: docker20ImageList, inspect: docker20ImageInspect,
		want: []*runtimeapi.Image{
			criImageWant(d20RegistryID, []string{recordedRegistryImage}, []string{recordedRegistryRepo + "@" + busyboxManifest}, 1982365, false),
			criImageWant(d20PauseID, []string{"registry.k8s.io/pause:3.10"}, nil, 682696, true),
			criImageWant(d20BusyboxID, []string{"netshim.local/busybox:latest"}, nil, 1982365, false),
		},
	},
	{
		name: "docker 29 containerd store", list: docker29ImageList, inspect: docker29ImageInspect, containerdStore: true,
		want: []*runtimeapi.Image{
			criImageWant(busyboxManifest, []string{recordedRegistryImage, "netshim.local/busybox:latest"},
				[]string{recordedRegistryRepo + "@" + busyboxManifest, "netshim.local/busybox@" + busyboxManifest}, 3080816, false),
			criImageWant(d29PauseID, []string{"registry.k8s.io/pause:3.10"}, []string{"registry.k8s.io/pause@" + d29PauseID}, 1003165, true),
		},
	},
}

// imageByName is the wanted image that has a name, or a name in a
// repository given alone.
func (f engineFixture) imageByName(t *testing.T, name string) *runtimeapi.Image {
	t.Helper()
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		t.Fatal(err)
	}
	repoOnly := reference.IsNameOnly(named)
	for _, w := range f.want {
		if slices.ContainsFunc(slices.Concat(w.RepoTags, w.RepoDigests), func(r string) bool {
			n, err := reference.ParseNormalizedNamed(r)
			return fakedocker.SameRef(r, name) || (repoOnly && err == nil && n.Name() == named.Name())
		}) {
			return w
		}
	}
	t.Fatalf("%s: no image named %s", f.name, name)
	return nil
}

func listAll(t *testing.T, svc *Service, filter string) []*runtimeapi.Image {
	t.Helper()
	req := &runtimeapi.ListImagesRequest{}
	if filter != "" {
		req.Filter = &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: filter}}
	}
	resp, err := svc.ListImages(context.Background(), req)
	if err != nil {
		t.Fatalf("ListImages %q: %v", filter, err)
	}
	return resp.Images
}

func imageIDs(imgs []*runtimeapi.Image) []string {
	var out []string
	for _, i := range imgs {
		out = append(out, i.Id)
	}
	slices.Sort(out)
	return out
}

func TestImageAnswersOnBothEngines(t *testing.T) {
	for _, f := range engineFixtures {
		t.Run(f.name, func(t *testing.T) {
			svc := newImageEnv(t, newRecordedEngine(t, f.list, f.inspect, f.containerdStore))
			ctx := context.Background()

			got := listAll(t, svc, "")
			if len(got) != len(f.want) {
				t.Fatalf("ListImages gave %d images, want %d: %v", len(got), len(f.want), got)
			}
			for _, w := range f.want {
				i := slices.IndexFunc(got, func(g *runtimeapi.Image) bool { return g.Id == w.Id })
				if i < 0 || !proto.Equal(got[i], w) {
					t.Errorf("ListImages has for %s\n  %v\nwant\n  %v", w.Id, got[max(i, 0)], w)
				}
			}
			// ImageStatus answers as the list does, by every name.
			for _, w := range f.want {
				for _, spec := range slices.Concat([]string{w.Id, w.Id[7:19]}, w.RepoTags, w.RepoDigests) {
					st, err := svc.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: spec}})
					if err != nil {
						t.Fatalf("ImageStatus %s: %v", spec, err)
					}
					if !proto.Equal(st.Image, w) {
						t.Errorf("ImageStatus %s =\n  %v\nwant\n  %v", spec, st.Image, w)
					}
				}
			}
			// PullImage answers the ID the list and status report.
			pulled, err := svc.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: recordedRegistryImage}})
			if want := f.imageByName(t, recordedRegistryImage).Id; err != nil || pulled.ImageRef != want {
				t.Errorf("PullImage %s = %v, %v; want %s", recordedRegistryImage, pulled, err, want)
			}
			// Filters by repository, tag, digest and ID find the image
			// that has the name; the registry digest on both engines.
			for _, spec := range []string{"netshim.local/busybox", "netshim.local/busybox:latest", recordedRegistryRepo,
				recordedRegistryImage, recordedRegistryRepo + "@" + busyboxManifest, "registry.k8s.io/pause"} {
				want := f.imageByName(t, spec)
				if got := imageIDs(listAll(t, svc, spec)); !slices.Equal(got, []string{want.Id}) {
					t.Errorf("ListImages filter %s = %v, want %s", spec, got, want.Id)
				}
			}
			if got := listAll(t, svc, "docker.io/library/busybox"); len(got) != 0 {
				t.Errorf("ListImages filter docker.io/library/busybox = %v, want none", got)
			}
		})
	}
}

// Each name is reported the same way on both engines, with the registry
// digest of the pulled image: kubelet and crictl see the same names
// whichever engine a node runs.
func TestImageNamesAgreeAcrossEngines(t *testing.T) {
	for _, name := range []string{"registry.k8s.io/pause:3.10", "netshim.local/busybox:latest", recordedRegistryImage} {
		var tagged, digested []bool
		for _, f := range engineFixtures {
			w := f.imageByName(t, name)
			tagged = append(tagged, slices.Contains(w.RepoTags, name))
			digested = append(digested, slices.Contains(w.RepoDigests, recordedRegistryRepo+"@"+busyboxManifest))
		}
		if slices.Contains(tagged, false) {
			t.Errorf("%s: tagged so on the engines: %v", name, tagged)
		}
		if name == recordedRegistryImage && slices.Contains(digested, false) {
			t.Errorf("%s: registry digest on the engines: %v", name, digested)
		}
	}
}

func TestRemoveImageOnBothEngines(t *testing.T) {
	for _, f := range engineFixtures {
		for _, spec := range []string{
			"netshim.local/busybox:latest",
			"netshim.local/busybox", // :latest
			recordedRegistryImage,
			recordedRegistryRepo + "@" + busyboxManifest,
			"registry.k8s.io/pause:3.10",
		} {
			target := f.imageByName(t, spec)
			for _, by := range []string{spec, target.Id, target.Id[7:19]} {
				t.Run(f.name+"/"+by, func(t *testing.T) {
					svc := newImageEnv(t, newRecordedEngine(t, f.list, f.inspect, f.containerdStore))
					ctx := context.Background()
					for range 2 { // idempotent
						if _, err := svc.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: by}}); err != nil {
							t.Fatalf("RemoveImage %s: %v", by, err)
						}
					}
					var want []string
					for _, w := range f.want {
						if w.Id != target.Id {
							want = append(want, w.Id)
						}
					}
					slices.Sort(want)
					if got := imageIDs(listAll(t, svc, "")); !slices.Equal(got, want) {
						t.Errorf("after RemoveImage %s, images %v, want %v", by, got, want)
					}
					st, err := svc.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: target.Id}})
					if err != nil || st.Image != nil {
						t.Errorf("ImageStatus of the removed image = %v, %v; want no image", st.GetImage(), err)
					}
				})
			}
		}
	}
}

// On the containerd store the list's size adds up every platform present;
// the CRI size is the node's platform's, as ImageStatus gives it.
func TestListImagesSizeIsTheNodePlatforms(t *testing.T) {
	svc := newImageEnv(t, newRecordedEngine(t, docker29MultiPlatformList, docker29MultiPlatformInspect, true))
	list := listAll(t, svc, "")
	st, err := svc.ImageStatus(context.Background(), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Size != 6418470 || !proto.Equal(list[0], st.Image) {
		t.Errorf("ListImages = %v, ImageStatus = %v; want both with size 6418470", list, st.Image)
	}
}

// ListImages reports an image once even if the engine lists it twice.
func TestListImagesMergesDuplicateIDs(t *testing.T) {
	f := engineFixtures[1]
	eng := newRecordedEngine(t, f.list, f.inspect, f.containerdStore)
	eng.list = append(eng.list, eng.list[0])
	svc := newImageEnv(t, eng)
	got := listAll(t, svc, "")
	if ids := imageIDs(got); !slices.Equal(ids, []string{busyboxManifest, d29PauseID}) {
		t.Errorf("ListImages IDs = %v, want each image once", ids)
	}
}

// The inspect is cached while the list shows the same names, and done
// again when they change.
func TestListImagesInspectsOnlyWhatChanged(t *testing.T) {
	f := engineFixtures[1]
	eng := newRecordedEngine(t, f.list, f.inspect, f.containerdStore)
	svc := newImageEnv(t, eng)
	listAll(t, svc, "")
	eng.ResetCalls()
	listAll(t, svc, "")
	if n := eng.Count("ImageInspect"); n != 0 {
		t.Errorf("second ListImages inspected %d images, want 0", n)
	}
	// The registry name is removed behind netshim's back.
	eng.mu.Lock()
	i := eng.inspect[busyboxManifest]
	i.RepoTags, i.RepoDigests = i.RepoTags[1:], i.RepoDigests[1:]
	eng.inspect[busyboxManifest] = i
	eng.list[0].RepoTags = i.RepoTags
	eng.mu.Unlock()
	eng.ResetCalls()
	got := listAll(t, svc, recordedRegistryRepo)
	if n := eng.Count("ImageInspect"); n != 1 || len(got) != 0 {
		t.Errorf("after an untag: %d inspects, filter by the removed name gave %v; want 1 and none", n, got)
	}
}
