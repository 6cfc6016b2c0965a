// Package cridockerd reads what cri-dockerd keeps on disk of the sandboxes
// it made: its checkpoints under its root directory, for the take-over of
// a cri-dockerd node (--adopt-cri-dockerd). The labels and names of its
// containers are decoded with netshim's own (labelcodec/cridockerd.go).
package cridockerd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/checkpoint"
)

// CheckpointDir is where cri-dockerd keeps its sandbox checkpoints under
// its root directory.
const CheckpointDir = "sandbox"

// Checkpoint is cri-dockerd's checkpoint of a sandbox, as far as netshim
// reads it. Its checksum is not checked: cri-dockerd computes it over a
// Go-syntax dump of its own types, which cannot be recomputed outside
// them. The file is cross-checked with the sandbox instead.
type Checkpoint struct {
	Version   string          `json:"version"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Data      *checkpointData `json:"data,omitempty"`
}

// checkpointData is what cri-dockerd keeps of a sandbox's network.
type checkpointData struct {
	PortMappings []*portMapping `json:"port_mappings,omitempty"`
	HostNetwork  bool           `json:"host_network,omitempty"`
}

// portMapping is one host port of a sandbox, as cri-dockerd writes it.
type portMapping struct {
	Protocol      *string `json:"protocol,omitempty"`
	ContainerPort *int32  `json:"container_port,omitempty"`
	HostPort      *int32  `json:"host_port,omitempty"`
	HostIP        string  `json:"host_ip,omitempty"`
}

// Root is cri-dockerd's root directory (--cri-dockerd-root-dir).
type Root string

// Dir is the directory of the checkpoints.
func (r Root) Dir() string { return filepath.Join(string(r), CheckpointDir) }

// Path is the file of sandbox id's checkpoint; "" for an id that is not a
// plain name.
func (r Root) Path(id string) string {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return ""
	}
	return filepath.Join(r.Dir(), id)
}

// Read reads the checkpoint of a sandbox, checked against the sandbox's
// metadata; a missing file is (nil, nil).
func (r Root) Read(id string, md *runtimeapi.PodSandboxMetadata) (*Checkpoint, error) {
	path := r.Path(id)
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading cri-dockerd's checkpoint: %w", err)
	}
	var cp Checkpoint
	if err := json.Unmarshal(b, &cp); err != nil {
		return nil, fmt.Errorf("cri-dockerd's checkpoint %s: %w", path, err)
	}
	if cp.Version != "v1" {
		return nil, fmt.Errorf("cri-dockerd's checkpoint %s has version %q; netshim reads v1", path, cp.Version)
	}
	if cp.Name != md.GetName() || cp.Namespace != md.GetNamespace() {
		return nil, fmt.Errorf("cri-dockerd's checkpoint %s is for pod %s/%s, but the sandbox is pod %s/%s", path, cp.Namespace, cp.Name, md.GetNamespace(), md.GetName())
	}
	return &cp, nil
}

// PortMappings converts cri-dockerd's host ports. A mapping netshim could
// not have been given by kubelet (no port, port out of range, unknown
// protocol) makes the whole checkpoint suspect.
func (cp *Checkpoint) PortMappings() ([]checkpoint.PortMapping, error) {
	if cp.Data == nil {
		return nil, nil
	}
	var out []checkpoint.PortMapping
	for _, pm := range cp.Data.PortMappings {
		if pm == nil || pm.ContainerPort == nil || pm.HostPort == nil {
			continue // cri-dockerd writes no mapping without both ports
		}
		proto := "tcp"
		if pm.Protocol != nil {
			proto = strings.ToLower(*pm.Protocol)
		}
		if proto != "tcp" && proto != "udp" && proto != "sctp" {
			return nil, fmt.Errorf("host port %d has protocol %q", *pm.HostPort, proto)
		}
		if *pm.ContainerPort <= 0 || *pm.ContainerPort > 65535 || *pm.HostPort < 0 || *pm.HostPort > 65535 {
			return nil, fmt.Errorf("port mapping %d->%d is out of range", *pm.HostPort, *pm.ContainerPort)
		}
		if *pm.HostPort == 0 {
			continue // not a host port: nothing to map
		}
		out = append(out, checkpoint.PortMapping{Protocol: proto, ContainerPort: *pm.ContainerPort, HostPort: *pm.HostPort, HostIP: pm.HostIP})
	}
	return out, nil
}

// IsContainerID reports whether s is a full Docker container ID: 64
// lower-case hex digits. cri-dockerd names its checkpoints so; anything
// else in its directory is not one.
func IsContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
