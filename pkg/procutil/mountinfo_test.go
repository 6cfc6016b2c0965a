package procutil

import (
	"reflect"
	"testing"
)

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:         "plain",
		`a\040b`:        "a b",
		`\134\054`:      `\,`,
		`trailing\04`:   `trailing\04`,
		`not\9990octal`: `not\9990octal`,
		`\`:             `\`,
	} {
		if got := UnescapeMountinfo(in); got != want {
			t.Errorf("UnescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMountinfo(t *testing.T) {
	data := `27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
74 27 0:40 /run/netns /run/net\040ns rw,relatime unbindable - tmpfs tmpfs rw
76 74 0:4 net:[4026532180] /run/net\040ns/pod-a.net rw shared:3 master:2 - nsfs nsfs rw
too short
80 27 0:41 / /x rw - tmpfs
`
	got := ParseMountinfo([]byte(data))
	want := []Mount{
		{ID: 27, Parent: 1, Root: "/", MountPoint: "/", Optional: []string{"shared:1"}, FSType: "ext4", Source: "/dev/vda"},
		{ID: 74, Parent: 27, Root: "/run/netns", MountPoint: "/run/net ns", Optional: []string{"unbindable"}, FSType: "tmpfs", Source: "tmpfs"},
		{ID: 76, Parent: 74, Root: "net:[4026532180]", MountPoint: "/run/net ns/pod-a.net", Optional: []string{"shared:3", "master:2"}, FSType: "nsfs", Source: "nsfs"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseMountinfo =\n%+v\nwant\n%+v", got, want)
	}
}
