package fakedocker

import "github.com/docker/docker/api/types/system"

// What docker info says of the engine's runtimes, for State.Info: the
// tests of the runtime catalogue (pkg/dockerservice/engine) and of the
// RPCs that use it (pkg/dockerservice) describe engines alike.

const (
	// OCIFeaturesKey is where Docker 25+ puts a runtime's OCI features
	// (`runc features`) in docker info's runtime status.
	OCIFeaturesKey = "org.opencontainers.runtime-spec.features"
	// RROFeatures is the OCI features document of a runc that has "rro".
	RROFeatures = `{"ociVersionMin":"1.0.0","mountOptions":["ro","rro","rbind"]}`
)

// RuntimesInfo is a docker info with these runtimes: name → its OCI
// features document, "" when Docker reports none for it (Docker < 25).
func RuntimesInfo(kernel, defaultRuntime string, runtimes map[string]string) system.Info {
	info := system.Info{KernelVersion: kernel, DefaultRuntime: defaultRuntime, Runtimes: map[string]system.RuntimeWithStatus{}}
	for name, features := range runtimes {
		rt := system.RuntimeWithStatus{Runtime: system.Runtime{Path: "/usr/bin/" + name}}
		if features != "" {
			rt.Status = map[string]string{OCIFeaturesKey: features}
		}
		info.Runtimes[name] = rt
	}
	return info
}

// Docker29Info is Docker 29 with runc and a second runc under another
// name.
func Docker29Info(kernel string) system.Info {
	return RuntimesInfo(kernel, "runc", map[string]string{"runc": RROFeatures, "runc-alt": RROFeatures})
}
