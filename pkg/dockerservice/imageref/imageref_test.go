package imageref

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
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
		got, err := PullRef(in)
		if err != nil {
			t.Errorf("PullRef(%q): %v", in, err)
			continue
		}
		if got.String() != want {
			t.Errorf("PullRef(%q) = %q, want %q", in, got, want)
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
		_, err := PullRef(in)
		if crirpc.Code(err) != codes.InvalidArgument {
			t.Errorf("PullRef(%q): err %v, want InvalidArgument", in, err)
			continue
		}
		if in == "" && !strings.Contains(err.Error(), "empty") {
			t.Errorf("PullRef(\"\"): %q does not say the spec is empty", err)
		}
	}
	for _, in := range []string{"", "BusyBox", "sha256:xyz", "sha256:" + strings.Repeat("a", 65)} {
		if _, err := LookupRef(in); crirpc.Code(err) != codes.InvalidArgument {
			t.Errorf("LookupRef(%q): err %v, want InvalidArgument", in, err)
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
		got, err := LookupRef(in)
		if err != nil || got != want {
			t.Errorf("LookupRef(%q) = %q, %v; want %q", in, got, err, want)
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
		uid, name := User(c.user)
		gotUID := int64(-1)
		if uid != nil {
			gotUID = *uid
		}
		if gotUID != c.uid || name != c.username {
			t.Errorf("User(%q) = uid %d username %q, want uid %d username %q", c.user, gotUID, name, c.uid, c.username)
		}
	}
}
