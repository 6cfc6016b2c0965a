package network

import "context"

// Optional interfaces. A plugin or host implements them when it can; the
// runtime and the plugins check with a type assertion, so that adding one
// never breaks an implementation that predates it.

// SandboxLister is implemented by a Host that can list the pod sandboxes
// that exist. Plugins use it to garbage-collect what they hold for
// sandboxes that no longer do (CNI GC): an ID missing from the list is
// treated as gone, so the list must err on the side of including too much.
type SandboxLister interface {
	// ListSandboxes returns the IDs of every sandbox that exists (running
	// or not, as long as it may still be stopped or removed). It returns
	// an error, never a partial list, while the runtime does not know the
	// full set yet (e.g. before its first sync with the engine).
	ListSandboxes(ctx context.Context) ([]string, error)
}

// WarningReporter is implemented by plugins that know of a problem that
// does not keep pods from being set up but that an operator must hear of
// (e.g. a firewall that drops pod-to-pod traffic). The runtime appends the
// warnings to the NetworkReady condition's message; the condition stays
// true.
type WarningReporter interface {
	// Warnings returns the current warnings, each one line; it is called
	// on every Status poll, so it must answer from cached state.
	Warnings() []string
}

// Pod check outcomes (CheckResult.Status).
const (
	CheckOK          = "ok"
	CheckFailed      = "failed"
	CheckUnsupported = "unsupported"
)

// CheckResult is the outcome of verifying a pod's network against what
// its setup created (CNI CHECK).
type CheckResult struct {
	// Status is CheckOK, CheckFailed or CheckUnsupported.
	Status string `json:"status"`
	// Message says what drifted (failed) or why no check ran
	// (unsupported).
	Message string `json:"message,omitempty"`
}

// PodChecker is implemented by plugins that can verify a pod's network.
// The runtime calls it for verbose PodSandboxStatus only: a check forks
// the plugins.
type PodChecker interface {
	CheckPod(ctx context.Context, pod PodRef) CheckResult
}
