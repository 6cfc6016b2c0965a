package main

import (
	"fmt"

	"google.golang.org/protobuf/proto"
)

// rawAnswer receives an RPC's answer as its wire bytes, left undecoded, so
// that a latency can be taken without the client's decoding in it.
type rawAnswer []byte

// rawCodec marshals requests as protobuf and keeps answers as bytes. Its
// name is "proto", so the server sees an ordinary protobuf call.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("rawCodec: cannot marshal %T", v)
	}
	return proto.Marshal(m)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*rawAnswer)
	if !ok {
		return fmt.Errorf("rawCodec: cannot unmarshal into %T", v)
	}
	*r = append((*r)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
