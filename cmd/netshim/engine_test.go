package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/system"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/daemonjson"
	"github.com/netshim/netshim/pkg/dockerservice"
)

// engineWorld is a fake engine that loads the runtimes of a daemon.json
// when reloaded, as dockerd does on SIGHUP (unless it ignores reloads).
type engineWorld struct {
	file    string
	docker  *fakedocker.Engine
	reloads int
	deaf    bool // the engine does not reload
	out     bytes.Buffer
}

func newEngineWorld(t *testing.T, content string) *engineWorld {
	t.Helper()
	w := &engineWorld{file: filepath.Join(t.TempDir(), "daemon.json"), docker: fakedocker.New()}
	if content != "" {
		if err := os.WriteFile(w.file, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	w.docker.Do(func(s *fakedocker.State) {
		s.Info.Runtimes = map[string]system.RuntimeWithStatus{"runc": {Runtime: system.Runtime{Path: "runc"}}}
	})
	w.load(t)
	return w
}

// load gives the engine the file's runtimes.
func (w *engineWorld) load(t *testing.T) {
	data, err := os.ReadFile(w.file)
	if os.IsNotExist(err) {
		data = nil
	} else if err != nil {
		t.Fatal(err)
	}
	rt, ok, err := daemonjson.Registered(data, dockerservice.OCIWrapperRuntime)
	if err != nil {
		t.Fatal(err)
	}
	w.docker.Do(func(s *fakedocker.State) {
		delete(s.Info.Runtimes, dockerservice.OCIWrapperRuntime)
		if ok {
			s.Info.Runtimes[dockerservice.OCIWrapperRuntime] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: rt.Path, Args: rt.RuntimeArgs}}
		}
	})
}

func (w *engineWorld) registrar(t *testing.T) *registrar {
	return &registrar{
		file:   w.file,
		rt:     daemonjson.Runtime{Path: "/usr/bin/netshim-oci", RuntimeArgs: []string{"--netshim-netns-dir=/run/netshim/netns"}},
		docker: w.docker,
		reload: func() error {
			w.reloads++
			if !w.deaf {
				w.load(t)
			}
			return nil
		},
		timeout: 300 * time.Millisecond,
		poll:    10 * time.Millisecond,
		out:     &w.out,
	}
}

