package crilog

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLineRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	w := newTestWriter(t, path)
	w.maxLine = 5
	want := []Entry{
		{Time: time.Date(2024, 1, 2, 3, 4, 5, 123456789, time.UTC), Stream: Stdout, Content: []byte("hello")},
		{Time: time.Date(2024, 1, 2, 3, 4, 5, 120000000, time.UTC), Stream: Stderr, Partial: true, Content: []byte("a b ")},
		{Time: time.Date(2024, 1, 2, 3, 4, 6, 0, time.UTC), Stream: Stdout, Content: []byte("")},
		{Time: time.Date(2024, 1, 2, 3, 4, 7, 1, time.UTC), Stream: Stderr, Content: []byte("  x  ")},
	}
	for _, e := range want {
		mustWrite(t, w, e.Stream, e.Time, string(e.Content), e.Partial)
	}

	lines := strings.SplitAfter(readFile(t, path), "\n")
	lines = lines[:len(lines)-1] // after the last newline: nothing
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d", len(lines), len(want))
	}
	for i, l := range lines {
		got, err := ParseLine([]byte(l))
		if err != nil {
			t.Fatalf("ParseLine(%q): %v", l, err)
		}
		if !got.Time.Equal(want[i].Time) || got.Stream != want[i].Stream ||
			got.Partial != want[i].Partial || string(got.Content) != string(want[i].Content) {
			t.Errorf("ParseLine(%q) = %+v, want %+v", l, got, want[i])
		}
	}
}

func TestParseLineForms(t *testing.T) {
	for _, tc := range []struct {
		line    string
		stream  Stream
		partial bool
		content string
	}{
		{"2024-01-02T03:04:05Z stdout F hi", Stdout, false, "hi"},
		{"2024-01-02T03:04:05Z stdout F hi\n", Stdout, false, "hi"},
		{"2024-01-02T03:04:05.000000000Z stderr P part\n", Stderr, true, "part"},
		{"2024-01-02T04:04:05+01:00 stdout F zoned", Stdout, false, "zoned"},
		{"2024-01-02T03:04:05Z stdout F:x:y extra tags", Stdout, false, "extra tags"},
		{"2024-01-02T03:04:05Z stdout P ", Stdout, true, ""},
	} {
		e, err := ParseLine([]byte(tc.line))
		if err != nil {
			t.Errorf("ParseLine(%q): %v", tc.line, err)
			continue
		}
		if e.Stream != tc.stream || e.Partial != tc.partial || string(e.Content) != tc.content ||
			!e.Time.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("ParseLine(%q) = %+v", tc.line, e)
		}
	}
}

func TestParseLineErrors(t *testing.T) {
	for _, line := range []string{
		"",
		"\n",
		"2024-01-02T03:04:05Z",
		"yesterday stdout F hi",
		"2024-01-02 03:04:05Z stdout F hi",
		"2024-01-02T03:04:05Z stdout",
		"2024-01-02T03:04:05Z stdin F hi",
		"2024-01-02T03:04:05Z stdout F",
		"2024-01-02T03:04:05Z stdout X hi",
		`{"log":"hi\n","stream":"stdout","time":"2024-01-02T03:04:05Z"}`,
	} {
		if e, err := ParseLine([]byte(line)); err == nil {
			t.Errorf("ParseLine(%q) = %+v, want an error", line, e)
		}
	}
}
