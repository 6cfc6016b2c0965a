package labelcodec

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestDecode(t *testing.T) {
	sandboxMetaJSON := func(uid string, mutate func(*sandboxMeta)) string {
		m := sandboxMeta{metaHeader: metaHeader{Version: metaVersion, Kind: TypeSandbox}, Name: "web", Namespace: "ns", UID: uid, Attempt: 3,
			Labels: map[string]string{"app": "web"}, NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}}
		if mutate != nil {
			mutate(&m)
		}
		s, err := encodeMeta(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	containerMetaJSON := func(sandboxID string) string {
		s, err := encodeMeta(containerMeta{metaHeader: metaHeader{Version: metaVersion, Kind: TypeContainer}, SandboxID: sandboxID, Name: "app", Attempt: 1, LogPath: "/var/log/pods/x/app/1.log"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sandbox := func(extra map[string]string) map[string]string {
		l := map[string]string{LabelType: TypeSandbox, LabelPodName: "web", LabelPodNamespace: "ns", LabelPodUID: "uid-1"}
		maps.Copy(l, extra)
		return l
	}
	ctr := func(extra map[string]string) map[string]string {
		l := map[string]string{LabelType: TypeContainer, LabelSandboxID: "sb-1", LabelContainerName: "app"}
		maps.Copy(l, extra)
		return l
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string // TypeSandbox, TypeContainer or "" (left out)
		check  func(t *testing.T, extra any)
	}{
		{name: "not netshim's", labels: map[string]string{"maintainer": "x", LabelMeta: sandboxMetaJSON("uid-1", nil)}},
		{name: "unknown type", labels: map[string]string{LabelType: "volume"}},
		{name: "sandbox meta", labels: sandbox(map[string]string{LabelMeta: sandboxMetaJSON("uid-1", nil)}), want: TypeSandbox,
			check: func(t *testing.T, extra any) {
				info := extra.(*Sandbox)
				if info.Metadata.Attempt != 3 || info.Labels["app"] != "web" || info.NamespaceOptions.GetNetwork() != runtimeapi.NamespaceMode_NODE || info.Annotations == nil {
					t.Errorf("decoded %+v", info)
				}
			}},
		{name: "sandbox meta with unknown fields (a newer netshim, same version)", labels: sandbox(map[string]string{LabelMeta: strings.Replace(sandboxMetaJSON("uid-1", nil), `{`, `{"future":{"x":1},`, 1)}), want: TypeSandbox},
		{name: "sandbox meta unreadable", labels: sandbox(map[string]string{LabelMeta: `{"v":1,`})},
		{name: "sandbox meta empty", labels: sandbox(map[string]string{LabelMeta: ""})},
		{name: "sandbox meta of another version", labels: sandbox(map[string]string{LabelMeta: sandboxMetaJSON("uid-1", func(m *sandboxMeta) { m.Version = 2 })})},
		{name: "sandbox meta without version", labels: sandbox(map[string]string{LabelMeta: sandboxMetaJSON("uid-1", func(m *sandboxMeta) { m.Version = 0 })})},
		{name: "container meta on a sandbox", labels: sandbox(map[string]string{LabelMeta: containerMetaJSON("sb-1")})},
		// An image's meta label on a sandbox made before netshim wrote one.
		{name: "sandbox meta for another pod", labels: sandbox(map[string]string{LabelMeta: sandboxMetaJSON("uid-other", nil)})},
		{name: "container meta", labels: ctr(map[string]string{LabelMeta: containerMetaJSON("sb-1")}), want: TypeContainer,
			check: func(t *testing.T, extra any) {
				info := extra.(*Container)
				if info.Metadata.Name != "app" || info.LogPath != "/var/log/pods/x/app/1.log" || info.Image == nil || info.Labels == nil {
					t.Errorf("decoded %+v", info)
				}
			}},
		{name: "container meta for another sandbox", labels: ctr(map[string]string{LabelMeta: containerMetaJSON("sb-other")})},
		{name: "container meta with no sandbox", labels: ctr(map[string]string{LabelMeta: containerMetaJSON(""), LabelSandboxID: ""})},
		{name: "sandbox meta on a container", labels: ctr(map[string]string{LabelMeta: sandboxMetaJSON("uid-1", nil)})},
		// No meta: a container of the previous netshim.
		{name: "legacy sandbox", labels: sandbox(map[string]string{LegacyLabelAttempt: "2", LegacyLabelRuntimeHandler: "rh", "label.app": "web", "annotation.note": "x"}), want: TypeSandbox,
			check: func(t *testing.T, extra any) {
				info := extra.(*Sandbox)
				if info.Metadata.Uid != "uid-1" || info.Metadata.Attempt != 2 || info.RuntimeHandler != "rh" || info.Labels["app"] != "web" || info.Annotations["note"] != "x" {
					t.Errorf("decoded %+v", info)
				}
			}},
		{name: "legacy container", labels: ctr(map[string]string{LegacyLabelTTY: "true", LegacyLabelLogPath: "/l/1.log"}), want: TypeContainer,
			check: func(t *testing.T, extra any) {
				if info := extra.(*Container); !info.TTY || info.LogPath != "/l/1.log" || info.Metadata.Name != "app" {
					t.Errorf("decoded %+v", info)
				}
			}},
		// LabelType alone (by hand, or an image run outside netshim):
		// nothing to show but made-up data.
		{name: "bare sandbox type", labels: map[string]string{LabelType: TypeSandbox}},
		{name: "sandbox type without pod UID", labels: sandbox(map[string]string{LabelPodUID: ""})},
		{name: "bare container type", labels: map[string]string{LabelType: TypeContainer}},
		{name: "container type without sandbox", labels: ctr(map[string]string{LabelSandboxID: ""})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, ctr := Decode("0123456789ab", tc.labels)
			var extra any
			kind := ""
			switch {
			case sb != nil && ctr != nil:
				t.Fatalf("Decode = %#v and %#v, want one at most", sb, ctr)
			case sb != nil:
				kind, extra = TypeSandbox, sb
				if again, err := DecodeSandbox(tc.labels); err != nil || !reflect.DeepEqual(again, sb) {
					t.Errorf("Decode and DecodeSandbox disagree: %#v, %#v (%v)", sb, again, err)
				}
			case ctr != nil:
				kind, extra = TypeContainer, ctr
				if again, err := DecodeContainer(tc.labels); err != nil || !reflect.DeepEqual(again, ctr) {
					t.Errorf("Decode and DecodeContainer disagree: %#v, %#v (%v)", ctr, again, err)
				}
			}
			if kind != tc.want {
				t.Fatalf("kind = %q, want %q", kind, tc.want)
			}
			if tc.check != nil {
				tc.check(t, extra)
			}
		})
	}
}

func TestMetaLabelStaysCompactAtKubeletLimits(t *testing.T) {
	// kubelet (apimachinery validation) allows label keys of a 253-byte
	// prefix and a 63-byte name, values of 63 bytes, and 256 KiB of
	// annotations in all. Annotations are often JSON (kubectl's
	// last-applied-configuration) or HTML-ish text.
	pod := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "big", Namespace: "ns", Uid: "uid-big", Attempt: 1}}
	pod.Labels = map[string]string{}
	for i := range 64 {
		key := strings.Repeat("p", 250) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "/" + strings.Repeat("n", 63)
		pod.Labels[key] = strings.Repeat("v", 63)
	}
	pod.Annotations = map[string]string{}
	raw := 0
	for _, m := range []map[string]string{pod.Labels} {
		for k, v := range m {
			raw += len(k) + len(v)
		}
	}
	chunk := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a<b>&c","labels":{"x":"ü"}}}` + "\n"
	for i := 0; raw < 256*1024-4096; i++ {
		k := "example.com/annotation-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		v := strings.Repeat(chunk, 8192/len(chunk))
		pod.Annotations[k] = v
		raw += len(k) + len(v)
	}
	labels, err := SandboxLabels(pod, "")
	if err != nil {
		t.Fatal(err)
	}
	meta := len(labels[LabelMeta])
	t.Logf("meta label: %d bytes for %d bytes of CRI labels and annotations", meta, raw)
	// JSON must escape the quotes and newlines of the annotations (about
	// a quarter more for these quote-dense ones); anything beyond (HTML
	// escaping of <>&, base64, a second copy of the annotations) would
	// break the limit.
	if limit := raw*13/10 + 4096; meta > limit {
		t.Errorf("meta label is %d bytes for %d bytes of CRI labels and annotations, want at most %d", meta, raw, limit)
	}
	total := 0
	for k, v := range labels {
		total += len(k) + len(v)
	}
	// The operator-facing copies of the (small) CRI labels are the only
	// other bulk: the Docker labels stay under 1 MiB, far below what
	// Docker's API (no label limit) and gRPC's 16 MiB CRI messages take.
	if total > 1<<20 {
		t.Errorf("Docker labels total %d bytes for a pod at kubelet's limits", total)
	}
	info, err := decodeSandboxMeta(labels[LabelMeta], labels)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(info.Labels, pod.Labels) || !maps.Equal(info.Annotations, pod.Annotations) {
		t.Error("labels or annotations of the big pod do not round-trip")
	}
}

func TestSignalNames(t *testing.T) {
	for in, want := range map[runtimeapi.Signal]string{
		runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT: "",
		runtimeapi.Signal_SIGNAL_SIGTERM:         "SIGTERM",
		runtimeapi.Signal_SIGNAL_SIGRTMINPLUS3:   "SIGRTMIN+3",
	} {
		if got := DockerSignal(in); got != want {
			t.Errorf("DockerSignal(%v) = %q, want %q", in, got, want)
		}
		if got := CRISignal(want); got != in {
			t.Errorf("CRISignal(%q) = %v, want %v", want, got, in)
		}
	}
	for in, want := range map[string]string{"quit": "SIGQUIT", "SIGUSR1": "SIGUSR1", "15": "SIGTERM", "37": "37", "": ""} {
		if got := NormalizeDockerSignal(in); got != want {
			t.Errorf("NormalizeDockerSignal(%q) = %q, want %q", in, got, want)
		}
	}
}
