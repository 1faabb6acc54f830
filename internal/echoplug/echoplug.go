// Package echoplug provides configurable plugins of the echo test namespace
// for the kernel's dispatch tests and benchmarks.
package echoplug

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/internal/testproto"
	"github.com/aephost/aep/server"
	"github.com/aephost/aep/wire"
)

// Plugin serves the echo namespace. Its fields choose how it behaves.
type Plugin struct {
	// Name is reported in `by` fields.
	Name string `yaml:"name"`
	// Items is what it answers to echo/list.
	Items []string `yaml:"items"`
	// Owns lists the names it answers echo/find for; others it declines.
	Owns []string `yaml:"owns"`
	// DeclineSay makes it decline echo/say.
	DeclineSay bool `yaml:"decline_say"`
	// FailSay, when set, is the error echo/say returns.
	FailSay error `yaml:"-"`

	mu    sync.Mutex
	gates map[string]chan struct{}
	// Started receives the gate name of every echo/wait that starts waiting.
	Started chan string `yaml:"-"`
	// CtxDone receives the gate name of every echo/wait that stopped
	// because its context ended, so tests can see a cancel reach the handler.
	CtxDone chan string `yaml:"-"`
	// Scopes receives the scope of every echo/wait before it returns, so a
	// test can try to emit after the reply.
	Scopes chan wire.Scope `yaml:"-"`

	running    atomic.Int32
	maxRunning atomic.Int32
}

// MaxRunning returns the most echo/wait handlers that ran at once.
func (p *Plugin) MaxRunning() int { return int(p.maxRunning.Load()) }

var _ testproto.EchoHandler = (*Plugin)(nil)

// Release lets every echo/wait with this gate finish.
func (p *Plugin) Release(gate string) {
	close(p.gate(gate))
}

func (p *Plugin) gate(name string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gates == nil {
		p.gates = map[string]chan struct{}{}
	}
	g, ok := p.gates[name]
	if !ok {
		g = make(chan struct{})
		p.gates[name] = g
	}
	return g
}

func (p *Plugin) EchoSay(ctx context.Context, s wire.Scope, req *testproto.EchoSayReq) (*testproto.EchoSayResp, error) {
	if p.DeclineSay {
		return nil, wire.ErrDecline
	}
	if p.FailSay != nil {
		return nil, p.FailSay
	}
	text := req.Text
	if req.Mode == "upper" {
		text = strings.ToUpper(text)
	}
	return &testproto.EchoSayResp{Text: text, By: p.Name}, nil
}

func (p *Plugin) EchoList(ctx context.Context, s wire.Scope, req *testproto.EchoListReq) (*testproto.EchoListResp, error) {
	return &testproto.EchoListResp{Items: append([]string{}, p.Items...)}, nil
}

func (p *Plugin) EchoFind(ctx context.Context, s wire.Scope, req *testproto.EchoFindReq) (*testproto.EchoFindResp, error) {
	for _, o := range p.Owns {
		if o == req.Name {
			return &testproto.EchoFindResp{Name: req.Name, Found: true, By: p.Name}, nil
		}
	}
	return nil, wire.ErrDecline
}

func (p *Plugin) EchoWait(ctx context.Context, s wire.Scope, req *testproto.EchoWaitReq) (*testproto.EchoWaitResp, error) {
	n := p.running.Add(1)
	defer p.running.Add(-1)
	for {
		m := p.maxRunning.Load()
		if n <= m || p.maxRunning.CompareAndSwap(m, n) {
			break
		}
	}
	if p.Scopes != nil {
		defer func() { p.Scopes <- s }()
	}
	if req.Panic != nil && *req.Panic {
		panic("echo: asked to panic")
	}
	if req.Events != nil {
		for i := 0; i < *req.Events; i++ {
			if err := s.Emit(wire.EventProgress, map[string]any{"pct": (i + 1) * 100 / *req.Events, "message": "step"}); err != nil {
				return nil, err
			}
		}
	}
	var wait <-chan struct{}
	if req.Gate != nil {
		wait = p.gate(*req.Gate)
		if p.Started != nil {
			p.Started <- *req.Gate
		}
	}
	var timer <-chan time.Time
	if req.Ms != nil {
		timer = time.After(time.Duration(*req.Ms) * time.Millisecond)
	}
	if wait == nil && timer == nil {
		return &testproto.EchoWaitResp{Waited: false}, nil
	}
	select {
	case <-wait:
	case <-timer:
	case <-ctx.Done():
		if p.CtxDone != nil && req.Gate != nil {
			p.CtxDone <- *req.Gate
		}
		return nil, ctx.Err()
	}
	return &testproto.EchoWaitResp{Waited: true}, nil
}

// Claims makes the names the plugin owns unique across plugins.
func (p *Plugin) Claims() []server.Claim {
	out := make([]server.Claim, len(p.Owns))
	for i, o := range p.Owns {
		out[i] = server.Claim{Kind: "echo-name", Name: o}
	}
	return out
}

// Module names the echo test module; it is in no default configuration.
func (*Plugin) Module() server.ModuleInfo {
	return server.ModuleInfo{ID: "test.echo", Capability: "echo", New: func() server.Plugin { return new(Plugin) }}
}
