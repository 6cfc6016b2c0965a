package dockerservice

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/netshim/netshim/pkg/checkpoint"
	"github.com/netshim/netshim/pkg/dockerservice/labelcodec"
	"github.com/netshim/netshim/pkg/dockerservice/podstate"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

// recoverStatusTimeout bounds the network status read of one sandbox being
// rebuilt; it runs before the daemon reports itself synced.
const recoverStatusTimeout = 10 * time.Second

// recoverCheckpoints rebuilds, once the index knows the containers, every
// sandbox whose checkpoint could not be loaded: metadata from the infra
// container's labels (with no infra container, as a pause-less sandbox
// has none, the pod's identity from its workload containers'), IPs from
// the network plugin (libcni's cached result or the pod's netns). A
// running sandbox whose IPs are found is READY again, so a damaged file
// does not cost a running pod; one without is rebuilt "pending", so it is
// reported NOTREADY and the start-up teardown releases whatever its
// network still holds. It runs before the first sync is reported, so no
// reader sees the sandbox without its checkpoint.
func (ds *DockerService) recoverCheckpoints(ctx context.Context) {
	issues := ds.pods.Issues()
	for _, id := range slices.Sorted(maps.Keys(issues)) {
		ds.recoverCheckpoint(ctx, id, issues[id])
	}
}

func (ds *DockerService) recoverCheckpoint(ctx context.Context, id string, issue podstate.Issue) {
	unlock, err := ds.pods.Lock(ctx, id)
	if err != nil {
		return
	}
	defer unlock()
	if ds.getCheckpoint(id) != nil {
		return
	}
	cp := &checkpoint.PodSandbox{Version: checkpoint.CurrentVersion, SandboxID: id, Setup: checkpoint.SetupPending}
	rec, ok := ds.store().Get(id)
	if ok && rec.Kind == store.KindSandbox {
		info := rec.SandboxInfo()
		md := info.Metadata
		cp.Name, cp.Namespace, cp.UID, cp.Attempt = md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt()
		cp.HostNetwork = info.NamespaceOptions.GetNetwork() == runtimeapi.NamespaceMode_NODE
		cp.CreatedAt = rec.CreatedAt
		// A pinned netns is named on the container too, so that its
		// teardown still has it (sandbox_netns.go).
		if path := rec.DockerLabels[labelNetNS]; path != "" {
			if _, _, owned := ds.pinnerFor(path); owned {
				cp.NetNS = path
			}
		}
		if path := rec.DockerLabels[labelUserNS]; path != "" {
			if _, _, owned := ds.pinnerFor(path); owned {
				cp.UserNS = path
			}
		}
	} else {
		cp.Name, cp.Namespace, cp.UID = podOfContainers(ds.store().ContainersOf(id))
	}
	switch {
	case cp.HostNetwork:
		cp.Setup = checkpoint.SetupReady
	case ok && rec.Running():
		sctx, cancel := context.WithTimeout(ctx, recoverStatusTimeout)
		st, err := ds.network.GetPodNetworkStatus(sctx, podRef(cp))
		cancel()
		if err == nil && len(st.IPs) > 0 {
			cp.IPs, cp.NetworkResult, cp.Setup = orderPodIPs(st.IPs), st.Result, checkpoint.SetupReady
		} else {
			klog.ErrorS(err, "Cannot find the IPs of a running sandbox whose checkpoint was lost; it is reported NOTREADY so that kubelet replaces it", "podSandboxID", id)
		}
	}
	log := []any{"podSandboxID", id, "pod", klog.KRef(cp.Namespace, cp.Name), "ready", cp.Setup == checkpoint.SetupReady, "ips", cp.IPs}
	if issue.Rewrite {
		if err := ds.pods.WriteFile(cp); err != nil {
			klog.ErrorS(err, "Failed to write the rebuilt checkpoint; keeping it in memory", log...)
		}
	}
	ds.pods.Put(cp)
	ds.checkpointChanged(id)
	klog.InfoS("Rebuilt the checkpoint of a sandbox", log...)
}

// podOfContainers is the pod a sandbox's workload containers name, for a
// sandbox rebuilt without an infra container: its checkpoint was all that
// named the pod, and kubelet finds its sandboxes by pod to stop and remove
// them. netshim sets these labels on every container it creates (an
// image's labels cannot shadow them), so any container will do; the first
// by ID, for a stable answer. The pod's attempt is on none of them.
func podOfContainers(ctrs []*store.Record) (name, namespace, uid string) {
	slices.SortFunc(ctrs, func(a, b *store.Record) int { return strings.Compare(a.ID, b.ID) })
	for _, c := range ctrs {
		l := c.DockerLabels
		if l[labelcodec.LabelPodName] != "" && l[labelcodec.LabelPodNamespace] != "" && l[labelcodec.LabelPodUID] != "" {
			return l[labelcodec.LabelPodName], l[labelcodec.LabelPodNamespace], l[labelcodec.LabelPodUID]
		}
	}
	return "", "", ""
}

// checkpointIssuesMessage summarises the checkpoints that could not be
// loaded, for Status: "" when there are none.
func (ds *DockerService) checkpointIssuesMessage() string {
	issues := ds.pods.Issues()
	if len(issues) == 0 {
		return ""
	}
	const shown = 3
	ids := slices.Sorted(maps.Keys(issues))
	parts := make([]string, 0, shown+1)
	for _, id := range ids[:min(shown, len(ids))] {
		parts = append(parts, issues[id].Err)
	}
	if len(ids) > shown {
		parts = append(parts, fmt.Sprintf("and %d more", len(ids)-shown))
	}
	return fmt.Sprintf("%d sandbox checkpoint(s) could not be loaded at start-up and were rebuilt from the containers and the CNI cache (the sandboxes are NOTREADY where their IPs could not be found): %s",
		len(ids), strings.Join(parts, "; "))
}
