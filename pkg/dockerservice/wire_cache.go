package dockerservice

import (
	"sync/atomic"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	protoapi "google.golang.org/protobuf/proto"
)

// kubelet relists every sandbox and every container about twice a second,
// and the answers rarely change between two relists. Building one from the
// index is cheap; encoding it is not (Go's protobuf encodes the label and
// annotation maps entry by entry: ~0.5 ms and 3000 allocations for 110
// pods). So the unfiltered answers are built and encoded once per change
// of state, and the server's codec sends the cached bytes when handed that
// same message.

// encodedResponse is a response message with its wire form.
type encodedResponse struct {
	key  stateKey
	msg  protoapi.Message
	wire []byte
}

// stateKey identifies a state of everything a cached answer derives from.
type stateKey struct {
	storeGen uint64
	localGen uint64
}

// stateKey returns the current key. Taken before an answer is built: if
// the state changes while it is built, the next call rebuilds.
func (ds *DockerService) currentStateKey() stateKey {
	return stateKey{storeGen: ds.store.Generation(), localGen: ds.localGen.Load()}
}

// bumpLocalState marks a change of state kept outside the index
// (checkpoints, sandboxes being set up).
func (ds *DockerService) bumpLocalState() { ds.localGen.Add(1) }

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
	for _, slot := range []*atomic.Pointer[encodedResponse]{&c.ds.sandboxListWire, &c.ds.containerListWire} {
		if e := slot.Load(); e != nil && any(e.msg) == v {
			// SliceBuffer's Free is a no-op, so the bytes may be shared
			// by any number of in-flight answers.
			return mem.BufferSlice{mem.SliceBuffer(e.wire)}, nil
		}
	}
	return c.base.Marshal(v)
}

func (c *cachingCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.base.Unmarshal(data, v) }

func (c *cachingCodec) Name() string { return c.base.Name() }
