package cni

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestLedgerRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "attachments")
	l := newLedger(dir)
	eth0 := ledgerEntry{Network: "testnet", IfName: "eth0", Config: json.RawMessage(`{"name":"testnet"}`),
		CniArgs: [][2]string{{"K8S_POD_NAME", "p"}}, CapabilityArgs: map[string]any{"portMappings": []any{map[string]any{"hostPort": float64(80)}}}}
	lo := ledgerEntry{Network: loNetworkName, IfName: "lo", Config: json.RawMessage(`{"name":"cni-loopback"}`)}

	if got, err := l.get("abc"); err != nil || got != nil {
		t.Fatalf("get before record = %v, %v", got, err)
	}
	if err := l.record("abc", eth0, lo); err != nil {
		t.Fatal(err)
	}
	// A second record of the same attachment replaces it.
	eth0b := eth0
	eth0b.Config = json.RawMessage(`{"name":"testnet","v":2}`)
	if err := l.record("abc", eth0b); err != nil {
		t.Fatal(err)
	}
	got, err := l.get("abc")
	if err != nil {
		t.Fatal(err)
	}
	if want := []ledgerEntry{lo, eth0b}; !reflect.DeepEqual(got, want) {
		t.Fatalf("get = %+v, want %+v", got, want)
	}
	fi, err := os.Stat(filepath.Join(dir, "abc.json"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("ledger file: %v, mode %v; want 0600", err, fi)
	}

	if err := l.record("def", lo); err != nil {
		t.Fatal(err)
	}
	all, err := l.all()
	if err != nil || len(all) != 2 || len(all["abc"]) != 2 || len(all["def"]) != 1 {
		t.Fatalf("all = %+v, %v", all, err)
	}

	// Removing one attachment keeps the other; removing the last one
	// removes the file; removing again is not an error.
	if err := l.remove("abc", "testnet", "eth0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.get("abc"); !reflect.DeepEqual(got, []ledgerEntry{lo}) {
		t.Errorf("after remove: %+v", got)
	}
	for range 2 {
		if err := l.remove("abc", loNetworkName, "lo"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "abc.json")); !os.IsNotExist(err) {
		t.Errorf("empty record's file still there: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file left: %s", e.Name())
		}
	}
}

func TestLedgerRefusesUnsafeIDs(t *testing.T) {
	parent := t.TempDir()
	l := newLedger(filepath.Join(parent, "attachments"))
	e := ledgerEntry{Network: "n", IfName: "eth0", Config: json.RawMessage(`{}`)}
	for _, id := range []string{"", "../escape", "a/b", ".hidden", "..", strings.Repeat("a", 200)} {
		if err := l.record(id, e); err == nil {
			t.Errorf("record(%q) succeeded", id)
		}
		if got, err := l.get(id); err != nil || got != nil {
			t.Errorf("get(%q) = %v, %v; want nothing", id, got, err)
		}
	}
	if _, err := os.Stat(filepath.Join(parent, "escape.json")); !os.IsNotExist(err) {
		t.Errorf("a file was written outside the ledger: %v", err)
	}
	if err := l.record("x", ledgerEntry{Network: "n", IfName: "eth0", Config: json.RawMessage(`not json`)}); err == nil {
		t.Error("record of a non-JSON config succeeded")
	}
}

func TestLedgerCorruptFile(t *testing.T) {
	dir := t.TempDir()
	l := newLedger(dir)
	if err := l.record("good", ledgerEntry{Network: "n", IfName: "eth0", Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"version":1,"containerID":"someoneelse","attachments":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := l.all()
	if err == nil || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "other.json") {
		t.Errorf("all() error = %v, want both bad files named", err)
	}
	if len(all) != 1 || all["good"] == nil {
		t.Errorf("all() = %+v, want the good record", all)
	}
	if _, err := l.get("bad"); err == nil {
		t.Error("get of a corrupt record succeeded")
	}
}

func TestNilLedgerIsDisabled(t *testing.T) {
	var l *ledger = newLedger("")
	if l != nil {
		t.Fatal("newLedger(\"\") is not nil")
	}
	if err := l.record("a", ledgerEntry{}); err != nil {
		t.Error(err)
	}
	if got, err := l.get("a"); got != nil || err != nil {
		t.Errorf("get = %v, %v", got, err)
	}
	if err := l.remove("a", "n", "eth0"); err != nil {
		t.Error(err)
	}
	if all, err := l.all(); len(all) != 0 || err != nil {
		t.Errorf("all = %v, %v", all, err)
	}
}
