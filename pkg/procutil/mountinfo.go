package procutil

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// UnescapeMountinfo undoes the kernel's "\ooo" octal escapes in a field of
// /proc/<pid>/mountinfo (a space is written \040, a backslash \134).
func UnescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Mount is one line of /proc/<pid>/mountinfo (proc_pid_mountinfo(5)).
type Mount struct {
	// ID and Parent are mount IDs: Parent is the ID of the mount this
	// one is mounted on (statx's stx_mnt_id names the same IDs).
	ID, Parent int
	// Root is the path, in its filesystem, of the directory or file
	// mounted (nsfs shows "net:[4026532180]" and the like); MountPoint
	// is where it is mounted, as the reading process's root sees it.
	// Both unescaped.
	Root, MountPoint string
	// Optional are the optional fields: "shared:N", "master:N",
	// "propagate_from:N", "unbindable".
	Optional []string
	FSType   string
	Source   string
}

// ParseMountinfo parses the content of a mountinfo file. Lines too short
// to be mount lines are skipped.
func ParseMountinfo(data []byte) []Mount {
	var out []Mount
	for line := range strings.SplitSeq(string(data), "\n") {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		f := strings.Fields(line)
		if len(f) < 7 {
			continue
		}
		sep := slices.Index(f[6:], "-")
		if sep < 0 || 6+sep+2 >= len(f) {
			continue
		}
		sep += 6
		id, err1 := strconv.Atoi(f[0])
		parent, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, Mount{
			ID:         id,
			Parent:     parent,
			Root:       UnescapeMountinfo(f[3]),
			MountPoint: UnescapeMountinfo(f[4]),
			Optional:   slices.Clone(f[6:sep]),
			FSType:     f[sep+1],
			Source:     UnescapeMountinfo(f[sep+2]),
		})
	}
	return out
}

// ReadMountinfo reads and parses a mountinfo file (/proc/self/mountinfo:
// this process's mounts).
func ReadMountinfo(path string) ([]Mount, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseMountinfo(data), nil
}
