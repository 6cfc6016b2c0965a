package crilog

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/klog/v2"
)

// message is one Docker log message: what Docker recorded on one stream at
// one instant. Docker logs a line as one message ending in '\n', and cuts a
// line longer than its buffer (16 KiB) into several messages, only the last
// of which ends in '\n'; all of them carry the time of the first.
type message struct {
	stream  Stream
	ts      time.Time
	content []byte // without the newline; valid until the decoder's next call
	full    bool   // the message ends a line
}

// decoder yields the messages of a Docker log stream requested with
// Timestamps, in which each message starts with "<RFC3339Nano time> ".
type decoder interface {
	// next returns the next message, or io.EOF where the stream ends
	// cleanly.
	next() (message, error)
}

// Longest timestamp Docker writes: fixed nine-digit fraction, with a zone
// offset. In UTC (its usual case) the "Z" form is five bytes shorter.
const (
	maxStampLen = len("2006-01-02T15:04:05.000000000-07:00")
	utcStampLen = len("2006-01-02T15:04:05.000000000Z")
)

// endLine marks m as a full line whose content is line without its '\n'. A
// '\r' before the '\n' (every line of a TTY container, as the terminal
// turns "\n" into "\r\n") is dropped, as containerd does, so that CRI
// readers get the line as the program wrote it.
func endLine(m *message, line []byte) {
	m.content = bytes.TrimSuffix(line, []byte{'\r'})
	m.full = true
}

// Multiplexed stream (containers without a TTY): Docker sends frames, each
// an 8-byte header followed by a payload. The header is the stream id (1
// stdout, 2 stderr, 3 an error of Docker itself), three zero bytes and the
// payload length, big-endian. Docker writes one message per frame.
const (
	frameHeaderSize = 8
	frameStdout     = 1
	frameStderr     = 2
	frameSystemErr  = 3
)

// maxFrameSize bounds the payload of one frame, so that a corrupt header
// cannot make us allocate gigabytes. Docker's messages are at most 16 KiB
// plus the timestamp for the json-file and local drivers.
const maxFrameSize = 1 << 20

type muxDecoder struct {
	r       io.Reader
	header  [frameHeaderSize]byte
	payload []byte // the current frame's payload, reused
	rest    []byte // the part of payload not decoded yet
	stream  Stream // the current frame's stream
}

func newMuxDecoder(r io.Reader) *muxDecoder { return &muxDecoder{r: r} }

func (d *muxDecoder) next() (message, error) {
	for len(d.rest) == 0 {
		if err := d.readFrame(); err != nil {
			return message{}, err
		}
	}
	// A payload normally holds exactly one message, but nothing is lost if a
	// sender packs several: take them off one at a time.
	m, rest, err := cutMessage(d.rest)
	if err != nil {
		return message{}, err
	}
	m.stream, d.rest = d.stream, rest
	return m, nil
}

// readFrame reads the next frame into d.rest, which stays empty for a frame
// that carries no log data.
func (d *muxDecoder) readFrame() error {
	if _, err := io.ReadFull(d.r, d.header[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return fmt.Errorf("crilog: truncated log frame header: %w", err)
		}
		return err // io.EOF here is the clean end of the stream
	}
	size := binary.BigEndian.Uint32(d.header[4:])
	if size > maxFrameSize {
		return fmt.Errorf("crilog: log frame of %d bytes exceeds %d", size, maxFrameSize)
	}
	if cap(d.payload) < int(size) {
		d.payload = make([]byte, size)
	}
	d.payload = d.payload[:size]
	if _, err := io.ReadFull(d.r, d.payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("crilog: truncated log frame: %w", err)
	}

	switch d.header[0] {
	case frameStdout:
		d.stream = Stdout
	case frameStderr:
		d.stream = Stderr
	case frameSystemErr:
		// Docker reports trouble reading its own log (a corrupt entry, say)
		// and carries on: note it, it is not the container's output.
		klog.ErrorS(errors.New(string(bytes.TrimSpace(d.payload))), "Docker reported an error in a container log stream")
		d.rest = nil
		return nil
	default:
		return fmt.Errorf("crilog: log frame for unknown stream %d", d.header[0])
	}
	d.rest = d.payload
	return nil
}

