package dockerservice

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestCreateContainerLogPath: CreateContainer accepts only a log file that
// stays where kubelet put it, refuses anything else with InvalidArgument
// and a message saying what is wrong, and changes nothing when it refuses.
func TestCreateContainerLogPath(t *testing.T) {
	const validCRI = "2024-01-02T03:04:05Z stdout F hello\n"
	type paths struct {
		dir, rel string   // log_directory, log_path
		watched  []string // must not change
	}
	cases := []struct {
		name string
		// setup gets a fresh base directory, a directory outside the
		// pod's logs, and netshim's root directory.
		setup   func(t *testing.T, base, outside, root string) paths
		wantErr string // a part of the InvalidArgument message; "" = accepted
		wantLog string // the log path when accepted
	}{{
		name:    "kubelet's layout",
		setup:   func(_ *testing.T, base, _, _ string) paths { return paths{dir: base + "/pods/p", rel: "c/0.log"} },
		wantLog: "/pods/p/c/0.log",
	}, {
		name: "existing CRI log",
		setup: func(t *testing.T, base, _, _ string) paths {
			mkdir(t, base+"/pods/p/c")
			write(t, base+"/pods/p/c/0.log", validCRI)
			return paths{dir: base + "/pods/p", rel: "c/0.log", watched: []string{base + "/pods/p/c/0.log"}}
		},
		wantLog: "/pods/p/c/0.log",
	}, {
		name:  "no log_path: no log",
		setup: func(_ *testing.T, base, _, _ string) paths { return paths{dir: base + "/pods/p"} },
	}, {
		name:  "no log_directory: no log",
		setup: func(*testing.T, string, string, string) paths { return paths{rel: "c/0.log"} },
	}, {
		name:    "relative log_directory",
		setup:   func(*testing.T, string, string, string) paths { return paths{dir: "pods/p", rel: "c/0.log"} },
		wantErr: "must be an absolute path",
	}, {
		name:    "log_directory with ..",
		setup:   func(_ *testing.T, base, _, _ string) paths { return paths{dir: base + "/pods/x/../p", rel: "c/0.log"} },
		wantErr: `must not contain a ".." component`,
	}, {
		name:    "unclean log_directory",
		setup:   func(_ *testing.T, base, _, _ string) paths { return paths{dir: base + "/pods//p", rel: "c/0.log"} },
		wantErr: "is not a clean path",
	}, {
		name:    "absolute log_path",
		setup:   func(_ *testing.T, base, outside, _ string) paths { return paths{dir: base, rel: outside + "/0.log"} },
		wantErr: "must be relative",
	}, {
		name: "log_path climbing out",
		setup: func(_ *testing.T, base, _, _ string) paths {
			return paths{dir: base + "/pods/p", rel: "../../../etc/cron.d/x"}
		},
		wantErr: `must not contain a ".." component`,
	}, {
		name: "log_path climbing out midway",
		setup: func(_ *testing.T, base, _, _ string) paths {
			return paths{dir: base + "/pods/p", rel: "c/../../q/0.log"}
		},
		wantErr: `must not contain a ".." component`,
	}, {
		name:    "log_path naming a directory",
		setup:   func(_ *testing.T, base, _, _ string) paths { return paths{dir: base, rel: "c/"} },
		wantErr: "must name a file",
	}, {
		name:    "unclean log_path",
		setup:   func(_ *testing.T, base, _, _ string) paths { return paths{dir: base, rel: "c//0.log"} },
		wantErr: "is not a clean path",
	}, {
		name: "symlinked directory component",
		setup: func(t *testing.T, base, outside, _ string) paths {
			mkdir(t, base+"/pods/p")
			symlink(t, outside, base+"/pods/p/c")
			return paths{dir: base + "/pods/p", rel: "c/0.log", watched: []string{outside + "/0.log"}}
		},
		wantErr: "symlink",
	}, {
		name: "symlinked final file",
		setup: func(t *testing.T, base, outside, _ string) paths {
			mkdir(t, base+"/pods/p/c")
			write(t, outside+"/passwd", "root:x:0:0::/root:/bin/sh\n")
			symlink(t, outside+"/passwd", base+"/pods/p/c/0.log")
			return paths{dir: base + "/pods/p", rel: "c/0.log", watched: []string{outside + "/passwd", base + "/pods/p/c/0.log"}}
		},
		wantErr: "symlink",
	}, {
		name: "log directory is a symlink",
		setup: func(t *testing.T, base, outside, _ string) paths {
			mkdir(t, base+"/pods")
			symlink(t, outside, base+"/pods/p")
			return paths{dir: base + "/pods/p", rel: "c/0.log", watched: []string{outside + "/c"}}
		},
		wantErr: "symlink",
	}, {
		name: "path under the root dir",
		setup: func(_ *testing.T, _, _, root string) paths {
			return paths{dir: root + "/pods", rel: "c/0.log", watched: []string{root + "/pods"}}
		},
		wantErr: "inside netshim's root directory",
	}, {
		name: "log directory above the root dir, path into it",
		setup: func(_ *testing.T, _, _, root string) paths {
			return paths{dir: filepath.Dir(root), rel: filepath.Base(root) + "/sandbox/x", watched: []string{root + "/sandbox/x"}}
		},
		wantErr: "inside netshim's root directory",
	}, {
		name: "FIFO as the log file",
		setup: func(t *testing.T, base, _, _ string) paths {
			mkdir(t, base+"/c")
			if err := syscall.Mkfifo(base+"/c/0.log", 0o640); err != nil {
				t.Fatal(err)
			}
			return paths{dir: base, rel: "c/0.log", watched: []string{base + "/c/0.log"}}
		},
		wantErr: "is a FIFO",
	}, {
		name:    "device as the log file",
		setup:   func(*testing.T, string, string, string) paths { return paths{dir: "/dev", rel: "null"} },
		wantErr: "is a device",
	}, {
		name: "file with foreign content",
		setup: func(t *testing.T, base, _, _ string) paths {
			mkdir(t, base+"/c")
			write(t, base+"/c/0.log", "[Unit]\nDescription=not a log")
			return paths{dir: base, rel: "c/0.log", watched: []string{base + "/c/0.log"}}
		},
		wantErr: "not a CRI log",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, outside, root := t.TempDir(), t.TempDir(), t.TempDir()
			e := newPodEnv(t, func(c *Config) { c.RootDir = root })
			p := tc.setup(t, base, outside, root)
			before := snapshotPaths(t, p.watched)

			cfg := ctrConfig("c")
			cfg.LogPath = p.rel
			e.sandbox.LogDirectory = p.dir
			creates := e.docker.Count("ContainerCreate")
			id, err := e.createErr(cfg)

			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("CreateContainer: %v", err)
				}
				want := ""
				if tc.wantLog != "" {
					want = base + tc.wantLog
				}
				if got := e.status(t, id).LogPath; got != want {
					t.Errorf("log path = %q, want %q", got, want)
				}
				return
			}
			if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CreateContainer = %v, want InvalidArgument saying %q", err, tc.wantErr)
			}
			if n := e.docker.Count("ContainerCreate"); n != creates {
				t.Errorf("Docker was asked to create a container")
			}
			if after := snapshotPaths(t, p.watched); after != before {
				t.Errorf("refused create changed files:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// A symlink on the way to netshim's root directory does not hide that a
// log path is inside it.
func TestCreateContainerLogPathUnderSymlinkedRootDir(t *testing.T) {
	real, links := t.TempDir(), t.TempDir()
	root := filepath.Join(links, "root")
	symlink(t, real, root)
	e := newPodEnv(t, func(c *Config) { c.RootDir = root })
	e.sandbox.LogDirectory = filepath.Join(real, "pods")
	_, err := e.createErr(ctrConfig("c"))
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "root directory") {
		t.Fatalf("CreateContainer = %v, want InvalidArgument about the root directory", err)
	}
}

// StartContainer checks again: the file system may have changed since the
// create. A symlink planted meanwhile is refused and not followed.
func TestStartContainerRefusesLogSymlinkPlantedAfterCreate(t *testing.T) {
	e := newPodEnv(t)
	id := e.create(t, ctrConfig("c"))
	path := e.status(t, id).LogPath
	outside := t.TempDir()
	mkdir(t, filepath.Dir(path))
	symlink(t, filepath.Join(outside, "target"), path)

	_, err := e.ds.StartContainer(context.Background(), &runtimeapi.StartContainerRequest{ContainerId: id})
	if codeOf(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("StartContainer = %v, want FailedPrecondition about the symlink", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "target")); !os.IsNotExist(err) {
		t.Errorf("symlink target created: %v", err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// snapshotPaths describes what is at each path: missing, a symlink and its
// target, a file and its bytes, or another kind.
func snapshotPaths(t *testing.T, paths []string) string {
	t.Helper()
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(p + ": ")
		fi, err := os.Lstat(p)
		switch {
		case os.IsNotExist(err):
			b.WriteString("missing")
		case err != nil:
			t.Fatal(err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			b.WriteString("symlink to " + target)
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("file " + string(data))
		default:
			b.WriteString(fi.Mode().String())
		}
		b.WriteString("; ")
	}
	return b.String()
}
