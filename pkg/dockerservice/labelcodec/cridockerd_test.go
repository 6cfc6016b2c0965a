package labelcodec

import (
	"testing"

	"github.com/docker/docker/api/types/container"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// cri-dockerd's names and labels decode as cri-dockerd reads them; what
// does not look like its containers is not taken.
func TestDecodeCRIDockerd(t *testing.T) {
	sandbox := func(name string, labels map[string]string, hc *container.HostConfig) container.InspectResponse {
		return container.InspectResponse{ContainerJSONBase: &container.ContainerJSONBase{ID: "x", Name: name, HostConfig: hc}, Config: &container.Config{Labels: labels}}
	}
	sbLabels := map[string]string{CRIDockerdLabelType: TypeSandbox}
	for _, tc := range []struct {
		name    string
		c       container.InspectResponse
		kind    bool
		wantErr bool
		check   func(t *testing.T, extra any)
	}{
		{name: "not cri-dockerd's", c: sandbox("/k8s_POD_a_b_c_0", map[string]string{}, nil)},
		{name: "sandbox with random suffix", c: sandbox("/k8s_POD_a_b_c_1_0a1b2c3d", sbLabels, nil), kind: true, check: func(t *testing.T, extra any) {
			md := extra.(*Sandbox).Metadata
			if md.Name != "a" || md.Namespace != "b" || md.Uid != "c" || md.Attempt != 1 {
				t.Errorf("metadata = %v", md)
			}
		}},
		{name: "host namespaces", c: sandbox("/k8s_POD_a_b_c_0", sbLabels, &container.HostConfig{NetworkMode: "host", PidMode: "host", IpcMode: "host"}), kind: true, check: func(t *testing.T, extra any) {
			ns := extra.(*Sandbox).NamespaceOptions
			if ns.Network != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_NODE || ns.Ipc != runtimeapi.NamespaceMode_NODE {
				t.Errorf("namespaces = %v", ns)
			}
		}},
		{name: "pod namespaces", c: sandbox("/k8s_POD_a_b_c_0", sbLabels, &container.HostConfig{NetworkMode: "none"}), kind: true, check: func(t *testing.T, extra any) {
			ns := extra.(*Sandbox).NamespaceOptions
			if ns.Network != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER || ns.Ipc != runtimeapi.NamespaceMode_POD {
				t.Errorf("namespaces = %v", ns)
			}
		}},
		{name: "too few fields", c: sandbox("/k8s_POD_a_b_0", sbLabels, nil), wantErr: true},
		{name: "not k8s prefix", c: sandbox("/x_POD_a_b_c_0", sbLabels, nil), wantErr: true},
		{name: "sandbox not named POD", c: sandbox("/k8s_app_a_b_c_0", sbLabels, nil), wantErr: true},
		{name: "bad attempt", c: sandbox("/k8s_POD_a_b_c_x", sbLabels, nil), wantErr: true},
		{name: "container without sandbox id", c: sandbox("/k8s_app_a_b_c_0", map[string]string{CRIDockerdLabelType: TypeContainer}, nil), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb, ctr, err := DecodeCRIDockerd(tc.c)
			var extra any
			switch {
			case sb != nil:
				extra = sb
			case ctr != nil:
				extra = ctr
			}
			if (err != nil) != tc.wantErr || (extra != nil) != tc.kind {
				t.Fatalf("decode = %#v, %#v, err %v; want one decoded %v, error %v", sb, ctr, err, tc.kind, tc.wantErr)
			}
			if tc.check != nil {
				tc.check(t, extra)
			}
		})
	}
}
