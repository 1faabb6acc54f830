package openenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/aephost/aep/gen/msg"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// backend is the aep session behind one OpenEnv WebSocket connection or
// one stateless HTTP call: an ordinary session of the host, opened with
// [server.Host.NewSession] like any transport's (the pending pool, the
// handshake with its throttle and tenant, budgets, audit, trajectories),
// and its [server.Sink]. The face sends one typed request at a time and
// waits for its reply, which usually arrives on the sending goroutine
// itself ([server.Session.ReceivePacketHere]).
type backend struct {
	s       *server.Session
	replies chan *wire.Packet
	ended   chan struct{}
	endOnce sync.Once
	onEnd   func() // called once when the session ends (not on the host's locks)
	ids     atomic.Uint64
}

// errEnded is returned when the session ended before its reply.
var errEnded = errors.New("the aep session ended")

// newBackend opens a session that waits for its handshake in the host's
// pending pool. onEnd, when set, runs on its own goroutine when the
// session ends, for whatever reason.
func (f *Face) newBackend(onEnd func(), opts ...server.SessionOption) (*backend, error) {
	b := &backend{replies: make(chan *wire.Packet, 4), ended: make(chan struct{}), onEnd: onEnd}
	s, err := f.h.NewSession(b, opts...)
	if err != nil {
		return nil, fmt.Errorf("new session: %w", err)
	}
	b.s = s
	return b, nil
}

// Transport names the sink for the by-transport session gauge.
func (*backend) Transport() string { return "openenv" }

// Send implements [server.Sink]. The face has one request in flight at a
// time and each request has one reply, so the channel never fills; a
// message nobody waits for (none is sent outside a request, spec §6) is
// dropped rather than block the host.
func (b *backend) Send(p *wire.Packet) (int, error) {
	select {
	case b.replies <- p:
	default:
	}
	return 0, nil
}

// Close implements [server.Sink]: the session ended.
func (b *backend) Close() {
	b.endOnce.Do(func() {
		close(b.ended)
		if b.onEnd != nil {
			go b.onEnd() // the kernel may hold the session's locks here
		}
	})
}

// close ends the session.
func (b *backend) close() {
	if b.s != nil {
		b.s.Close()
	}
}

// aepError is an error reply of the aep session: a spec §7 code (or
// cancelled) with its message and detail.
type aepError struct {
	code      string
	message   string
	detail    map[string]any
	retryable bool
}

func (e *aepError) Error() string { return e.code + ": " + e.message }

func (e *aepError) reason() string {
	r, _ := e.detail["reason"].(string)
	return r
}

// agentFault reports an error that is the agent's to fix in what it sent:
// a malformed request, or an action (or reset options) outside the
// environment's action space, which aep answers runtime_error with
// detail.reason "invalid_action" as the contract cannot state it.
func (e *aepError) agentFault() bool {
	return e.code == string(wire.CodeSchemaViolation) || e.code == string(wire.CodeRuntimeError) && e.reason() == "invalid_action"
}

func fromMsg(m *msg.Error) *aepError {
	d, _ := m.Detail.(map[string]any)
	return &aepError{code: m.Code, message: m.Message, detail: d, retryable: m.Retryable}
}

// do sends one request and returns its reply message, or its error reply
// as an *aepError. ctx bounds only the wait: a caller that gives up ends
// the session, which cancels the request.
func (b *backend) do(ctx context.Context, m wire.Message) (wire.Message, error) {
	id := "oe" + strconv.FormatUint(b.ids.Add(1), 10)
	b.s.ReceivePacketHere(&wire.Envelope{Type: m.MessageType(), ID: id, Proto: wire.ProtoVersion, TS: wire.Now()}, m)
	for {
		var p *wire.Packet
		select {
		case p = <-b.replies:
		default:
			select {
			case p = <-b.replies:
			case <-b.ended:
				// A reply sent just before the end is still the answer.
				select {
				case p = <-b.replies:
				default:
					return nil, errEnded
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if p.ReqID != id && p.ReqID != "" {
			continue // a reply to an earlier request that was given up
		}
		if e, ok := p.Msg.(*msg.Error); ok {
			return nil, fromMsg(e)
		}
		return p.Msg, nil
	}
}

// handshake opens the session with token (a tenant's secret picks the
// tenant, docs/DECISIONS.md, Tenants), asking for the env capability
// only. A refusal is an *aepError with the handshake's code and detail;
// a tenant without env gets capability_missing.
func (b *backend) handshake(ctx context.Context, agentID, token string, record *bool) error {
	m, err := b.do(ctx, &msg.HandshakeReq{AgentID: agentID, AgentCaps: []string{"env"}, AuthToken: token, RecordTrajectory: record})
	if err != nil {
		return err
	}
	resp, ok := m.(*msg.HandshakeResp)
	if !ok {
		return fmt.Errorf("handshake: unexpected reply %T", m)
	}
	if !resp.Ok {
		e := &aepError{code: string(wire.CodeUnauthorized), message: "the handshake was refused"}
		if resp.Error != nil {
			d, _ := resp.Error.Detail.(map[string]any)
			e = &aepError{code: resp.Error.Code, message: resp.Error.Message, detail: d, retryable: resp.Error.Retryable}
		}
		return e
	}
	if len(resp.AcceptedCaps) != 1 || !resp.AcceptedCaps[0].Enabled {
		return &aepError{code: string(wire.CodeCapabilityMissing), message: "the env capability is not enabled for this token's tenant"}
	}
	return nil
}
