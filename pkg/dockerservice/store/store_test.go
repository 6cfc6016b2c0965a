package store

import (
	"fmt"
	"sync"
	"testing"
)

func sandbox(id string) *Record { return &Record{ID: id, Kind: KindSandbox, State: StateRunning} }

func container(id, sb string) *Record {
	return &Record{ID: id, Kind: KindContainer, SandboxID: sb, State: StateCreated}
}

func TestPutGetListAndIndexBySandbox(t *testing.T) {
	s := New()
	s.Put(sandbox("sb1"))
	s.Put(container("c1", "sb1"))
	s.Put(container("c2", "sb1"))
	s.Put(container("c3", "sb2"))
	if got := len(s.List(KindSandbox)); got != 1 {
		t.Errorf("sandboxes = %d", got)
	}
	if got := len(s.List(KindContainer)); got != 3 {
		t.Errorf("containers = %d", got)
	}
	if got := len(s.ContainersOf("sb1")); got != 2 {
		t.Errorf("containers of sb1 = %d", got)
	}
	s.Delete("c1")
	s.Delete("c2")
	if got := len(s.ContainersOf("sb1")); got != 0 {
		t.Errorf("containers of sb1 after delete = %d", got)
	}
	if _, ok := s.bySandbox["sb1"]; ok {
		t.Error("empty per-sandbox index entry kept")
	}
}

func TestUpdateStoresACopy(t *testing.T) {
	s := New()
	s.Put(&Record{ID: "a", Kind: KindSandbox, State: StateRunning, DockerLabels: map[string]string{"k": "v"}})
	before, _ := s.Get("a")
	if !s.Update("a", func(r *Record) { r.State = StateExited; r.DockerLabels["k"] = "changed" }) {
		t.Fatal("update of existing record reported missing")
	}
	after, _ := s.Get("a")
	if before.State != StateRunning || before.DockerLabels["k"] != "v" {
		t.Error("update modified the record a reader holds")
	}
	if after.State != StateExited || after.DockerLabels["k"] != "changed" {
		t.Errorf("update lost: %+v", after)
	}
	if s.Update("missing", func(*Record) {}) {
		t.Error("update of missing record reported success")
	}
}

func TestResolvePrefix(t *testing.T) {
	s := New()
	s.Put(sandbox("abc123"))
	s.Put(sandbox("abd456"))
	if r, err := s.Resolve("abc"); err != nil || r == nil || r.ID != "abc123" {
		t.Errorf("unique prefix: %v %v", r, err)
	}
	if _, err := s.Resolve("ab"); err == nil {
		t.Error("ambiguous prefix accepted")
	}
	if r, err := s.Resolve("zz"); r != nil || err != nil {
		t.Errorf("no match: %v %v", r, err)
	}
}

func TestReplaceKeepsRacingWrites(t *testing.T) {
	s := New()
	s.Put(sandbox("stale"))  // gone from Docker: the listing drops it
	s.Put(sandbox("keep"))   // still there
	s.Put(sandbox("doomed")) // deleted while the listing runs
	since := s.Generation()

	// Writes racing a listing that started at `since`:
	s.Put(sandbox("new")) // created after the listing began
	s.Delete("doomed")    // removed after the listing saw it
	s.Update("keep", func(r *Record) { r.State = StateExited })

	listed := []*Record{sandbox("keep"), sandbox("doomed"), sandbox("other")}
	s.Replace(listed, since)

	if _, ok := s.Get("stale"); ok {
		t.Error("record missing from the listing was kept")
	}
	if _, ok := s.Get("new"); !ok {
		t.Error("record written after the listing began was dropped")
	}
	if _, ok := s.Get("doomed"); ok {
		t.Error("record deleted after the listing began came back")
	}
	if r, _ := s.Get("keep"); r.State != StateExited {
		t.Error("newer update overwritten by an older listing")
	}
	if _, ok := s.Get("other"); !ok {
		t.Error("listed record not added")
	}
	// A later listing clears the tombstone's effect.
	s.Replace([]*Record{sandbox("doomed")}, s.Generation())
	if _, ok := s.Get("doomed"); !ok {
		t.Error("tombstone outlived a newer listing")
	}
}

