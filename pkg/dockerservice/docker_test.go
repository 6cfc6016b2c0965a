package dockerservice

import (
	"context"
	"errors"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

// useEngineAPI makes the fake engine speak API v, with a client that has
// not negotiated yet, as when netshim starts against that engine.
func (e *testEnv) useEngineAPI(v string) {
	e.docker.Do(func(s *fakedocker.State) { s.APIVersion, s.ClientVersion = v, "" })
	e.ds.engine.SetAPIVersion("")
}

// What a container is created with follows the API version negotiated
// with the engine, never the client's newest: Docker reads the request by
// the version in its path.
func TestCreateContainerNegotiatesAPIVersion(t *testing.T) {
	roMount := func(name string) *runtimeapi.ContainerConfig {
		cfg := ctrConfig(name)
		cfg.Mounts = []*runtimeapi.Mount{{HostPath: "/ro", ContainerPath: "/ro", Readonly: true}}
		return cfg
	}
	for _, c := range []struct {
		engine, want string
		bind         bool // ro as a bind string, not a non-recursive mount
	}{
		{"1.41", "1.41", true},
		{"1.43", "1.43", true},
		{"1.44", "1.44", false},
		// Docker 29: the client's newest is older than the engine's.
		{"1.52", fakedocker.ClientMaxAPI, false},
	} {
		t.Run(c.engine, func(t *testing.T) {
			e := newPodEnv(t)
			e.useEngineAPI(c.engine)
			_, hc := e.createInspect(t, roMount("ro"))
			if got := e.docker.ClientVersion(); got != c.want {
				t.Errorf("client version = %s, want %s", got, c.want)
			}
			if c.bind {
				if !slices.Equal(hc.Binds, []string{"/ro:/ro:ro"}) || len(hc.Mounts) != 0 {
					t.Errorf("binds %q mounts %+v, want the bind /ro:/ro:ro", hc.Binds, hc.Mounts)
				}
				return
			}
			if len(hc.Binds) != 0 || len(hc.Mounts) != 1 || hc.Mounts[0].BindOptions == nil || !hc.Mounts[0].BindOptions.ReadOnlyNonRecursive {
				t.Errorf("binds %q mounts %+v, want one non-recursive read-only mount", hc.Binds, hc.Mounts)
			}
		})
	}

	t.Run("unreachable engine", func(t *testing.T) {
		e := newPodEnv(t)
		e.useEngineAPI("1.44")
		e.docker.Do(func(s *fakedocker.State) { s.PingErr = errors.New("connection refused") })
		e.docker.ResetCalls()
		if _, err := e.createErr(roMount("ro")); err == nil {
			t.Fatal("CreateContainer succeeded without knowing the engine's API version")
		}
		if n := e.docker.Count("ContainerCreate"); n != 0 {
			t.Errorf("%d ContainerCreate calls, want none", n)
		}
	})

	t.Run("engine replaced by an older one", func(t *testing.T) {
		e := newPodEnv(t)
		e.useEngineAPI("1.52")
		if v, err := e.ds.engine.APIVersion(context.Background()); err != nil || v != fakedocker.ClientMaxAPI {
			t.Fatalf("version = %q, %v; want %s", v, err, fakedocker.ClientMaxAPI)
		}
		e.docker.Do(func(s *fakedocker.State) { s.APIVersion = "1.41" })
		// What the events stream does when it has reconnected.
		e.ds.onIndexSync(context.Background())
		_, hc := e.createInspect(t, roMount("ro"))
		if !slices.Equal(hc.Binds, []string{"/ro:/ro:ro"}) {
			t.Errorf("binds %q mounts %+v, want the bind /ro:/ro:ro for API 1.41", hc.Binds, hc.Mounts)
		}
	})
}
