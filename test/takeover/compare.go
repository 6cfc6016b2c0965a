package takeover

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// fieldRule says how one field is compared: key is the field's full
// name (runtime.v1.Container.created_at); why says why it cannot be
// compared exactly.
type fieldRule struct {
	// newer: the field is not in cri-api v0.30, which cri-dockerd v0.4.3
	// speaks, so cri-dockerd cannot set it; netshim's value is reported
	// (extra), not compared.
	newer bool
	// unfilled: cri-dockerd v0.4.3 has the field but never fills it;
	// netshim may (reported as extra). Were it filled, it is compared.
	unfilled bool
	equal    func(want, got protoreflect.Value) bool
	why      string
}

// sameSecond compares two Unix nanosecond timestamps to the second.
func sameSecond(want, got protoreflect.Value) bool {
	return want.Int()/int64(time.Second) == got.Int()/int64(time.Second)
}

// zeroTimeOrSame: cri-dockerd reports a running container's finished_at
// as Go's zero time.Time in Unix nanoseconds (a large negative number);
// 0 stands for the same "not finished".
func zeroTimeOrSame(want, got protoreflect.Value) bool {
	if want.Int() == (time.Time{}).UnixNano() {
		return got.Int() == 0 || got.Int() == want.Int()
	}
	return want.Int() == got.Int()
}

// compareRules are every exception to "netshim answers exactly what
// cri-dockerd answered". Every other field of the answers is compared,
// unset and zero values included (a SANDBOX_READY state and an attempt
// 0 are zero values).
var compareRules = map[protoreflect.FullName]fieldRule{
	"runtime.v1.PodSandbox.created_at": {equal: sameSecond,
		why: "cri-dockerd's ListPodSandbox takes it from docker ps, in whole seconds (its PodSandboxStatus has nanoseconds); compared to the second"},
	"runtime.v1.Container.created_at": {equal: sameSecond,
		why: "cri-dockerd's ListContainers takes it from docker ps, in whole seconds (its ContainerStatus has nanoseconds); compared to the second"},
	"runtime.v1.ContainerStatus.finished_at": {equal: zeroTimeOrSame,
		why: "cri-dockerd reports a running container's as Go's zero time in Unix nanoseconds; netshim may say 0"},
	// Read from cri-dockerd v0.4.3's core/convert.go, container_status.go
	// and sandbox_status.go.
	"runtime.v1.PodSandbox.runtime_handler":       {unfilled: true},
	"runtime.v1.PodSandboxStatus.runtime_handler": {unfilled: true},
	"runtime.v1.Container.image_id":               {unfilled: true},
	"runtime.v1.ContainerStatus.image_id":         {unfilled: true},
	"runtime.v1.ContainerStatus.resources":        {unfilled: true},
	"runtime.v1.ImageSpec.annotations":            {unfilled: true},
	"runtime.v1.ImageSpec.user_specified_image":   {unfilled: true},
	"runtime.v1.ImageSpec.runtime_handler":        {unfilled: true},
	// Found by comparing the messages of cri-api v0.30.1's api.proto
	// with v0.37.2's (the one netshim and this test build with).
	"runtime.v1.ContainerStatus.stop_signal": {newer: true, why: "not in cri-api v0.30"},
	"runtime.v1.ContainerStatus.user":        {newer: true, why: "not in cri-api v0.30"},
	"runtime.v1.ImageSpec.image_ref":         {newer: true, why: "not in cri-api v0.30"},
	"runtime.v1.Mount.image":                 {newer: true, why: "not in cri-api v0.30"},
	"runtime.v1.Mount.image_sub_path":        {newer: true, why: "not in cri-api v0.30"},
	"runtime.v1.Mount.mount_options":         {newer: true, why: "not in cri-api v0.30"},
}

// fieldDiffs compares got (netshim's answer) with want (cri-dockerd's)
// field by field, recursing into messages and lists of messages, under
// rules (compareRules for the real thing). It returns one line per
// difference, and the fields netshim set that cri-dockerd cannot or does
// not (extra: no difference).
func fieldDiffs(want, got proto.Message, rules map[protoreflect.FullName]fieldRule) (diffs, extra []string) {
	diffMessage("", want.ProtoReflect(), got.ProtoReflect(), rules, &diffs, &extra)
	return diffs, extra
}

func diffMessage(prefix string, want, got protoreflect.Message, rules map[protoreflect.FullName]fieldRule, diffs, extra *[]string) {
	fields := want.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		path := prefix + string(fd.Name())
		rule := rules[fd.FullName()]
		if !want.Has(fd) && !got.Has(fd) {
			continue
		}
		if rule.newer || (rule.unfilled && !want.Has(fd)) {
			if got.Has(fd) {
				*extra = append(*extra, path)
			}
			continue
		}
		wv, gv := want.Get(fd), got.Get(fd)
		switch {
		case rule.equal != nil:
			if !rule.equal(wv, gv) {
				*diffs = append(*diffs, fmt.Sprintf("%s: cri-dockerd %s, netshim %s (%s)", path, show(fd, wv), show(fd, gv), rule.why))
			}
		case fd.IsMap():
			*diffs = append(*diffs, mapDiffs(path, fd, wv.Map(), gv.Map())...)
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			wl, gl := wv.List(), gv.List()
			if wl.Len() != gl.Len() {
				*diffs = append(*diffs, fmt.Sprintf("%s: cri-dockerd %s, netshim %s", path, show(fd, wv), show(fd, gv)))
				continue
			}
			for j := range wl.Len() {
				diffMessage(fmt.Sprintf("%s[%d].", path, j), wl.Get(j).Message(), gl.Get(j).Message(), rules, diffs, extra)
			}
		case fd.Kind() == protoreflect.MessageKind:
			// An unset message reads as an empty one: its set fields
			// show up one by one.
			diffMessage(path+".", wv.Message(), gv.Message(), rules, diffs, extra)
		default:
			if !wv.Equal(gv) {
				*diffs = append(*diffs, fmt.Sprintf("%s: cri-dockerd %s, netshim %s", path, show(fd, wv), show(fd, gv)))
			}
		}
	}
}

