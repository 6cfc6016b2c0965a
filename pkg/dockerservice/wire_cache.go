package dockerservice

import (
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protoapi "google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubelet relists every sandbox and every container about twice a second,
// and the answers rarely change between two relists. Building one from the
// index is cheap; encoding it is not (Go's protobuf encodes the label and
// annotation maps entry by entry: ~0.5 ms and 3000 allocations for 110
// pods). So the unfiltered answers, and those filtered by state alone, are
// built and encoded once per change of state, and the server's codec
// sends the cached bytes when handed that same message.

// wireCaches are the cached answers of the two lists kubelet polls, keyed
// by the generations of the index's store and of pods.
type wireCaches struct {
	sandboxes, containers listCache
}

// encodedResponse is a response message with its wire form.
type encodedResponse struct {
	key  stateKey
	msg  protoapi.Message
	wire []byte
}

// stateKey identifies a state of everything a cached answer derives from.
type stateKey struct {
	storeGen uint64
	podsGen  uint64
}

// stateKey returns the current key. Taken before an answer is built: if
// the state changes while it is built, the next call rebuilds.
func (ds *DockerService) currentStateKey() stateKey {
	return stateKey{storeGen: ds.store().Generation(), podsGen: ds.pods.Generation()}
}

// cachedOrBuild returns the answer cached in slot for the current state,
// or builds, encodes and caches a new one.
func cachedOrBuild[M protoapi.Message](slot *atomic.Pointer[encodedResponse], key stateKey, build func() M) M {
	return cachedOrBuildIf(slot, key, func() (M, bool) { return build(), true })
}

// cachedOrBuildIf is cachedOrBuild for an answer that may depend on more
// than the state the key names: build says whether its answer may be
// cached; one that may not is rebuilt on every call.
func cachedOrBuildIf[M protoapi.Message](slot *atomic.Pointer[encodedResponse], key stateKey, build func() (M, bool)) M {
	if e := slot.Load(); e != nil && e.key == key {
		return e.msg.(M)
	}
	msg, cacheable := build()
	if !cacheable {
		return msg
	}
	if wire, err := protoapi.Marshal(msg); err == nil {
		slot.Store(&encodedResponse{key: key, msg: msg, wire: wire})
	}
	return msg
}

// listCache holds the encoded answers of one list RPC: the unfiltered one
// (kubelet's relist, every second) and those filtered by a state alone
// (kubelet's housekeeping lists the ready sandboxes and the running
// containers every 2 seconds). Other filters are answered afresh.
type listCache struct {
	// slots[0] is the unfiltered answer, slots[1+s] the one filtered by
	// state s.
	slots [1 + maxListState + 1]atomic.Pointer[encodedResponse]
}

// maxListState is the highest state value a list filter can name
// (CONTAINER_UNKNOWN).
const maxListState = int32(runtimeapi.ContainerState_CONTAINER_UNKNOWN)

// slot is where the answer filtered by state (unfiltered when filtered is
// false) is cached; nil for a state the CRI does not define.
func (c *listCache) slot(filtered bool, state int32) *atomic.Pointer[encodedResponse] {
	if !filtered {
		return &c.slots[0]
	}
	if state < 0 || state > maxListState {
		return nil
	}
	return &c.slots[1+state]
}

// wire is the cached encoding of v, if v is one of the cached answers.
func (c *listCache) wire(v any) ([]byte, bool) {
	for i := range c.slots {
		if e := c.slots[i].Load(); e != nil && any(e.msg) == v {
			return e.wire, true
		}
	}
	return nil, false
}

// Codec is the gRPC codec to serve the service with: protobuf, except that
// a cached response message is sent as its cached bytes.
func (ds *DockerService) Codec() encoding.CodecV2 {
	return &cachingCodec{ds: ds, base: encoding.GetCodecV2(proto.Name)}
}

type cachingCodec struct {
	ds   *DockerService
	base encoding.CodecV2
}

func (c *cachingCodec) Marshal(v any) (mem.BufferSlice, error) {
	for _, cache := range []*listCache{&c.ds.wire.sandboxes, &c.ds.wire.containers} {
		if wire, ok := cache.wire(v); ok {
			// SliceBuffer's Free is a no-op, so the bytes may be shared
			// by any number of in-flight answers.
			return mem.BufferSlice{mem.SliceBuffer(wire)}, nil
		}
	}
	return c.base.Marshal(v)
}

func (c *cachingCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c *cachingCodec) Name() string { return c.base.Name() }
