package podstate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netshim/netshim/pkg/checkpoint"
)

// newStore is a store whose checkpoint files are in a test directory.
func newStore(t *testing.T) (*Store, *checkpoint.Manager) {
	t.Helper()
	disk, err := checkpoint.NewManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return New(disk), disk
}

func cp(id string) *checkpoint.PodSandbox {
	return &checkpoint.PodSandbox{Version: checkpoint.CurrentVersion, SandboxID: id, Name: "pod-" + id}
}

func TestChangesBumpTheGenerationReadsDoNot(t *testing.T) {
	s, _ := newStore(t)
	s.Put(cp("a"))
	s.SetIssue("b", Issue{Err: "corrupt"})
	tests := []struct {
		name   string
		op     func()
		bumped bool
	}{
		{"Put", func() { s.Put(cp("c")) }, true},
		{"Replace of a present sandbox", func() { s.Replace(cp("a")) }, true},
		{"Replace of a removed sandbox", func() { s.Replace(cp("gone")) }, false},
		{"Delete", func() { s.Delete("c") }, true},
		{"SetIssue", func() { s.SetIssue("d", Issue{Err: "unreadable"}) }, true},
		{"SetUnpinned with a new set", func() { s.SetUnpinned(map[string]bool{"a": true}) }, true},
		{"SetUnpinned with the same set", func() { s.SetUnpinned(map[string]bool{"a": true}) }, false},
		{"SetUnpinned emptied", func() { s.SetUnpinned(nil) }, true},
		{"Get", func() { s.Get("a") }, false},
		{"All", func() { s.All() }, false},
		{"Select", func() { s.Select(func(*checkpoint.PodSandbox) bool { return true }) }, false},
		{"IDs", func() { s.IDs() }, false},
		{"KnownIDs", func() { s.KnownIDs() }, false},
		{"Issues", func() { s.Issues() }, false},
		{"Reserve", func() {
			if release, ok := s.Reserve("pod_ns_uid_0"); ok {
				release()
			}
		}, false},
	}
	for _, tt := range tests {
		before := s.Generation()
		tt.op()
		if bumped := s.Generation() != before; bumped != tt.bumped {
			t.Errorf("%s: generation bumped %v, want %v", tt.name, bumped, tt.bumped)
		}
	}
}

func TestReplaceNeverBringsBackARemovedSandbox(t *testing.T) {
	s, _ := newStore(t)
	s.Put(cp("a"))
	updated := *s.Get("a")
	updated.NetworkTornDown = true
	if !s.Replace(&updated) {
		t.Fatal("Replace of a present sandbox reported false")
	}
	if got := s.Get("a"); got == nil || !got.NetworkTornDown {
		t.Fatalf("after Replace: %+v, want the updated record", got)
	}
	s.Delete("a")
	if s.Replace(&updated) {
		t.Error("Replace after Delete reported true")
	}
	if got := s.Get("a"); got != nil {
		t.Errorf("Replace after Delete brought the sandbox back: %+v", got)
	}
}

func TestDeleteForgetsTheIssueToo(t *testing.T) {
	s, _ := newStore(t)
	s.Put(cp("a"))
	s.SetIssue("b", Issue{Err: "corrupt", Rewrite: true})
	if got, want := s.KnownIDs(), map[string]bool{"a": true, "b": true}; !maps.Equal(got, want) {
		t.Errorf("KnownIDs = %v, want %v", got, want)
	}
	if got := s.IDs(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("IDs = %v, want [a] (an issue has no checkpoint)", got)
	}
	issues := s.Issues()
	issues["c"] = Issue{Err: "caller's copy"}
	if got := s.Issues(); len(got) != 1 || !got["b"].Rewrite {
		t.Errorf("Issues = %v, want only b's, unchanged by the caller's copy", got)
	}
	s.Delete("b")
	if got := s.Issues(); len(got) != 0 {
		t.Errorf("Issues after Delete = %v, want none", got)
	}
}

