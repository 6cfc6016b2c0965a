// Package dockerspec is what netshim asks Docker for, made from a CRI
// request without calling anything: the checks of a RunPodSandbox or
// CreateContainer request before any Docker call (every refusal
// InvalidArgument, naming the field), and the mapping of a sandbox's or a
// container's CRI config to Docker's Config and HostConfig (namespaces,
// mounts, resources, identity and security options). What the mapping
// needs of the world (the negotiated API version, the sandbox's
// namespaces and files, netshim's oom_score_adj clamp) comes in its
// input; its fuzz targets check that the result uses only what the
// request gave.
package dockerspec
