package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeFile feeds arbitrary bytes to the decoder, directly and as a
// file read by Get: no panic; what decodes re-encodes to the same
// checkpoint; what does not is a CorruptError and is moved aside.
func FuzzDecodeFile(f *testing.F) {
	const id = "abc123"
	good, err := json.Marshal(fullCheckpoint(id))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeFile(good))
	f.Add(encodeFile([]byte(`{"version":99,"sandboxID":"abc123"}`)))
	f.Add(encodeFile([]byte(`{"sandboxID":"other"}`)))
	f.Add(encodeFile([]byte(`null`)))
	f.Add([]byte(`{"checksum":"sha256:00","data":{"sandboxID":"abc123"}}`))
	f.Add([]byte(`{"checksum":"","data":null}`))
	f.Add(good)
	f.Add([]byte(``))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, content []byte) {
		cp, err := decodeFile(content, id)
		if err == nil {
			// Accepted: encoding it again must give it back.
			data, err := json.Marshal(cp)
			if err != nil {
				t.Fatalf("a decoded checkpoint does not encode: %v", err)
			}
			again, err := decodeFile(encodeFile(data), id)
			if err != nil {
				t.Fatalf("re-encoded checkpoint does not decode: %v", err)
			}
			if !sameCheckpoint(cp, again) {
				t.Fatalf("decode(encode(x)) = %+v, want %+v", again, cp)
			}
		}

		m, merr := NewManager(t.TempDir())
		if merr != nil {
			t.Fatal(merr)
		}
		path := filepath.Join(m.Dir(), id+fileSuffix)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, gerr := m.Get(id)
		var ce *CorruptError
		switch {
		case err != nil:
			if !errors.As(gerr, &ce) {
				t.Fatalf("Get of undecodable bytes = %v, want a CorruptError", gerr)
			}
			if ce.MovedTo == "" {
				t.Fatalf("corrupt file not moved aside: %v", ce)
			}
			if _, err := m.Get(id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after move-aside = %v, want ErrNotFound", err)
			}
		case cp.Version > CurrentVersion:
			// A newer daemon's file: refused, but kept where it is.
			if gerr == nil || errors.As(gerr, &ce) {
				t.Fatalf("Get of version %d = %v, want a plain error", cp.Version, gerr)
			}
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("newer checkpoint was moved: %v", err)
			}
		default:
			if gerr != nil {
				t.Fatalf("Get = %v, but the bytes decode", gerr)
			}
			if !sameCheckpoint(got, cp) {
				t.Fatalf("Get = %+v, decodeFile = %+v", got, cp)
			}
		}
	})
}

// FuzzRoundTrip builds checkpoints from fuzzed fields: encoding then
// decoding gives the same checkpoint, and Put refuses only what it must.
func FuzzRoundTrip(f *testing.F) {
	f.Add("abc123", "web-0", "default", "uid", uint32(3), true, "tcp", int32(80), int32(8080), "127.0.0.1", "10.88.0.5", []byte(`{"cniVersion":"1.0.0"}`), int64(1700000000123456789), false)
	f.Add("x", "", "", "", uint32(0), false, "", int32(0), int32(0), "", "", []byte(nil), int64(0), true)
	f.Add("a/b", "<&>", "\u2028", "\"", uint32(1<<31), false, "sctp", int32(-1), int32(1<<30), "::1", "fd00::5", []byte(` [ 1 , 2 ] `), int64(-1), false)
	f.Fuzz(func(t *testing.T, id, name, ns, uid string, attempt uint32, hostNet bool, proto string, cport, hport int32, hostIP, ip string, result []byte, created int64, torn bool) {
		for _, s := range []string{id, name, ns, uid, proto, hostIP, ip} {
			// JSON has no way to carry invalid UTF-8; every string netshim
			// checkpoints comes from a protobuf string, which is valid.
			if !utf8.ValidString(s) {
				t.Skip()
			}
		}
		cp := &PodSandbox{
			Version: CurrentVersion, SandboxID: id, Name: name, Namespace: ns, UID: uid, Attempt: attempt,
			HostNetwork: hostNet, CreatedAt: created, NetworkTornDown: torn,
			PortMappings: []PortMapping{{Protocol: proto, ContainerPort: cport, HostPort: hport, HostIP: hostIP}},
			IPs:          []string{ip},
		}
		if json.Valid(result) {
			cp.NetworkResult = result
		}
		data, err := json.Marshal(cp)
		if err != nil {
			t.Fatalf("encoding %+v: %v", cp, err)
		}
		got, err := decodeFile(encodeFile(data), id)
		if err != nil {
			t.Fatalf("decode(encode(x)): %v", err)
		}
		if !sameCheckpoint(got, cp) {
			t.Fatalf("decode(encode(x)) = %+v, want %+v", got, cp)
		}
		if validateID(id) != nil {
			m, err := NewManager(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Put(cp); err == nil {
				t.Fatalf("Put accepted sandbox ID %q, which is no safe file name", id)
			}
			if ids, err := m.List(); err != nil || len(ids) != 0 {
				t.Fatalf("after a refused Put: %v, %v", ids, err)
			}
		}
	})
}

// sameCheckpoint compares checkpoints, the raw CNI result as JSON values:
// encoding compacts it and escapes HTML characters, which changes its
// bytes but not what it says.
func sameCheckpoint(a, b *PodSandbox) bool {
	ca, cb := *a, *b
	ca.NetworkResult, cb.NetworkResult = nil, nil
	if !reflect.DeepEqual(ca, cb) {
		return false
	}
	if len(a.NetworkResult) == 0 || len(b.NetworkResult) == 0 {
		return len(a.NetworkResult) == len(b.NetworkResult)
	}
	va, erra := jsonValue(a.NetworkResult)
	vb, errb := jsonValue(b.NetworkResult)
	return erra == nil && errb == nil && reflect.DeepEqual(va, vb)
}

func jsonValue(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