// mapDiffs compares two string maps (labels, annotations) key by key.
func mapDiffs(path string, fd protoreflect.FieldDescriptor, want, got protoreflect.Map) []string {
	var out []string
	want.Range(func(k protoreflect.MapKey, wv protoreflect.Value) bool {
		gv := got.Get(k)
		if !got.Has(k) {
			out = append(out, fmt.Sprintf("%s[%s]: cri-dockerd %s, netshim none", path, k.String(), show(fd.MapValue(), wv)))
		} else if !wv.Equal(gv) {
			out = append(out, fmt.Sprintf("%s[%s]: cri-dockerd %s, netshim %s", path, k.String(), show(fd.MapValue(), wv), show(fd.MapValue(), gv)))
		}
		return true
	})
	got.Range(func(k protoreflect.MapKey, gv protoreflect.Value) bool {
		if !want.Has(k) {
			out = append(out, fmt.Sprintf("%s[%s]: cri-dockerd none, netshim %s", path, k.String(), show(fd.MapValue(), gv)))
		}
		return true
	})
	sort.Strings(out)
	return out
}

// show prints a field's value for a message: strings quoted, enums by
// name, messages and lists in proto text form.
func show(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch {
	case fd.IsList():
		l := v.List()
		parts := make([]string, l.Len())
		for i := range l.Len() {
			parts[i] = showScalar(fd, l.Get(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	default:
		return showScalar(fd, v)
	}
}

func showScalar(fd protoreflect.FieldDescriptor, v protoreflect.Value) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return strconv.Quote(v.String())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return string(ev.Name())
		}
		return strconv.Itoa(int(v.Enum()))
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return fmt.Sprintf("{%v}", v.Message().Interface())
	}
	return fmt.Sprint(v.Interface())
}

// ---------------------------------------------------------------- logs

// criLogLine is `<RFC3339Nano> <stdout|stderr> <F|P> <text>`, the format
// kubelet parses (the space after the tag is required).
var criLogLine = regexp.MustCompile(`^(\S+) (stdout|stderr) ([FP]) (.*)$`)

// logEntry is one complete line of a container log.
type logEntry struct {
	time   time.Time
	stream string
	text   string
}

// parseCRILog reads a log in CRI format and returns its complete lines
// (P fragments joined to the F line that ends them). Any line that is
// not CRI format is an error: docker's json-file lines, say.
func parseCRILog(r io.Reader) ([]logEntry, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	var out []logEntry
	partial := map[string]string{}
	n := 0
	for sc.Scan() {
		n++
		m := criLogLine.FindStringSubmatch(sc.Text())
		if m == nil {
			return nil, fmt.Errorf("line %d is not a CRI log line: %.120q", n, sc.Text())
		}
		ts, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: timestamp %q: %w", n, m[1], err)
		}
		stream, tag, text := m[2], m[3], m[4]
		if tag == "P" {
			partial[stream] += text
			continue
		}
		out = append(out, logEntry{time: ts, stream: stream, text: partial[stream] + text})
		delete(partial, stream)
	}
	return out, sc.Err()
}

// numberedLine is what the logger pod writes: "line N", N from 1.
var numberedLine = regexp.MustCompile(`^line ([0-9]+)$`)

// lineNumbers returns the numbers of the numbered lines among texts, in
// order; other lines are ignored.
func lineNumbers(texts []string) []int {
	var nums []int
	for _, t := range texts {
		if m := numberedLine.FindStringSubmatch(strings.TrimRight(t, "\r")); m != nil {
			n, _ := strconv.Atoi(m[1])
			nums = append(nums, n)
		}
	}
	return nums
}

// checkNumbering checks that nums runs 1, 2, 3, ... up to at least
// atLeast: no line lost, doubled or reordered across the take-over.
func checkNumbering(nums []int, atLeast int) error {
	if len(nums) == 0 {
		return fmt.Errorf("no numbered line (want 1..%d at least)", atLeast)
	}
	for i, n := range nums {
		if n != i+1 {
			lo := max(0, i-3)
			hi := min(len(nums), i+4)
			return fmt.Errorf("numbered line %d of %d is %d, want %d (around it: %v)", i+1, len(nums), n, i+1, nums[lo:hi])
		}
	}
	if last := nums[len(nums)-1]; last < atLeast {
		return fmt.Errorf("numbered lines end at %d, want at least %d", last, atLeast)
	}
	return nil
}
