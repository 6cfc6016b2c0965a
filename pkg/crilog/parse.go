package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"time"
)

// Entry is one parsed line of a CRI log file.
type Entry struct {
	Time    time.Time
	Stream  Stream
	Partial bool   // tagged P: the line continues in the next entry
	Content []byte // without the newline; shares memory with the parsed line
}

// ParseLine parses one CRI log entry, with or without its newline. Like
// kubelet, it reads the tag field as ':'-separated tags and looks only at the
// first, so that entries with extra tags still parse.
func ParseLine(line []byte) (Entry, error) {
	line = bytes.TrimSuffix(line, []byte{'\n'})

	ts, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok {
		return Entry{}, errors.New("crilog: no timestamp field")
	}
	t, err := time.Parse(timeFormat, string(ts))
	if err != nil {
		return Entry{}, fmt.Errorf("crilog: bad timestamp: %w", err)
	}

	stream, rest, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Entry{}, errors.New("crilog: no stream field")
	}
	if s := Stream(stream); s != Stdout && s != Stderr {
		return Entry{}, fmt.Errorf("crilog: unknown stream %q", stream)
	}

	tags, content, ok := bytes.Cut(rest, []byte{' '})
	if !ok {
		return Entry{}, errors.New("crilog: no tag field")
	}
	tag, _, _ := bytes.Cut(tags, []byte{':'})
	var partial bool
	switch string(tag) {
	case tagFull:
	case tagPartial:
		partial = true
	default:
		return Entry{}, fmt.Errorf("crilog: unknown tag %q", tag)
	}

	return Entry{Time: t, Stream: Stream(stream), Partial: partial, Content: content}, nil
}
