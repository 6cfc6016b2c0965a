package index

import (
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/netshim/netshim/internal/fakedocker"
	"github.com/netshim/netshim/pkg/dockerservice/store"
)

var _ Client = (*fakedocker.Engine)(nil)

const testLabel = "test.type"

// newFakeEngine is the shared fake engine as the index's tests use it: a
// created container's ID is "id-" and its name, so a test knows it ahead;
// creates need no image (the index pulls none); and, like dockerd, the
// engine drops an event for a subscriber whose buffer is full, which the
// index must survive.
func newFakeEngine() *fakedocker.Engine {
	f := fakedocker.New()
	f.Do(func(s *fakedocker.State) {
		s.NewID = func(name string) string { return "id-" + name }
		s.AnyImage = true
		s.LossyEvents = true
	})
	return f
}

// add makes a container of a kind ("sandbox", "container", or anything
// else for one the index does not own) behind the index's back, with no
// event.
func add(f *fakedocker.Engine, id, kind, status string) {
	f.AddContainer(fakedocker.Container{ID: id, Status: status, Labels: map[string]string{testLabel: kind}})
}

// decode is a minimal decoder: the test label gives the kind.
func decode(c container.InspectResponse) *store.Record {
	if c.ContainerJSONBase == nil || c.Config == nil {
		return nil
	}
	var kind store.Kind
	switch c.Config.Labels[testLabel] {
	case "sandbox":
		kind = store.KindSandbox
	case "container":
		kind = store.KindContainer
	default:
		return nil
	}
	r := &store.Record{ID: c.ID, Kind: kind, Name: trimSlash(c.Name), DockerLabels: c.Config.Labels}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		r.CreatedAt = t.UnixNano()
	}
	if st := c.State; st != nil {
		switch {
		case st.Running:
			r.State = store.StateRunning
		case st.Status == "created":
			r.State = store.StateCreated
		case st.Status == "exited":
			r.State = store.StateExited
		}
		r.Pid = st.Pid
		if t, err := time.Parse(time.RFC3339Nano, st.StartedAt); err == nil {
			r.StartedAt = t.UnixNano()
		}
	}
	return r
}