func (w *engineWorld) content(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(w.file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// TestEngineRegister: the wrapper is merged into daemon.json (every other
// key kept, the file's mode too), the engine reloaded once and seen to run
// it; a second run changes nothing and reloads nothing; a file or an
// engine that refuses is an error saying so, the file unchanged.
func TestEngineRegister(t *testing.T) {
	ctx := context.Background()
	t.Run("absent file, then again", func(t *testing.T) {
		w := newEngineWorld(t, "")
		if err := w.registrar(t).register(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := daemonjson.Registered([]byte(w.content(t)), dockerservice.OCIWrapperRuntime); !ok || w.reloads != 1 {
			t.Fatalf("file %q, reloads %d; want the wrapper and one reload", w.content(t), w.reloads)
		}
		before := w.content(t)
		if err := w.registrar(t).register(ctx); err != nil {
			t.Fatal(err)
		}
		if w.reloads != 1 || w.content(t) != before || !strings.Contains(w.out.String(), "already") {
			t.Errorf("second register: reloads %d, file changed %v, output %q", w.reloads, w.content(t) != before, w.out.String())
		}
	})
	t.Run("other keys and mode kept", func(t *testing.T) {
		w := newEngineWorld(t, `{"log-driver": "journald", "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}}`)
		if err := w.registrar(t).register(ctx); err != nil {
			t.Fatal(err)
		}
		c := w.content(t)
		if !strings.Contains(c, `"log-driver": "journald"`) || !strings.Contains(c, `"runsc"`) || !strings.Contains(c, `"netshim-oci"`) {
			t.Errorf("file after: %s", c)
		}
		if st, err := os.Stat(w.file); err != nil || st.Mode().Perm() != 0o640 {
			t.Errorf("mode %v, %v; want 0640 kept", st.Mode().Perm(), err)
		}
	})
	t.Run("default-runtime is the wrapper", func(t *testing.T) {
		in := `{"default-runtime": "netshim-oci"}`
		w := newEngineWorld(t, in)
		if err := w.registrar(t).register(ctx); err == nil || !strings.Contains(err.Error(), "every container") {
			t.Errorf("err = %v", err)
		}
		if w.content(t) != in || w.reloads != 0 {
			t.Errorf("file %q reloads %d; want it unchanged, no reload", w.content(t), w.reloads)
		}
	})
	t.Run("a runtime of dockerd's command line, which a reload drops", func(t *testing.T) {
		for _, tc := range []struct {
			name, in string
			refused  bool
		}{
			{"file without runtimes", `{"debug": true}`, true},
			{"absent file", "", true},
			{"the file names it", `{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}`, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				w := newEngineWorld(t, tc.in)
				w.docker.Do(func(s *fakedocker.State) {
					s.Info.Runtimes["nvidia"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/nvidia-container-runtime"}}
					s.Info.Runtimes["io.containerd.runc.v2"] = system.RuntimeWithStatus{Runtime: system.Runtime{Path: "runc"}}
				})
				err := w.registrar(t).register(ctx)
				if !tc.refused {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if err == nil || !strings.Contains(err.Error(), "runtime(s) nvidia,") || !strings.Contains(err.Error(), "nothing was changed") {
					t.Errorf("err = %v, want a refusal naming nvidia", err)
				}
				if w.content(t) != tc.in || w.reloads != 0 {
					t.Errorf("file %q reloads %d; want it unchanged, no reload", w.content(t), w.reloads)
				}
			})
		}
	})
	t.Run("the engine does not load it", func(t *testing.T) {
		w := newEngineWorld(t, `{}`)
		w.deaf = true
		if err := w.registrar(t).register(ctx); err == nil || !strings.Contains(err.Error(), "did not load") {
			t.Errorf("err = %v, want the engine's refusal reported", err)
		}
	})
}

// TestEngineUnregister: refused while a container runs with the wrapper
// (the file and engine unchanged); otherwise the entry goes, the engine
// reloads and no longer lists it; a file without it is no error.
func TestEngineUnregister(t *testing.T) {
	ctx := context.Background()
	registered := `{"debug": true, "runtimes": {"netshim-oci": {"path": "/usr/bin/netshim-oci"}}}`
	t.Run("a container uses it", func(t *testing.T) {
		w := newEngineWorld(t, registered)
		w.docker.Do(func(s *fakedocker.State) { s.AnyImage = true })
		created, err := w.docker.ContainerCreate(ctx, &container.Config{Image: "pause"}, &container.HostConfig{Runtime: dockerservice.OCIWrapperRuntime}, nil, nil, "k8s_POD_x")
		if err != nil {
			t.Fatal(err)
		}
		if err := w.registrar(t).unregister(ctx); err == nil || !strings.Contains(err.Error(), "1 containers run with runtime netshim-oci ("+created.ID[:12]+")") {
			t.Errorf("err = %v", err)
		}
		if w.content(t) != registered || w.reloads != 0 {
			t.Errorf("file changed or reloaded (%d)", w.reloads)
		}
	})
	t.Run("none uses it", func(t *testing.T) {
		w := newEngineWorld(t, registered)
		if err := w.registrar(t).unregister(ctx); err != nil {
			t.Fatal(err)
		}
		if c := w.content(t); strings.Contains(c, "netshim-oci") || !strings.Contains(c, `"debug": true`) || w.reloads != 1 {
			t.Errorf("file %s reloads %d", c, w.reloads)
		}
		if err := w.registrar(t).unregister(ctx); err != nil || w.reloads != 1 {
			t.Errorf("second unregister: %v, reloads %d", err, w.reloads)
		}
	})
}
