package dockerservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The CRI (v0.36+) wants one image ID across the runtime and image
// services: Container.image_id, ContainerStatus.image_id, Image.id and
// PullImageResponse.image_ref. image_ref stays the digested reference.
func TestContainerImageIDMatchesTheImageService(t *testing.T) {
	e := newPodEnv(t)
	ctx := context.Background()
	id := e.create(t, ctrConfig("img"))
	img, err := e.ds.images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: testImage}})
	if err != nil {
		t.Fatal(err)
	}
	if img.GetImage().GetId() != testImageID {
		t.Fatalf("image service id %q, want %q", img.GetImage().GetId(), testImageID)
	}
	st := e.status(t, id)
	if st.ImageId != testImageID || st.ImageRef != testImageDigest {
		t.Errorf("status image_id %q image_ref %q, want %q and %q", st.ImageId, st.ImageRef, testImageID, testImageDigest)
	}
	list, err := e.ds.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{Id: id}})
	if err != nil || len(list.Containers) != 1 {
		t.Fatalf("list: %v, %v", list, err)
	}
	if c := list.Containers[0]; c.ImageId != testImageID || c.ImageRef != testImageDigest {
		t.Errorf("listed image_id %q image_ref %q, want %q and %q", c.ImageId, c.ImageRef, testImageID, testImageDigest)
	}
}