// cutMessage takes the first message off b: a timestamp, a space, and the
// content up to the first newline or, if there is none, to the end of b.
func cutMessage(b []byte) (message, []byte, error) {
	sp := bytes.IndexByte(b[:min(len(b), maxStampLen+1)], ' ')
	if sp < 0 {
		return message{}, nil, errors.New("crilog: log message without timestamp")
	}
	ts, err := time.Parse(timeFormat, string(b[:sp]))
	if err != nil {
		return message{}, nil, fmt.Errorf("crilog: log message timestamp: %w", err)
	}
	m := message{ts: ts}
	b = b[sp+1:]
	if nl := bytes.IndexByte(b, '\n'); nl >= 0 {
		endLine(&m, b[:nl])
		return m, b[nl+1:], nil
	}
	m.content = b
	return m, nil, nil
}

// rawChunk is where Docker cuts a long line into messages: its log copier
// buffers 16 KiB of a line. A variable so that tests can lower it.
var rawChunk = 16 * 1024

// rawDecoder reads the raw stream of a TTY container: everything is stdout
// and nothing marks where one message ends and the next begins. A message
// ending in '\n' ends at the newline. One cut by Docker has no newline; it
// ends after rawChunk bytes of content, which is why the reader's buffer is
// exactly rawChunk bytes: ReadSlice then stops at that very byte. What
// follows is then a new message (a timestamp) or, for a log driver with a
// larger buffer, more of the same one.
type rawDecoder struct {
	r         *bufio.Reader
	ts        time.Time // of the message being read
	needStamp bool      // the next bytes start a new message
	afterCut  bool      // the last message ended at rawChunk without newline
}

func newRawDecoder(r io.Reader) *rawDecoder {
	return &rawDecoder{r: bufio.NewReaderSize(r, rawChunk), needStamp: true}
}

func (d *rawDecoder) next() (message, error) {
	// Decided only now, not when the cut message was returned: peeking
	// may wait for more data, and the cut message should not wait for it.
	if d.afterCut {
		d.afterCut = false
		d.needStamp = d.stampAhead()
	}

	if d.needStamp {
		stamp, err := d.r.ReadSlice(' ')
		if err != nil {
			if err == io.EOF && len(stamp) == 0 {
				return message{}, io.EOF
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return message{}, fmt.Errorf("crilog: log message timestamp: %w", err)
		}
		ts, err := time.Parse(timeFormat, string(stamp[:len(stamp)-1]))
		if err != nil {
			return message{}, fmt.Errorf("crilog: log message timestamp: %w", err)
		}
		d.ts, d.needStamp = ts, false
	}

	m := message{stream: Stdout, ts: d.ts}
	line, err := d.r.ReadSlice('\n')
	switch {
	case err == nil:
		endLine(&m, line[:len(line)-1])
		d.needStamp = true
	case errors.Is(err, bufio.ErrBufferFull):
		m.content = line
		d.afterCut = true
	case err == io.EOF:
		// The stream ended inside a message: the container's last line had
		// no newline. Nothing after a bare timestamp is nothing to write.
		if len(line) == 0 {
			return message{}, io.EOF
		}
		m.content = line
	default:
		return message{}, err
	}
	return m, nil
}

// stampAhead reports whether the stream continues with "<timestamp> ".
// Docker's timestamps have a fixed width, so the space sits at one of two
// places: after a UTC stamp, or after one with a zone offset. A message is
// longer than its stamp and space, so when one follows the peeks never wait
// for data that is not coming; only a continuation shorter than a stamp can
// make them wait, for the container's next output.
func (d *rawDecoder) stampAhead() bool {
	for _, n := range []int{utcStampLen, maxStampLen} {
		b, _ := d.r.Peek(n + 1)
		if len(b) == n+1 && b[n] == ' ' {
			if _, err := time.Parse(timeFormat, string(b[:n])); err == nil {
				return true
			}
		}
	}
	return false
}
