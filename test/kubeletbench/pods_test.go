package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteAndRemoveManifests(t *testing.T) {
	dir := t.TempDir()
	paths, err := writeManifests(dir, "ns1", "img:1", 3)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"kb-000.json", "kb-001.json", "kb-002.json"}; !slices.Equal(names, want) {
		t.Fatalf("dir holds %v, want %v (no temp files)", names, want)
	}
	var pod struct {
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Containers []struct {
				Image, ImagePullPolicy string
				Command                []string
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "kb-001.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers
	if pod.Metadata.Name != "kb-001" || pod.Metadata.Namespace != "ns1" || len(c) != 1 ||
		c[0].Image != "img:1" || c[0].ImagePullPolicy != "Never" || !slices.Equal(c[0].Command, []string{"sh", "-c", sleeper}) {
		t.Errorf("manifest = %s", data)
	}
	if err := removeManifests(append(paths, filepath.Join(dir, "never-there.json"))); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

func TestChangedDuring(t *testing.T) {
	before := podView{runningIDs: map[string]uint32{"aaaaaaaaaaaaaaaa": 0, "bbbb": 0, "cccc": 1}}
	after := podView{runningIDs: map[string]uint32{"aaaaaaaaaaaaaaaa": 0, "cccc": 2, "dddd": 0}}
	got := changedDuring(before, after)
	want := []string{"container bbbb no longer running", "container cccc attempt 1 -> 2", "container dddd started during the hold"}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %q, want %q", got, want)
	}
	if got := changedDuring(after, after); len(got) != 0 {
		t.Errorf("no change: %q", got)
	}
}
