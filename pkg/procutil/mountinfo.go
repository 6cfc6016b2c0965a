package procutil

import (
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
