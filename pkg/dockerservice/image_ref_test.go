package dockerservice

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/registry"
	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestImagePullRefNormalisesLikeKubelet(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                           "docker.io/library/busybox:latest",
		"busybox:1.36":                      "docker.io/library/busybox:1.36",
		"library/busybox":                   "docker.io/library/busybox:latest",
		"docker.io/busybox":                 "docker.io/library/busybox:latest",
		"docker.io/library/busybox:latest":  "docker.io/library/busybox:latest",
		"someuser/app:v2":                   "docker.io/someuser/app:v2",
		"registry.k8s.io/pause:3.10":        "registry.k8s.io/pause:3.10",
		"localhost:5000/test/busybox":       "localhost:5000/test/busybox:latest",
		"127.0.0.1:5000/test/busybox:1":     "127.0.0.1:5000/test/busybox:1",
		"quay.io/a/b@" + testDigest:         "quay.io/a/b@" + testDigest,
		"alpine@" + testDigest:              "docker.io/library/alpine@" + testDigest,
		"quay.io/a/b:1.0@" + testDigest:     "quay.io/a/b:1.0@" + testDigest,
		"abc123":                            "docker.io/library/abc123:latest", // a short hex string is a valid name
		"[::1]:5000/ipv6/registry:whatever": "[::1]:5000/ipv6/registry:whatever",
	} {
		got, err := imagePullRef(in)
		if err != nil {
			t.Errorf("imagePullRef(%q): %v", in, err)
			continue
		}
		if got.String() != want {
			t.Errorf("imagePullRef(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBadImageSpecsAreInvalidArgument(t *testing.T) {
	for _, in := range []string{
		"",
		"BusyBox",                  // upper case
		"busybox:",                 // empty tag
		"busybox@sha256:12",        // short digest
		"a b",                      // space
		"sha256:" + testDigest[7:], // an ID cannot be pulled
		testDigest[7:],             // nor a bare 64-hex ID
		"registry:5000/x:tag:tag",  // two tags
	} {
		_, err := imagePullRef(in)
		if codeOf(err) != codes.InvalidArgument {
			t.Errorf("imagePullRef(%q): err %v, want InvalidArgument", in, err)
			continue
		}
		if in == "" && !strings.Contains(err.Error(), "empty") {
			t.Errorf("imagePullRef(\"\"): %q does not say the spec is empty", err)
		}
	}
	for _, in := range []string{"", "BusyBox", "sha256:xyz", "sha256:" + strings.Repeat("a", 65)} {
		if _, err := imageLookupRef(in); codeOf(err) != codes.InvalidArgument {
			t.Errorf("imageLookupRef(%q): err %v, want InvalidArgument", in, err)
		}
	}
}

func TestImageLookupRefKeepsIDsAndNormalisesNames(t *testing.T) {
	for in, want := range map[string]string{
		testDigest:                  testDigest,
		testDigest[7:]:              testDigest[7:],
		"sha256:0123abcd":           "sha256:0123abcd",
		"0123abcd":                  "0123abcd", // Docker tries the name, then the ID prefix
		"busybox":                   "docker.io/library/busybox:latest",
		"registry.k8s.io/pause":     "registry.k8s.io/pause:latest",
		"busybox@" + testDigest:     "docker.io/library/busybox@" + testDigest,
		"localhost:5000/x/y:1.29-2": "localhost:5000/x/y:1.29-2",
	} {
		got, err := imageLookupRef(in)
		if err != nil || got != want {
			t.Errorf("imageLookupRef(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestImageUser(t *testing.T) {
	for _, c := range []struct {
		user     string
		uid      int64 // -1: none
		username string
	}{
		{"", -1, ""},
		{"0", 0, ""},
		{"1002", 1002, ""},
		{"1003:1004", 1003, ""},
		{"www-data", -1, "www-data"},
		{"www-data:1004", -1, "www-data"},
		{"www-data:www-data", -1, "www-data"},
		{":1004", -1, ""},
		{"-1", -1, "-1"},
		{"99999999999999999999", -1, "99999999999999999999"}, // not an int64
	} {
		uid, name := imageUser(c.user)
		gotUID := int64(-1)
		if uid != nil {
			gotUID = *uid
		}
		if gotUID != c.uid || name != c.username {
			t.Errorf("imageUser(%q) = uid %d username %q, want uid %d username %q", c.user, gotUID, name, c.uid, c.username)
		}
	}
}

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
			named, err := imagePullRef(c.image)
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
	named, _ := imagePullRef("busybox")
	for _, a := range []string{"%%%not-base64", base64.StdEncoding.EncodeToString([]byte("no-colon")), base64.StdEncoding.EncodeToString([]byte(":nouser"))} {
		if _, err := registryAuth(&runtimeapi.AuthConfig{Auth: a}, named); codeOf(err) != codes.InvalidArgument {
			t.Errorf("auth %q: err %v, want InvalidArgument", a, err)
		}
	}
}