func TestConcurrentAccess(t *testing.T) {
	s := New()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				s.Put(container(id, "sb"))
				s.Update(id, func(r *Record) { r.State = StateRunning })
				s.List(KindContainer)
				s.ContainersOf("sb")
				s.Delete(id)
			}
		}()
	}
	wg.Wait()
	if s.Len() != 0 {
		t.Errorf("%d records left", s.Len())
	}
}

func TestApplyRefusesWhatWasDeletedSince(t *testing.T) {
	s := New()
	s.Put(container("c1", "sb1"))
	since := s.Generation()
	s.Delete("c1")
	if got := s.Apply("c1", since, func(*Record) *Record { return container("c1", "sb1") }); got != nil {
		t.Errorf("record deleted after since came back: %+v", got)
	}
	if _, ok := s.Get("c1"); ok {
		t.Error("deleted record stored")
	}
	// Deleted before since: a later inspect may store it again.
	since = s.Generation()
	if got := s.Apply("c1", since, func(cur *Record) *Record {
		if cur != nil {
			t.Errorf("current = %+v, want nil", cur)
		}
		return container("c1", "sb1")
	}); got == nil || got.ID != "c1" {
		t.Errorf("Apply = %+v", got)
	}
	// fn keeping the current record changes nothing.
	before := s.Generation()
	if got := s.Apply("c1", since, func(cur *Record) *Record { return nil }); got == nil || s.Generation() != before {
		t.Errorf("keep: %+v, generation %d -> %d", got, before, s.Generation())
	}
}

func TestOnChangeSeesEveryWrite(t *testing.T) {
	s := New()
	var got []string
	s.OnChange(func(id string) {
		// Called once the store holds the change, under its lock.
		if !s.mu.TryRLock() {
			got = append(got, id)
			return
		}
		s.mu.RUnlock()
		t.Errorf("OnChange(%s) called without the store's lock", id)
	})
	expect := func(step string, want ...string) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: changes %v, want %v", step, got, want)
		}
		got = nil
	}
	s.Put(sandbox("sb"))
	s.Put(container("c1", "sb"))
	expect("put", "sb", "c1")
	s.Update("c1", func(r *Record) { r.State = StateRunning })
	s.Update("missing", func(*Record) {})
	expect("update", "c1")
	s.Apply("c2", s.Generation(), func(*Record) *Record { return container("c2", "sb") })
	s.Apply("c2", s.Generation(), func(*Record) *Record { return nil })
	expect("apply", "c2")
	s.Delete("c2")
	s.Delete("never")
	expect("delete", "c2")
	since := s.Generation()
	s.Replace([]*Record{sandbox("sb"), container("c3", "sb")}, since)
	expect("replace", "sb", "c3", "c1")
}

// Every change moves the generation, which cached answers are keyed by:
// also a listing that only drops records (the last ones, say, removed
// while the events stream was down), which stores none.
func TestEveryChangeMovesTheGeneration(t *testing.T) {
	s := New()
	s.Put(sandbox("a"))
	s.Put(sandbox("b"))
	for _, step := range []struct {
		name   string
		change func()
	}{
		{"update", func() { s.Update("a", func(r *Record) { r.State = StateExited }) }},
		{"delete", func() { s.Delete("b") }},
		{"listing that drops the last record", func() { s.Replace(nil, s.Generation()) }},
		{"put", func() { s.Put(sandbox("c")) }},
	} {
		before := s.Generation()
		step.change()
		if s.Generation() == before {
			t.Errorf("%s: generation still %d", step.name, before)
		}
	}
	if s.Len() != 1 {
		t.Errorf("%d records, want 1 (c)", s.Len())
	}
}

func TestReplaceKeepsLocalRecords(t *testing.T) {
	s := New()
	local := sandbox("pauseless")
	local.Local = true
	s.Put(local)
	s.Put(sandbox("gone"))
	s.Replace(nil, s.Generation())
	if _, ok := s.Get("pauseless"); !ok {
		t.Error("a Docker listing dropped a record that is not a Docker container")
	}
	if _, ok := s.Get("gone"); ok {
		t.Error("a container missing from the listing was kept")
	}
	s.Delete("pauseless")
	if _, ok := s.Get("pauseless"); ok {
		t.Error("Delete left a local record")
	}
}
