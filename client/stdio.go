package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/aephost/aep/wire"
)

// maxHostLine bounds one line read from a host, so a broken host cannot make
// the client buffer without limit.
const maxHostLine = 64 << 20

// StdioConn is a LineConn over the stdin and stdout of a child process that
// serves one session as NDJSON, normally `aep serve --stdio` (docs/DECISIONS.md,
// Transports).
type StdioConn struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	wmu   sync.Mutex

	lines chan []byte
	rerr  error // set before lines is closed
	exit  chan struct{}
	// closing is closed by Close, after which unread lines are dropped.
	closing chan struct{}
	werr    error // the process's exit status, set before exit is closed

	closeOnce sync.Once
	closeErr  error
}

// SpawnStdio starts cmd and speaks to it over its stdin and stdout. cmd's
// Stdin and Stdout must be unset; its Stderr is left as the caller set it
// (nil discards the host's logs).
func SpawnStdio(cmd *exec.Cmd) (*StdioConn, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdio: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("stdio: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("stdio: start %s: %w", cmd.Path, err)
	}
	c := &StdioConn{cmd: cmd, stdin: stdin, lines: make(chan []byte, 64), exit: make(chan struct{}), closing: make(chan struct{})}
	go c.read(stdout)
	return c, nil
}

// read delivers the host's lines until its stdout ends, then reaps the
// process (Wait must follow the last read of the pipe).
func (c *StdioConn) read(stdout io.Reader) {
	br := bufio.NewReaderSize(stdout, 64<<10)
	var err error
	for {
		var line []byte
		line, err = readHostLine(br)
		if err != nil {
			break
		}
		select {
		case c.lines <- line:
		case <-c.closing:
			// Nobody reads any more; keep draining so the host can exit.
		}
	}
	c.rerr = err
	close(c.lines)
	// Keep draining so the host never blocks on a full pipe while exiting.
	_, _ = io.Copy(io.Discard, stdout)
	c.werr = c.cmd.Wait()
	close(c.exit)
}

func readHostLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxHostLine {
			return nil, fmt.Errorf("stdio: host sent a line over %d bytes", maxHostLine)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		default:
			return nil, err
		}
	}
}

// WriteLine sends one line to the host's stdin.
func (c *StdioConn) WriteLine(ctx context.Context, line []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	buf := make([]byte, 0, len(line)+1)
	buf = append(append(buf, line...), '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.stdin.Write(buf); err != nil {
		return fmt.Errorf("stdio: write: %w", err)
	}
	return nil
}

// ReadLine returns the next line the host wrote; io.EOF once its stdout ended.
func (c *StdioConn) ReadLine(ctx context.Context) ([]byte, error) {
	select {
	case line, ok := <-c.lines:
		if !ok {
			return nil, c.rerr
		}
		return line, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close closes the host's stdin, which ends its session after the requests
// in flight are answered, and waits up to five seconds for the process to
// exit before killing it. It returns the process's exit error, if any.
func (c *StdioConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.closing)
		c.wmu.Lock()
		_ = c.stdin.Close()
		c.wmu.Unlock()
		t := time.NewTimer(5 * time.Second)
		defer t.Stop()
		select {
		case <-c.exit:
			c.closeErr = c.werr
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.exit
			c.closeErr = fmt.Errorf("stdio: host did not exit after its input closed; killed")
		}
	})
	return c.closeErr
}

// Exited is closed when the host process has exited.
func (c *StdioConn) Exited() <-chan struct{} { return c.exit }

// Stdio starts `path serve --stdio args...` and returns a client on it. The
// host's logs go to the caller's stderr writer (nil discards them). Call
// Handshake next; Close ends the session and the process.
func Stdio(path string, stderr io.Writer, reg *wire.Registry, args ...string) (*Client, error) {
	cmd := exec.Command(path, append([]string{"serve", "--stdio"}, args...)...)
	cmd.Stderr = stderr
	conn, err := SpawnStdio(cmd)
	if err != nil {
		return nil, err
	}
	return New(Lines(conn, reg)), nil
}
