package main

import (
	"regexp"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodConfigIsKubeletShaped pins the sandbox config the bench sends to
// the shape kubelet gives an ordinary pod, field for field, so that what
// the bench measures stays comparable between runs.
func TestPodConfigIsKubeletShaped(t *testing.T) {
	b := &bench{runID: "run1", namespace: "nsbench-run1", dir: "/tmp/nsbench1"}
	got := b.podConfig("seq-1")
	uid := got.GetMetadata().GetUid()
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(uid) {
		t.Errorf("UID %q is not a random (version 4) UUID", uid)
	}
	if other := b.podConfig("seq-1").GetMetadata().GetUid(); other == uid {
		t.Errorf("two pods got the same UID %q", uid)
	}
	seen := got.GetAnnotations()["kubernetes.io/config.seen"]
	if _, err := time.Parse(time.RFC3339Nano, seen); err != nil {
		t.Errorf("config.seen annotation %q: %v", seen, err)
	}
	want := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "seq-1", Namespace: "nsbench-run1", Uid: uid},
		Hostname:     "seq-1",
		LogDirectory: "/tmp/nsbench1/pods/nsbench-run1_seq-1_" + uid,
		DnsConfig: &runtimeapi.DNSConfig{
			Servers:  []string{"10.96.0.10"},
			Searches: []string{"nsbench-run1.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options:  []string{"ndots:5"},
		},
		Labels: map[string]string{
			"io.kubernetes.pod.name":      "seq-1",
			"io.kubernetes.pod.namespace": "nsbench-run1",
			"io.kubernetes.pod.uid":       uid,
			"app":                         "bench",
			runLabel:                      "run1",
			instanceLabel:                 "default",
		},
		Annotations: map[string]string{"kubernetes.io/config.seen": seen, "kubernetes.io/config.source": "api"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{
				Network: runtimeapi.NamespaceMode_POD, Pid: runtimeapi.NamespaceMode_CONTAINER, Ipc: runtimeapi.NamespaceMode_POD,
			},
		}},
	}
	requireProtoEqual(t, got, want)
}

func requireProtoEqual(t *testing.T, got, want proto.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", prototext.Format(got), prototext.Format(want))
	}
}
