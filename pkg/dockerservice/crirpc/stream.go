package crirpc

import (
	"context"

	"google.golang.org/protobuf/proto"
)

// The Stream* RPCs (CRI v0.36+) are List RPCs cut into several messages,
// so that a large answer never hits gRPC's message size limit. Both CRI
// services have them, so the chunking lives here, at the RPC boundary
// they share.

// StreamChunkBytes bounds the encoded items of one message. kubelet
// accepts 16 MiB messages, crictl and most gRPC clients 4 MiB; 1 MiB stays
// far below both while keeping the messages few (one for ~500 typical
// pods). An item larger than this goes alone in its message.
const StreamChunkBytes = 1 << 20

// SendChunked sends items in order, in messages of at most
// StreamChunkBytes of encoded items (or one item), stopping when ctx ends.
func SendChunked[T proto.Message](ctx context.Context, items []T, send func([]T) error) error {
	start, size := 0, 0
	flush := func(end int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(items[start:end]); err != nil {
			return err
		}
		start, size = end, 0
		return nil
	}
	for i, item := range items {
		// A repeated field's tag and length prefix cost a few bytes
		// more than the item itself.
		n := proto.Size(item) + 8
		if i > start && size+n > StreamChunkBytes {
			if err := flush(i); err != nil {
				return err
			}
		}
		size += n
	}
	if start < len(items) {
		return flush(len(items))
	}
	return nil
}
