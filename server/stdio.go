package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aephost/aep/wire"
)

// ServeStdio serves one session as NDJSON: lines from in are the agent's
// messages, and everything the host sends is written to out, one line per
// message (docs/DECISIONS.md, Transports: Stdio). Nothing else is written to out, so
// logs must go elsewhere (the CLI logs to stderr).
//
// A line longer than server.limits.max_message_bytes is discarded up to its
// newline without being buffered and answered with parse_error; the next
// line is read normally (docs/DECISIONS.md, Wire). Blank lines are skipped.
//
// ServeStdio returns when the session ends (shutdown, idle expiry, the host
// closing), when out fails, or when ctx is done, closing the session. When
// in ends, requests in flight are answered first, each within its deadline.
// A read from in that is blocked when ServeStdio returns stays blocked until
// in is closed or delivers data; the CLI exits, so this matters only to
// embedders.
func ServeStdio(ctx context.Context, h *Host, in io.Reader, out io.Writer) error {
	sink := &streamSink{w: bufio.NewWriterSize(out, 64<<10), failed: make(chan struct{})}
	s, err := h.NewSession(sink)
	if err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	h.log.Info("stdio session started", "session", s.handle)
	readDone := make(chan error, 1)
	go func() {
		readDone <- readLines(bufio.NewReaderSize(in, 64<<10), s.h.cfg.Server.Limits.MaxMessageBytes, s.ReceiveLine, s.RejectOversized)
	}()

	var readErr error
	select {
	case <-ctx.Done():
		s.Close()
		return nil
	case <-s.Done():
		return sink.error()
	case <-sink.failed:
		s.Close()
		return sink.error()
	case readErr = <-readDone:
	}
	// The agent closed its end: finish what it asked for, then end.
	if readErr != nil {
		h.log.Warn("stdio: reading input failed", "session", s.handle, "err", readErr)
	}
	// Every ReceiveLine has returned, so the state cannot change under us
	// except towards closed.
	switch sessionState(s.state.Load()) {
	case stateLive:
		s.shutdown(time.Duration(h.cfg.Server.Limits.RequestTimeout).Seconds())
	case stateNew:
		s.Close()
	}
	select {
	case <-ctx.Done():
		s.Close()
	case <-s.Done():
	case <-sink.failed:
		s.Close()
	}
	if err := sink.error(); err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("stdio: read: %w", readErr)
	}
	return nil
}

// readLines splits r into lines of at most max bytes (the newline not
// counted) and hands each non-blank one to line. A longer line is skipped to
// its newline while only being counted, so a hostile peer cannot make the
// host buffer more than max bytes, and over receives its length. It returns
// nil at the end of r.
func readLines(r *bufio.Reader, max int, line func([]byte), over func(n int)) error {
	var (
		buf      []byte
		n        int // bytes of the current line, newline included
		tooLarge bool
	)
	for {
		chunk, err := r.ReadSlice('\n')
		n += len(chunk)
		if !tooLarge {
			if len(buf)+len(chunk) > max+1 {
				tooLarge, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		switch {
		case err == nil || (errors.Is(err, io.EOF) && n > 0):
			end := n
			if err == nil {
				end-- // the newline
			}
			if tooLarge {
				over(end)
			} else if b := bytes.TrimRight(buf, "\n"); len(b) > max {
				over(end) // exactly max+1 bytes with no newline at the end of input
			} else if len(bytes.TrimSpace(b)) > 0 {
				// A fresh slice per line: the decoded message may keep
				// references into it while the request is queued.
				line(b)
			}
			buf, n, tooLarge = nil, 0, false
			if err != nil {
				return nil
			}
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}

// streamSink writes the session's messages to a byte stream, one line each,
// flushed per message so that the agent sees every reply at once.
type streamSink struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
	// closed is atomic so that Close never waits behind a write blocked on
	// an agent that stopped reading: the session must be able to end.
	closed atomic.Bool
	failed chan struct{}
}

// Transport names the sink for the by-transport session gauge.
func (*streamSink) Transport() string { return "stdio" }

func (k *streamSink) Send(p *wire.Packet) (int, error) {
	line, err := wire.Encode(&p.Envelope, p.Msg)
	if err != nil {
		return 0, err
	}
	line = append(line, '\n')
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err != nil {
		return 0, k.err
	}
	if k.closed.Load() {
		return 0, ErrSessionClosed
	}
	if _, err := k.w.Write(line); err == nil {
		err = k.w.Flush()
		if err == nil {
			return len(line) - 1, nil
		}
		k.fail(err)
	} else {
		k.fail(err)
	}
	return 0, k.err
}

// fail records the first write error; the session cannot be reached any more.
func (k *streamSink) fail(err error) {
	k.err = fmt.Errorf("stdio: write: %w", err)
	close(k.failed)
}

func (k *streamSink) error() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

func (k *streamSink) Close() { k.closed.Store(true) }
