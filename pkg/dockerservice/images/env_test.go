package images

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
	"github.com/netshim/netshim/pkg/dockerservice/engine"
)

// testPauseImage is the pod infra image of the tests, present on the fake
// engine from the start, as on a node that ran pods before.
const testPauseImage = "registry.k8s.io/pause:3.10"

// benchPods is how many pods the benchmarks' node runs (pkg/dockerservice's
// statsBenchPods).
const benchPods = 50

// testEnv is an images service on the shared fake engine.
type testEnv struct {
	svc    *Service
	docker *fakedocker.Engine
	// engine is the service's engine: a test starts a new engine
	// session on it as the runtime side does when a new events stream
	// has synced.
	engine *engine.Engine
}

func newTestEnv(t testing.TB, mutate ...func(*Options)) *testEnv {
	t.Helper()
	docker := fakedocker.New()
	docker.Do(func(s *fakedocker.State) { s.Images[testPauseImage] = map[string]string{} })
	opts := Options{PodInfraImage: testPauseImage}
	for _, m := range mutate {
		m(&opts)
	}
	eng := engine.New(docker)
	return &testEnv{svc: New(eng, opts), docker: docker, engine: eng}
}

func codeOf(err error) codes.Code { return crirpc.Code(err) }
