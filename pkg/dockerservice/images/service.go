// Package images is the CRI ImageService on Docker: ListImages,
// ImageStatus, PullImage, RemoveImage, ImageFsInfo and StreamImages, and
// what the service keeps between calls (the images known to be present,
// what ImageInspect said of each image, the image filesystem's last
// measurement, the names of adopted containers' images). It is registered
// on the gRPC server on its own; the runtime side (pkg/dockerservice)
// holds it to make the pause image present (EnsurePresent, ForgetPresent)
// and to name adopted containers' images (SetAdopted, Adopted).
package images

import (
	"sync/atomic"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// Options are the settings of a Service.
type Options struct {
	// PodInfraImage is the image of the pause container, reported
	// pinned (see criImage).
	PodInfraImage string
	// PullProgressDeadline cancels a pull that reports no progress for
	// this long (--image-pull-progress-deadline; 0: the default,
	// DefaultPullProgressDeadline).
	PullProgressDeadline time.Duration
	// WritableLayerBytes is the sum of the containers' writable layers
	// as last measured in the background, which ImageFsInfo reports as
	// the container filesystem's usage on the containerd image store
	// (measureContainerdStore). nil counts nothing.
	WritableLayerBytes func() uint64
}

// Service implements the CRI ImageService. Each part of its state has its
// own lock: they change apart.
type Service struct {
	runtimeapi.UnimplementedImageServiceServer

	engine *engine.Engine
	opts   Options

	// users caches what ListImages needs of images beyond Docker's
	// list, by ID.
	users userCache
	// fs caches the image filesystem's usage (fsinfo.go).
	fs fsUsageCache
	// present is the images known to be present (ensure.go).
	present presentImages
	// adopted names the images of containers taken over from
	// cri-dockerd, by image ID: set once after the first sync, read by
	// ContainerStatus (pkg/dockerservice's adopt.go).
	adopted atomic.Pointer[map[string]AdoptedImage]
}

// New is the image service of the engine eng.
func New(eng *engine.Engine, opts Options) *Service {
	return &Service{engine: eng, opts: opts}
}

// writableLayerBytes is Options.WritableLayerBytes, 0 without it.
func (s *Service) writableLayerBytes() uint64 {
	if s.opts.WritableLayerBytes == nil {
		return 0
	}
	return s.opts.WritableLayerBytes()
}

// StreamImages is ListImages as a stream: it answers from its List twin,
// so the two can never disagree (see crirpc.SendChunked).
func (s *Service) StreamImages(r *runtimeapi.StreamImagesRequest, stream runtimeapi.ImageService_StreamImagesServer) error {
	ctx := stream.Context()
	resp, err := s.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: r.GetFilter()})
	if err != nil {
		return err
	}
	return crirpc.SendChunked(ctx, resp.GetImages(), func(items []*runtimeapi.Image) error {
		return stream.Send(&runtimeapi.StreamImagesResponse{Images: items})
	})
}

// AdoptedImage is how cri-dockerd named an image in ContainerStatus: its
// first tag (Name), and "docker-pullable://" with its first repo digest,
// else "docker://" with its ID (Ref). Its containers were created with the
// image's ID, which is all Docker keeps; without this, kubelet would show
// the ID as the pods' image after the take-over.
type AdoptedImage struct {
	Name, Ref string
}

// SetAdopted records the names of the adopted containers' images, by
// image ID (looked up once, after the first sync).
func (s *Service) SetAdopted(names map[string]AdoptedImage) { s.adopted.Store(&names) }

// Adopted is the name of an adopted container's image, by image ID; the
// zero AdoptedImage when there is none (not looked up, or unknown).
func (s *Service) Adopted(imageID string) AdoptedImage {
	if names := s.adopted.Load(); names != nil {
		return (*names)[imageID]
	}
	return AdoptedImage{}
}
