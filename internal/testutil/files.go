package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes each file (path → content), making its directories:
// the fake /proc and cgroup trees of the stats tests.
func WriteFiles(t testing.TB, files map[string]string) {
	t.Helper()
	for path, content := range files {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
