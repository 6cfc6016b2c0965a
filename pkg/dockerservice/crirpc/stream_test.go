package crirpc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sized is a sandbox whose encoding takes about n bytes.
func sized(id string, n int) *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{Id: id, Annotations: map[string]string{"a": strings.Repeat("x", n)}}
}

func TestSendChunked(t *testing.T) {
	const kib = 1 << 10
	many := func(n, size int) []*runtimeapi.PodSandbox {
		var out []*runtimeapi.PodSandbox
		for i := range n {
			out = append(out, sized(fmt.Sprint(i), size))
		}
		return out
	}
	cases := []struct {
		name  string
		items []*runtimeapi.PodSandbox
		want  []int // items per message
	}{
		{"none: no message", nil, nil},
		{"small: one message", many(3, 100), []int{3}},
		{"large: as many as fit", many(10, 300*kib), []int{3, 3, 3, 1}},
		{"larger than a message: alone", []*runtimeapi.PodSandbox{sized("a", 10), sized("big", 2<<20), sized("b", 10)}, []int{1, 1, 1}},
		{"exactly full", many(2, StreamChunkBytes/2-64), []int{2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []int
			var all []*runtimeapi.PodSandbox
			err := SendChunked(context.Background(), tc.items, func(items []*runtimeapi.PodSandbox) error {
				size := 0
				for _, it := range items {
					size += proto.Size(it)
				}
				if len(items) == 0 || (len(items) > 1 && size > StreamChunkBytes) {
					t.Errorf("message of %d items, %d bytes", len(items), size)
				}
				got = append(got, len(items))
				all = append(all, items...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("items per message %v, want %v", got, tc.want)
			}
			if !slices.Equal(all, tc.items) {
				t.Error("items not sent each once, in order")
			}
		})
	}
}

func TestSendChunkedStops(t *testing.T) {
	items := []*runtimeapi.PodSandbox{sized("a", 600<<10), sized("b", 600<<10)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sent := 0
	count := func([]*runtimeapi.PodSandbox) error { sent++; return nil }
	if err := SendChunked(ctx, items, count); !errors.Is(err, context.Canceled) || sent != 0 {
		t.Errorf("cancelled: err %v after %d messages, want Canceled before any", err, sent)
	}
	boom := errors.New("client gone")
	calls := 0
	err := SendChunked(context.Background(), items, func([]*runtimeapi.PodSandbox) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("failing send: err %v after %d calls, want the send's error after 1", err, calls)
	}
}
