package critest

import (
	"fmt"
	"regexp"
	"strconv"
)

// Skip is a critest spec skipped by its full text (without the "[k8s.io] "
// prefix ginkgo prints), and why this machine cannot pass it whatever the
// runtime does.
type Skip struct {
	Spec, Reason string
}

// privReason is why the privileged specs fail on Docker 20.10 here.
const privReason = "needs a privileged container: root here lacks CAP_SYS_RESOURCE and Docker 20.10 asks runc for every capability, so runc cannot start one (Docker 29 can: ENGINE=docker29)"

// privSkips need a privileged container (or all capabilities). Root here
// lacks CAP_SYS_RESOURCE. Docker 20.10 puts every capability it knows into
// such a container's spec, CAP_SYS_RESOURCE too, and runc (1.1.5 and 1.4.3
// alike: seen with ENGINE=docker20-runc143) then fails "unable to apply
// caps: operation not permitted". Docker 29 grants only the capabilities
// its own process holds, and the specs pass there. So they are skipped on
// the Docker 20.10 engines only; PRIVILEGED=skip|run overrides.
var privSkips = []Skip{
	{"Container OOM runtime should output OOMKilled reason should terminate with exitCode 137 and reason OOMKilled",
		privReason + " (its pod is privileged)"},
	{"Security Context bucket runtime should support Privileged is true", privReason},
	{"Security Context bucket runtime should support adding ALL capabilities",
		"Docker 20.10 adds ALL capabilities, CAP_SYS_RESOURCE too, which root here lacks: runc fails 'unable to apply caps' (Docker 29 adds only those it holds)"},
	{"Security Context SeccompProfilePath runtime should ignore a seccomp profile that blocks setting hostname when privileged", privReason},
	{"Container Mount Propagation runtime should support mount propagation mount with 'rprivate' should not support propagation",
		privReason + " (its pod is privileged)"},
	{"Container Mount Propagation runtime should support mount propagation mount with 'rshared' should support propagation from host to container and vice versa",
		privReason + " (its pod is privileged)"},
	{"Container Mount Propagation runtime should support mount propagation mount with 'rslave' should support propagation from host to container",
		privReason + " (its pod is privileged)"},
	{"Container Mount Readonly runtime should support readonly mounts should support non-recursive readonly mounts",
		privReason + " (its pod is privileged)"},
	{"Container Mount Readonly runtime should support readonly mounts should support recursive readonly mounts",
		privReason + " (its pod is privileged)"},
	{"Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with PROPAGATION_HOST_TO_CONTAINER",
		privReason + " (its pod is privileged)"},
	{"Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with PROPAGATION_BIDIRECTIONAL",
		privReason + " (its pod is privileged)"},
	{"Container Mount Readonly runtime should support readonly mounts should reject a recursive readonly mount with ReadOnly: false",
		privReason + " (its pod is privileged)"},
}

// offlineSkips cannot pass without the public registries, on any engine.
var offlineSkips = []Skip{
	{"Image Manager public image with tag should be pulled and removed [Conformance]",
		"checks the pulled image under its public gcr.io name, which cannot be pulled offline (-registry-prefix pulls another name)"},
	{"Image Manager public image without tag should be pulled and removed [Conformance]",
		"checks the pulled image under its public gcr.io name, which cannot be pulled offline (-registry-prefix pulls another name)"},
	{"Image Manager public image with digest should be pulled and removed [Conformance]",
		"needs the upstream image's digest, which no locally built image can have"},
	{"Image Manager image status should support all kinds of references [Conformance]",
		"checks the pulled image under its public gcr.io name:tag, which cannot be pulled offline (-registry-prefix pulls another name)"},
	{"Image Manager listImage should get exactly 3 image in the result list [Conformance]",
		"compares each pulled image's repo tag with its public gcr.io name, but -registry-prefix pulls it as localhost:5000/<path>:latest"},
	{"Image Manager listImage should get exactly 3 repoTags in the result image [Conformance]",
		"compares the repo tags with the public gcr.io names, but -registry-prefix pulls them as localhost:5000/<path>"},
}

// Skips are the specs skipped on engine: the offline ones always, the
// privileged ones on the Docker 20.10 engines (anything but docker29)
// unless privileged ($PRIVILEGED) is "run", and everywhere if it is
// "skip".
func Skips(engine, privileged string) ([]Skip, error) {
	skips := append([]Skip(nil), offlineSkips...)
	switch privileged {
	case "run":
	case "skip":
		skips = append(skips, privSkips...)
	case "":
		if engine != "docker29" {
			skips = append(skips, privSkips...)
		}
	default:
		return nil, fmt.Errorf("PRIVILEGED=%s: want run or skip", privileged)
	}
	return skips, nil
}

// Pattern is the ginkgo regexp that matches exactly this spec's full text.
func (s Skip) Pattern() string {
	return `\[k8s\.io\] ` + regexp.QuoteMeta(s.Spec) + `$`
}

// skipArgs are critest's flags that skip these specs.
func skipArgs(skips []Skip) []string {
	args := make([]string, len(skips))
	for i, s := range skips {
		args[i] = "-ginkgo.skip=" + s.Pattern()
	}
	return args
}

// focusArgs are the flags of a dry run that selects exactly these specs:
// it must select len(skips) of them, or a skip names no spec or several.
func focusArgs(skips []Skip) []string {
	args := make([]string, len(skips))
	for i, s := range skips {
		args[i] = "-ginkgo.focus=" + s.Pattern()
	}
	return args
}

var willRunRE = regexp.MustCompile(`(?m)^Will run ([0-9]+) of ([0-9]+) specs`)

// willRun reads ginkgo's "Will run N of M specs" line; line is that line
// ("" if there is none).
func willRun(out string) (n int, line string, ok bool) {
	m := willRunRE.FindStringSubmatch(out)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return 0, m[0], false
	}
	return n, m[0], true
}

// checkDryRun says whether a dry run's output shows the skips naming
// exactly nskips distinct specs.
func checkDryRun(out string, nskips int) error {
	n, line, ok := willRun(out)
	if ok && n == nskips {
		return nil
	}
	if line == "" {
		line = "no \"Will run\" line in critest's dry run: " + lastLines(out, 10)
	}
	return fmt.Errorf("the %d skips do not name %d distinct specs of this critest: %s", nskips, nskips, line)
}

// wantPassed is how many specs a full run (no -ginkgo.focus or other
// extra critest flags) passes on each engine with the default privileged
// setting, as seen in CI on 2026-12-02 (Docker 20.10: 73 passed, 40
// skipped; Docker 29: 85 passed, 28 skipped), plus, since issue 26, the
// 2 SupplementalGroupsPolicy specs on both engines and the 6
// UserNamespaces specs on Docker 29 (runc 1.4.3; Debian's Docker 20.10
// has runc 1.1.5, which makes no idmapped mounts, so netshim does not
// advertise user namespaces there and those 6 skip: make
// conformance-userns runs them on Docker 20.10 with runc 1.4.3). critest
// skips some specs by itself (features netshim does not advertise), on
// top of Skips: a feature netshim stops advertising turns passing specs
// into skips, and CI would stay green without this floor. Raise it when
// specs start to pass.
var wantPassed = map[string]int{
	"docker20": 75,
	"docker29": 93,
}

// WantPassed is the floor of passed specs for a full run on engine, and
// whether there is one (none for other engines or privileged settings).
func WantPassed(engine, privileged string) (int, bool) {
	if privileged != "" {
		return 0, false
	}
	n, ok := wantPassed[engine]
	return n, ok
}
