// Package imageref is image references as kubelet and Docker read them:
// a CRI image spec turned into what netshim asks Docker for (a lookup or a
// pull), and the names Docker reports turned into the CRI's.
package imageref

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/distribution/reference"

	"github.com/netshim/netshim/pkg/dockerservice/crirpc"
)

// A CRI image spec is one of:
//   - a name, possibly familiar: "busybox", "busybox:1.36",
//     "registry.k8s.io/pause:3.10", "repo@sha256:<digest>";
//   - an image ID: "sha256:<64 hex>", or a hex prefix of one (Docker
//     accepts both, with or without "sha256:").
//
// Names are normalised as kubelet and containerd do: "busybox" is
// "docker.io/library/busybox:latest" (a name without tag or digest gets
// ":latest"). Docker resolves a name and its normalised form to the same
// image, so netshim always hands Docker the normalised form; IDs go to
// Docker as given.

// imageIDRE matches what Docker takes as an image ID or ID prefix. A bare
// hex string of fewer than 64 characters is also a valid repository name:
// Docker tries the name first and then the ID prefix, and so does netshim
// by handing it over untouched.
var imageIDRE = regexp.MustCompile(`^(sha256:)?[0-9a-f]{1,64}$`)

// IsID reports whether s is an image ID or ID prefix rather than a name.
func IsID(s string) bool { return imageIDRE.MatchString(s) }

// NormalizeName parses a name as kubelet does and adds ":latest" when
// it has neither tag nor digest. Unparsable input is InvalidArgument.
func NormalizeName(s string) (reference.Named, error) {
	if s == "" {
		return nil, crirpc.InvalidArgf("image spec is empty: an image name or ID is required")
	}
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return nil, crirpc.InvalidArgf("invalid image reference %q: %v", s, err)
	}
	return reference.TagNameOnly(named), nil
}

// LookupRef turns a CRI image spec into what netshim asks Docker for
// when it looks an image up: IDs and ID prefixes as given, names
// normalised.
func LookupRef(spec string) (string, error) {
	if spec == "" {
		return "", crirpc.InvalidArgf("image spec is empty: an image name or ID is required")
	}
	if IsID(spec) {
		return spec, nil
	}
	if strings.HasPrefix(spec, "sha256:") {
		return "", crirpc.InvalidArgf("invalid image ID %q: want sha256: followed by up to 64 lowercase hex digits", spec)
	}
	named, err := NormalizeName(spec)
	if err != nil {
		return "", err
	}
	return named.String(), nil
}

// PullRef turns a CRI image spec into the normalised reference to
// pull. An image ID cannot be pulled.
func PullRef(spec string) (reference.Named, error) {
	if strings.HasPrefix(spec, "sha256:") || (len(spec) == 64 && IsID(spec)) {
		return nil, crirpc.InvalidArgf("cannot pull image %q: it is an image ID; pull a name (repo[:tag] or repo@digest)", spec)
	}
	return NormalizeName(spec)
}

// normalizeRepoRef normalises a reference Docker reports in RepoTags or
// RepoDigests ("busybox:latest" → "docker.io/library/busybox:latest").
// Anything unparsable is returned unchanged.
func normalizeRepoRef(s string) string {
	named, err := reference.ParseNormalizedNamed(s)
	if err != nil {
		return s
	}
	return named.String()
}

// RepoRefs returns Docker's RepoTags and RepoDigests normalised, without
// the "<none>:<none>" / "<none>@<none>" placeholders older engines report.
//
// Both image stores report familiar names ("busybox:1.36"; Docker 29's
// containerd store too, though it keeps "docker.io/library/busybox:1.36"
// inside), and either may be asked for by either form. The CRI answer is
// the fully qualified form on every engine, as containerd's and CRI-O's
// CRI give it, so kubelet, crictl and the scheduler see one name per image
// whichever engine or runtime a node has. kubelet itself does not match
// pod images against these names: its image manager asks ImageStatus for
// the pod's image and keeps the ID; only node status (the scheduler's
// image locality) and the recovery of interrupted pull records compare
// names as strings, and there a short name misses a fully qualified one as
// it does on containerd nodes.
func RepoRefs(tags, digests []string) (outTags, outDigests []string) {
	for _, t := range tags {
		if t == "<none>:<none>" {
			continue
		}
		outTags = append(outTags, normalizeRepoRef(t))
	}
	for _, d := range digests {
		if d == "<none>@<none>" {
			continue
		}
		outDigests = append(outDigests, normalizeRepoRef(d))
	}
	return outTags, outDigests
}

// User splits an image config's User ("uid", "name", "uid:gid",
// "name:group") into the CRI's uid or username: a numeric user gives a
// uid, anything else a username; an empty user gives neither.
func User(user string) (uid *int64, username string) {
	u, _, _ := strings.Cut(user, ":")
	if u == "" {
		return nil, ""
	}
	if n, err := strconv.ParseInt(u, 10, 64); err == nil && n >= 0 {
		return &n, ""
	}
	return nil, u
}
