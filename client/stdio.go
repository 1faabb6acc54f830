package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
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
	// started is set, under wmu, once the process has been started (or
	// failed to start, startErr); it starts with the first line written.
	started  bool
	startErr error

	lines chan []byte
	rerr  error // set before lines is closed
	exit  chan struct{}
	// closing is closed by Close, after which unread lines are dropped.
	closing chan struct{}
	werr    error // the process's exit status, set before exit is closed

	closeOnce sync.Once
	closeErr  error
}

// authTokenEnv is the variable `aep serve` reads its token from when its
// configuration sets none (cmd/aep/serve.go).
const authTokenEnv = "AEP_AUTH_TOKEN"

// SpawnStdio speaks to cmd over its stdin and stdout. cmd's Stdin and
// Stdout must be unset; its Stderr is left as the caller set it (nil
// discards the host's logs).
//
// The process starts when the first line is written. When that line is the
// handshake (spec §2.4), its auth_token becomes the process's
// AEP_AUTH_TOKEN, so a spawned host whose configuration names no token
// accepts the token given in code: it replaces the one this process's
// environment may hold, but not one the caller put in cmd.Env. The token
// goes in the environment, never on the command line, where other local
// users could read it (ps). A command that cannot be found is reported
// here; any other failure to start, by the first WriteLine.
func SpawnStdio(cmd *exec.Cmd) (*StdioConn, error) {
	switch {
	case cmd.Err != nil:
		return nil, fmt.Errorf("stdio: %w", cmd.Err)
	case cmd.Stdin != nil || cmd.Stdout != nil:
		return nil, errors.New("stdio: the command's Stdin and Stdout must be unset")
	case cmd.Process != nil:
		return nil, errors.New("stdio: the command was already started")
	}
	return &StdioConn{cmd: cmd, lines: make(chan []byte, 64), exit: make(chan struct{}), closing: make(chan struct{})}, nil
}

// start starts the process, with the token of the handshake line first in
// its environment. Called with wmu held.
func (c *StdioConn) start(first []byte) error {
	if c.started {
		return c.startErr
	}
	c.started = true
	if tok, ok := handshakeToken(first); ok && !setsEnv(c.cmd.Env, authTokenEnv) {
		c.cmd.Env = withEnv(c.cmd.Env, authTokenEnv, tok)
	}
	stdin, err := c.cmd.StdinPipe()
	var stdout io.ReadCloser
	if err == nil {
		stdout, err = c.cmd.StdoutPipe()
	}
	if err == nil {
		err = c.cmd.Start() // closes the pipes it made when it fails
	}
	if err != nil {
		c.startErr = fmt.Errorf("stdio: start %s: %w", c.cmd.Path, err)
		c.stopped(c.startErr)
		return c.startErr
	}
	c.stdin = stdin
	go c.read(stdout)
	return nil
}

// stopped ends a conn whose process never ran: readers get err.
func (c *StdioConn) stopped(err error) {
	c.rerr = err
	close(c.lines)
	c.werr = err
	close(c.exit)
}

// handshakeToken returns the auth_token of line when line is a handshake.
func handshakeToken(line []byte) (string, bool) {
	var hs struct {
		Type      string  `json:"type"`
		AuthToken *string `json:"auth_token"`
	}
	if json.Unmarshal(line, &hs) != nil || hs.Type != "handshake/req" || hs.AuthToken == nil || *hs.AuthToken == "" {
		return "", false
	}
	return *hs.AuthToken, true
}

// setsEnv reports whether env has an entry for name.
func setsEnv(env []string, name string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// withEnv returns env (the current process's environment when nil, as
// exec.Cmd would use) with name set to value and no other entry for name.
func withEnv(env []string, name, value string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != name {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
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
	if err := c.start(line); err != nil {
		return err
	}
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
		if !c.started {
			// Never started: nothing to end or wait for.
			c.started = true
			c.startErr = errors.New("stdio: closed")
			c.stopped(io.EOF)
			c.wmu.Unlock()
			return
		}
		if c.stdin != nil {
			_ = c.stdin.Close()
		}
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

// Exited is closed when the host process has exited, or, when it never
// started, when the conn is closed.
func (c *StdioConn) Exited() <-chan struct{} { return c.exit }

// Stdio returns a client of `path serve --stdio args...`, started by the
// handshake with its token in the host's environment (SpawnStdio). The
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