func TestSelectAndAll(t *testing.T) {
	s, _ := newStore(t)
	for _, id := range []string{"a", "b", "c"} {
		c := cp(id)
		if id != "b" {
			c.Pauseless = &checkpoint.Pauseless{}
		}
		s.Put(c)
	}
	var got []string
	for _, c := range s.Select(func(c *checkpoint.PodSandbox) bool { return c.Pauseless != nil }) {
		got = append(got, c.SandboxID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("Select = %v, want [a c]", got)
	}
	if n := len(s.All()); n != 3 || s.Len() != 3 {
		t.Errorf("All has %d, Len %d; want 3", n, s.Len())
	}
}

func TestReserveRefusesASecondCreationOfTheName(t *testing.T) {
	s, _ := newStore(t)
	release, ok := s.Reserve("web_default_uid_0")
	if !ok {
		t.Fatal("first Reserve refused")
	}
	if _, ok := s.Reserve("web_default_uid_0"); ok {
		t.Error("second Reserve of a name in flight accepted")
	}
	if _, ok := s.Reserve("web_default_uid_1"); !ok {
		t.Error("Reserve of another name refused")
	}
	release()
	if _, ok := s.Reserve("web_default_uid_0"); !ok {
		t.Error("Reserve after release refused")
	}
}

func TestSetUnpinnedKeepsItsOwnCopy(t *testing.T) {
	s, _ := newStore(t)
	gone := map[string]bool{"a": true}
	if !s.SetUnpinned(gone) || !s.HasUnpinned() {
		t.Fatal("first SetUnpinned not recorded")
	}
	gone["b"] = true // the caller's map, changed afterwards
	if !s.SetUnpinned(map[string]bool{"a": true, "b": true}) {
		t.Error("a set grown by b reported unchanged: the store kept the caller's map")
	}
}

func TestLifecycleLockIsPerSandbox(t *testing.T) {
	s, _ := newStore(t)
	unlock, err := s.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Lock(context.Background(), "b")
	if err != nil {
		t.Fatalf("another sandbox's lock waited: %v", err)
	}
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second Lock of a held sandbox: %v, want the context's deadline", err)
	}
	unlock()
	again, err := s.Lock(context.Background(), "a")
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	again()
}

// The race detector checks that every path holds the store's lock.
func TestConcurrentUse(t *testing.T) {
	s, _ := newStore(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprintf("%d-%d", w, i%10)
				s.Put(cp(id))
				s.Replace(cp(id))
				s.Select(func(c *checkpoint.PodSandbox) bool { return c.Pauseless != nil })
				s.KnownIDs()
				s.SetUnpinned(map[string]bool{id: true})
				if release, ok := s.Reserve(id); ok {
					release()
				}
				s.Delete(id)
			}
		}()
	}
	wg.Wait()
	if n := s.Len(); n != 0 {
		t.Errorf("%d sandboxes left after every one was deleted", n)
	}
}

func TestSaveAndRemoveKeepDiskAndMirrorTogether(t *testing.T) {
	s, disk := newStore(t)
	before := s.Generation()
	if err := s.Save(cp("a")); err != nil {
		t.Fatal(err)
	}
	if got, err := disk.Get("a"); err != nil || got.Name != "pod-a" {
		t.Fatalf("file after Save: %+v, %v", got, err)
	}
	if s.Get("a") == nil || s.Generation() == before {
		t.Fatal("Save did not reach the mirror or its generation")
	}
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	if ids, _ := disk.List(); len(ids) != 0 || s.Get("a") != nil {
		t.Fatalf("after Remove: files %v, mirror %+v", ids, s.Get("a"))
	}
	// A file that cannot be written leaves the mirror as it was.
	bad := cp("b/../../escape")
	if err := s.Save(bad); err == nil || !strings.Contains(err.Error(), "writing checkpoint of sandbox") {
		t.Fatalf("Save of an ID the disk refuses: %v", err)
	}
	if s.Len() != 0 {
		t.Errorf("a Save that failed on disk reached the mirror: %v", s.IDs())
	}
}

