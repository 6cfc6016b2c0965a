package main

import (
	"strings"
	"testing"
	"time"

	"github.com/netshim/netshim/pkg/dockerservice"
)

func TestImagePullProgressDeadlineFlag(t *testing.T) {
	opts, err := parseFlags(t)
	if err != nil || opts.pullProgressDeadline != time.Minute || dockerservice.DefaultImagePullProgressDeadline != time.Minute {
		t.Fatalf("default: %v, %v; want cri-dockerd's 1m", opts.pullProgressDeadline, err)
	}
	opts, err = parseFlags(t, "--image-pull-progress-deadline=5m")
	if err != nil || opts.pullProgressDeadline != 5*time.Minute {
		t.Fatalf("5m: %v, %v", opts.pullProgressDeadline, err)
	}
	for _, bad := range []string{"0s", "-1s"} {
		if _, err := parseFlags(t, "--image-pull-progress-deadline="+bad); err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("%s: error %v, want a refusal", bad, err)
		}
	}
}
