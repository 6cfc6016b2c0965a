// Package daemonjson edits the Docker engine's configuration file
// (/etc/docker/daemon.json) the way `netshim engine register` needs: it
// adds or removes one runtime under "runtimes" and leaves every other key,
// and the order of the top-level keys, as they were. Docker reads the file
// as strict JSON: a file it would refuse (comments, trailing commas, not an
// object) is refused here too, rather than rewritten into something the
// operator did not write.
package daemonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
)

// Runtime is one entry of daemon.json's "runtimes".
type Runtime struct {
	Path        string   `json:"path"`
	RuntimeArgs []string `json:"runtimeArgs,omitempty"`
}

// member is one top-level key of the file, its value's bytes as written.
type member struct {
	key   string
	value json.RawMessage
}

// document is daemon.json's top-level object, in file order.
type document []member

func parse(data []byte) (document, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return document{}, nil // an empty file is an empty configuration
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("not JSON Docker reads (%w): fix or remove it first", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("its top level is not a JSON object, which Docker requires")
	}
	var doc document
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("not JSON Docker reads (%w): fix or remove it first", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("a key that is not a string: %v", tok)
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("key %q: not JSON Docker reads (%w): fix or remove it first", key, err)
		}
		if slices.ContainsFunc(doc, func(m member) bool { return m.key == key }) {
			return nil, fmt.Errorf("key %q is there twice, which Docker refuses", key)
		}
		doc = append(doc, member{key, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("not JSON Docker reads (%w): fix or remove it first", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something follows the top-level object, which Docker refuses")
	}
	return doc, nil
}

func (d document) get(key string) (json.RawMessage, bool) {
	for _, m := range d {
		if m.key == key {
			return m.value, true
		}
	}
	return nil, false
}

func (d document) set(key string, v json.RawMessage) document {
	for i, m := range d {
		if m.key == key {
			d[i].value = v
			return d
		}
	}
	return append(d, member{key, v})
}

// bytes writes the document indented, with a final newline.
func (d document) bytes() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.key)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.value)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// runtimes reads the "runtimes" object, nil when the file has none.
func (d document) runtimes() (map[string]json.RawMessage, error) {
	raw, ok := d.get("runtimes")
	if !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil, nil
	}
	var rts map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rts); err != nil {
		return nil, fmt.Errorf("\"runtimes\" is not an object of runtimes: %w", err)
	}
	return rts, nil
}

// Register returns the file with runtime name set to rt, and whether that
// changed anything. It refuses a file Docker could not read, and one whose
// "default-runtime" is name: the runtime would then run every container
// of the node, which it is not for.
func Register(data []byte, name string, rt Runtime) ([]byte, bool, error) {
	if name == "" || rt.Path == "" {
		return nil, false, errors.New("a runtime needs a name and a path")
	}
	doc, err := parse(data)
	if err != nil {
		return nil, false, err
	}
	if raw, ok := doc.get("default-runtime"); ok {
		var def string
		if json.Unmarshal(raw, &def) == nil && def == name {
			return nil, false, fmt.Errorf("\"default-runtime\" is %q: it would run every container of the node; set it back to runc (or remove it) first", name)
		}
	}
	rts, err := doc.runtimes()
	if err != nil {
		return nil, false, err
	}
	if old, ok := rts[name]; ok {
		var cur Runtime
		if json.Unmarshal(old, &cur) == nil && cur.Path == rt.Path && slices.Equal(cur.RuntimeArgs, rt.RuntimeArgs) {
			return data, false, nil
		}
	}
	if rts == nil {
		rts = map[string]json.RawMessage{}
	}
	entry, err := json.Marshal(rt)
	if err != nil {
		return nil, false, err
	}
	rts[name] = entry
	raw, err := json.Marshal(rts)
	if err != nil {
		return nil, false, err
	}
	out, err := doc.set("runtimes", raw).bytes()
	return out, err == nil, err
}

// Unregister returns the file without runtime name, and whether it had
// it. A "runtimes" left empty stays, as {}: dockerd replaces its runtimes
// on reload only when the file sets the key, and would keep the one
// removed if the key went with it (seen with Docker 20.10).
func Unregister(data []byte, name string) ([]byte, bool, error) {
	doc, err := parse(data)
	if err != nil {
		return nil, false, err
	}
	rts, err := doc.runtimes()
	if err != nil {
		return nil, false, err
	}
	if _, ok := rts[name]; !ok {
		return data, false, nil
	}
	delete(rts, name)
	raw, err := json.Marshal(rts)
	if err != nil {
		return nil, false, err
	}
	out, err := doc.set("runtimes", raw).bytes()
	return out, err == nil, err
}

// Registered returns the runtime name's entry, if the file has one.
func Registered(data []byte, name string) (Runtime, bool, error) {
	doc, err := parse(data)
	if err != nil {
		return Runtime{}, false, err
	}
	rts, err := doc.runtimes()
	if err != nil {
		return Runtime{}, false, err
	}
	raw, ok := rts[name]
	if !ok {
		return Runtime{}, false, nil
	}
	var rt Runtime
	if err := json.Unmarshal(raw, &rt); err != nil {
		return Runtime{}, false, fmt.Errorf("runtime %q: %w", name, err)
	}
	return rt, true, nil
}

// Names returns the names of the runtimes the file registers, sorted.
func Names(data []byte) ([]string, error) {
	doc, err := parse(data)
	if err != nil {
		return nil, err
	}
	rts, err := doc.runtimes()
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(rts)), nil
}
