package labelcodec

import (
	"strconv"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// A container's stop signal is kept in its meta label by Docker name, and
// reported to the CRI as its enum: the two conversions live here.

// DockerSignal turns a CRI stop signal into Docker's name for it ("" for
// the runtime default): SIGNAL_SIGRTMINPLUS3 becomes SIGRTMIN+3.
func DockerSignal(s runtimeapi.Signal) string {
	if s == runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		return ""
	}
	name, ok := runtimeapi.Signal_name[int32(s)]
	if !ok {
		return ""
	}
	name = strings.TrimPrefix(name, "SIGNAL_")
	if base, n, ok := strings.Cut(name, "PLUS"); ok {
		return base + "+" + n
	}
	return name
}

// signalNumbers names the signals an image's STOPSIGNAL may give by
// number. Only the ones images use in practice; others are reported as
// the runtime default.
var signalNumbers = map[string]string{
	"1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "6": "SIGABRT", "9": "SIGKILL",
	"10": "SIGUSR1", "12": "SIGUSR2", "15": "SIGTERM", "28": "SIGWINCH",
}

// NormalizeDockerSignal turns the forms Docker accepts ("SIGQUIT", "quit",
// "3", "SIGRTMIN+3") into the canonical "SIGQUIT"; unknown numbers are
// kept as they are (Docker understands them).
func NormalizeDockerSignal(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		return ""
	}
	if name, ok := signalNumbers[s]; ok {
		return name
	}
	if _, err := strconv.Atoi(s); err == nil {
		return s
	}
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return s
}

// CRISignal is the inverse of DockerSignal, for a normalized Docker name.
func CRISignal(docker string) runtimeapi.Signal {
	if docker == "" {
		return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
	}
	name := "SIGNAL_" + strings.Replace(docker, "+", "PLUS", 1)
	if v, ok := runtimeapi.Signal_value[name]; ok {
		return runtimeapi.Signal(v)
	}
	return runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT
}