func TestUpdateIsCopyOnWrite(t *testing.T) {
	s, disk := newStore(t)
	if got, err := s.Update("none", func(*checkpoint.PodSandbox) { t.Error("fn called for a sandbox with no checkpoint") }); got != nil || err != nil {
		t.Fatalf("Update of no checkpoint = %+v, %v; want nil, nil", got, err)
	}
	if err := s.Save(cp("a")); err != nil {
		t.Fatal(err)
	}
	old := s.Get("a")
	before := s.Generation()
	got, err := s.Update("a", func(c *checkpoint.PodSandbox) { c.Setup = checkpoint.SetupReady })
	if err != nil || got == nil || got.Setup != checkpoint.SetupReady {
		t.Fatalf("Update = %+v, %v", got, err)
	}
	if old.Setup == checkpoint.SetupReady {
		t.Error("Update changed the checkpoint a reader holds")
	}
	if s.Get("a") != got || s.Generation() == before {
		t.Error("the updated checkpoint is not the mirror's, or the generation did not move")
	}
	if f, err := disk.Get("a"); err != nil || f.Setup != checkpoint.SetupReady {
		t.Errorf("file after Update: %+v, %v", f, err)
	}
	// A file that cannot be written: the mirror keeps the old one, the
	// caller gets the changed copy and the error.
	s.Put(cp("b/../../escape"))
	kept := s.Get("b/../../escape")
	got, err = s.Update("b/../../escape", func(c *checkpoint.PodSandbox) { c.Name = "changed" })
	if err == nil || got == nil || got.Name != "changed" || s.Get("b/../../escape") != kept {
		t.Errorf("Update with a failing write = %+v, %v; mirror %+v", got, err, s.Get("b/../../escape"))
	}
}

func TestWriteFileLeavesTheMirror(t *testing.T) {
	s, disk := newStore(t)
	if err := s.WriteFile(cp("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := disk.Get("a"); err != nil {
		t.Fatalf("file after WriteFile: %v", err)
	}
	if s.Get("a") != nil {
		t.Error("WriteFile reached the mirror")
	}
}

func TestLoadSkipsWhatItCannotReadAndSaysWhy(t *testing.T) {
	dir := t.TempDir()
	disk, err := checkpoint.NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"good1", "good2"} {
		if err := disk.Put(cp(id)); err != nil {
			t.Fatal(err)
		}
	}
	// A corrupt file: the manager moves it aside, so the rebuilt
	// checkpoint may be written in its place.
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(disk)
	if err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if got := s.IDs(); !slices.Equal(got, []string{"good1", "good2"}) {
		t.Errorf("loaded %v, want [good1 good2]", got)
	}
	issues := s.Issues()
	if is, ok := issues["bad"]; !ok || !is.Rewrite || !strings.Contains(is.Err, "corrupt") {
		t.Errorf("issues = %+v, want bad's, corrupt, to be rewritten", issues)
	}
	if !s.KnownIDs()["bad"] {
		t.Error("a sandbox whose checkpoint failed to load is not known: GC could free what it holds")
	}
}

func TestLoadFailsOnlyWhenTheDirectoryCannotBeListed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	disk, err := checkpoint.NewManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // a file where the directory was
		t.Fatal(err)
	}
	if err := New(disk).Load(); err == nil || !strings.Contains(err.Error(), "listing checkpoints") {
		t.Errorf("Load of an unlistable directory: %v, want an error", err)
	}
}

func TestNoIssuesCostNoAllocation(t *testing.T) {
	s, _ := newStore(t)
	if got := testing.AllocsPerRun(100, func() { _ = s.Issues() }); got != 0 {
		t.Errorf("Issues with none allocates %v times: Status calls it on every poll", got)
	}
}
