package client

import (
	"context"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// LineConn is a connection that carries NDJSON lines: the in-process JSON
// pipe, stdio, or HTTP with SSE.
type LineConn interface {
	WriteLine(ctx context.Context, line []byte) error
	ReadLine(ctx context.Context) ([]byte, error)
	Close() error
}

// Lines adapts a LineConn to a Transport, encoding and decoding JSON with
// reg (msg.Registry() when nil).
func Lines(conn LineConn, reg *wire.Registry) Transport {
	if reg == nil {
		reg = msg.Registry()
	}
	return &lineTransport{conn: conn, reg: reg}
}

type lineTransport struct {
	conn LineConn
	reg  *wire.Registry
}

func (t *lineTransport) Send(ctx context.Context, env *wire.Envelope, m wire.Message) error {
	line, err := wire.Encode(env, m)
	if err != nil {
		return err
	}
	return t.conn.WriteLine(ctx, line)
}

func (t *lineTransport) Recv(ctx context.Context) (*wire.Packet, error) {
	line, err := t.conn.ReadLine(ctx)
	if err != nil {
		return nil, err
	}
	return DecodeHostLine(t.reg, line)
}

func (t *lineTransport) Close() error { return t.conn.Close() }

// Codec selects how messages cross the in-process transport.
type Codec int

const (
	// JSON encodes every message as an NDJSON line, exercising the real decoder.
	JSON Codec = iota
	// Direct passes typed values, still validated (for RL step loops).
	Direct
)

// InProcess connects to h in process. reg decodes replies of the JSON codec
// (msg.Registry() when nil).
func InProcess(h *server.Host, codec Codec, reg *wire.Registry) (*Client, error) {
	switch codec {
	case Direct:
		p, err := h.ConnectDirect(256)
		if err != nil {
			return nil, err
		}
		return New(p), nil
	default:
		p, err := h.ConnectLines(256)
		if err != nil {
			return nil, err
		}
		if reg == nil {
			reg = h.Registry()
		}
		return New(Lines(p, reg)), nil
	}
}
