package images

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/netshim/netshim/internal/fakedocker"
)

// progressStream writes a progress message every gap, n times, then ends
// (n < 0: one message, then nothing until the pull is cancelled: a stalled
// registry).
func progressStream(ctx context.Context, n int, gap time.Duration) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		msg := `{"status":"Downloading","progressDetail":{"current":1,"total":2},"id":"layer"}` + "\n"
		if n < 0 {
			_, _ = io.WriteString(pw, msg)
			<-ctx.Done()
			pw.CloseWithError(ctx.Err())
			return
		}
		for range n {
			select {
			case <-ctx.Done():
				pw.CloseWithError(ctx.Err())
				return
			case <-time.After(gap):
			}
			if _, err := io.WriteString(pw, msg); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

// TestPullProgressDeadline: a pull whose stream goes quiet for the
// progress deadline ends with DeadlineExceeded naming the image and the
// deadline; a pull that keeps moving runs past the deadline, however long
// it takes in all.
func TestPullProgressDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		n       int
		gap     time.Duration
		wantErr bool
	}{
		{name: "stalled", n: -1, wantErr: true},
		// 40 messages 10 ms apart: 400 ms in all, over the deadline.
		{name: "slow but moving", n: 40, gap: 10 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newTestEnv(t, func(o *Options) { o.PullProgressDeadline = deadline })
			e.docker.Do(func(s *fakedocker.State) {
				s.PullStream = func(ctx context.Context) io.ReadCloser { return progressStream(ctx, tc.n, tc.gap) }
			})
			start := time.Now()
			_, err := e.svc.PullImage(context.Background(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.example/slow:1"}})
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("PullImage of a pull that moves: %v", err)
				}
				if took := time.Since(start); took < deadline {
					t.Fatalf("the pull took %s, under the %s deadline: the test proves nothing", took, deadline)
				}
				return
			}
			if codeOf(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "registry.example/slow:1") || !strings.Contains(err.Error(), "no progress for 300ms") {
				t.Fatalf("PullImage of a stalled pull: %v; want DeadlineExceeded naming the image and the deadline", err)
			}
		})
	}
}
