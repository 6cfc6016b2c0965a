package dockerservice

import "github.com/netshim/netshim/pkg/dockerservice/engine"

// engineState is the engine netshim talks to (pkg/dockerservice/engine),
// whose calls are the engine's (ds.engine.ContainerInspect), and the
// catalogue of its runtimes.
type engineState struct {
	*engine.Engine
	// runtimes caches the engine's runtimes, which runtime handlers name
	// (runtime_handlers.go).
	runtimes *runtimeCatalog
}
