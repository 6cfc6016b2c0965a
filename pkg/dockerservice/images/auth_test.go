package images

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/registry"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/pkg/dockerservice/imageref"
)

func decodeAuthHeader(t *testing.T, v string) registry.AuthConfig {
	t.Helper()
	data, err := base64.URLEncoding.DecodeString(v)
	if err != nil {
		t.Fatalf("X-Registry-Auth %q is not base64url: %v", v, err)
	}
	var ac registry.AuthConfig
	if err := json.Unmarshal(data, &ac); err != nil {
		t.Fatalf("X-Registry-Auth %q is not an AuthConfig: %v", data, err)
	}
	return ac
}

func TestRegistryAuthEncoding(t *testing.T) {
	std := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, c := range []struct {
		name  string
		image string
		auth  *runtimeapi.AuthConfig
		want  *registry.AuthConfig // nil: no header
	}{
		{name: "no auth", image: "busybox"},
		{name: "empty auth", image: "busybox", auth: &runtimeapi.AuthConfig{}},
		{name: "only a server address", image: "busybox", auth: &runtimeapi.AuthConfig{ServerAddress: "x"}},
		{
			name: "username and password, Docker Hub", image: "busybox",
			auth: &runtimeapi.AuthConfig{Username: "u", Password: "p:w"},
			want: &registry.AuthConfig{Username: "u", Password: "p:w", ServerAddress: "https://index.docker.io/v1/"},
		},
		{
			name: "username and password, private registry", image: "127.0.0.1:5000/a/b:1",
			auth: &runtimeapi.AuthConfig{Username: "u", Password: "p"},
			want: &registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "127.0.0.1:5000"},
		},
		{
			name: "auth decoded into username and password", image: "quay.io/a/b",
			auth: &runtimeapi.AuthConfig{Auth: std("alice:s3cr:et")},
			want: &registry.AuthConfig{Username: "alice", Password: "s3cr:et", ServerAddress: "quay.io"},
		},
		{
			name: "auth without padding", image: "quay.io/a/b",
			auth: &runtimeapi.AuthConfig{Auth: strings.TrimRight(std("bob:x"), "=")},
			want: &registry.AuthConfig{Username: "bob", Password: "x", ServerAddress: "quay.io"},
		},
		{
			name: "explicit username wins over auth", image: "quay.io/a/b",
			auth: &runtimeapi.AuthConfig{Username: "u", Password: "p", Auth: std("other:o")},
			want: &registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "quay.io"},
		},
		{
			name: "identity token", image: "myreg.example:443/a",
			auth: &runtimeapi.AuthConfig{Username: "<token>", IdentityToken: "refresh"},
			want: &registry.AuthConfig{Username: "<token>", IdentityToken: "refresh", ServerAddress: "myreg.example:443"},
		},
		{
			name: "registry token", image: "gcr.io/p/i:1",
			auth: &runtimeapi.AuthConfig{RegistryToken: "bearer"},
			want: &registry.AuthConfig{RegistryToken: "bearer", ServerAddress: "gcr.io"},
		},
		{
			name: "the CRI's server address wins", image: "gcr.io/p/i:1",
			auth: &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: "https://gcr.io"},
			want: &registry.AuthConfig{Username: "u", Password: "p", ServerAddress: "https://gcr.io"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			named, err := imageref.PullRef(c.image)
			if err != nil {
				t.Fatal(err)
			}
			got, err := registryAuth(c.auth, named)
			if err != nil {
				t.Fatalf("registryAuth: %v", err)
			}
			if c.want == nil {
				if got != "" {
					t.Fatalf("registryAuth = %q, want no credentials", got)
				}
				return
			}
			if ac := decodeAuthHeader(t, got); ac != *c.want {
				t.Errorf("X-Registry-Auth decodes to %+v, want %+v", ac, *c.want)
			}
		})
	}
}

func TestRegistryAuthRejectsBadAuthField(t *testing.T) {
	named, _ := imageref.PullRef("busybox")
	for _, a := range []string{"%%%not-base64", base64.StdEncoding.EncodeToString([]byte("no-colon")), base64.StdEncoding.EncodeToString([]byte(":nouser"))} {
		if _, err := registryAuth(&runtimeapi.AuthConfig{Auth: a}, named); codeOf(err) != codes.InvalidArgument {
			t.Errorf("auth %q: err %v, want InvalidArgument", a, err)
		}
	}
}
