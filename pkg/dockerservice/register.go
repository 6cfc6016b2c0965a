package dockerservice

import (
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Register serves both CRI services on s: the RuntimeService from ds, the
// ImageService from its images service. RPCs not implemented yet answer
// codes.Unimplemented naming the method (the embedded
// Unimplemented*Server types do that).
func (ds *DockerService) Register(s *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(s, ds)
	runtimeapi.RegisterImageServiceServer(s, ds.images)
}
