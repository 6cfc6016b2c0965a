package dockerservice

import (
	"context"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubelet rejects pods asking for SupplementalGroupsPolicy Strict on a node
// whose runtime does not advertise it; Docker always merges the image's
// groups, so netshim must not.
func TestStatusAdvertisesNoSupplementalGroupsPolicy(t *testing.T) {
	e := newTestEnv(t)
	resp, err := e.ds.Status(context.Background(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetFeatures() == nil || resp.GetFeatures().GetSupplementalGroupsPolicy() {
		t.Errorf("features = %v, want supplemental_groups_policy false", resp.GetFeatures())
	}
}
