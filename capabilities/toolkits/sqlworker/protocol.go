// Package sqlworker runs the sql toolkit's SQLite engine out of the host's
// process, inside the session's sandbox (docs/DECISIONS.md, The sql
// toolkit contained): one long-lived worker per configured database, the
// host binary itself started with [Env] set, speaking length-prefixed JSON
// frames on its standard input and output. The sandbox's view (the session
// directory at /workspace, nothing of the host's store or files), its
// cgroup or rlimits and the worker's own SQLite limits bound what any
// statement can open, allocate or write; a per-call deadline, kept by the
// worker and backed by the host's kill, bounds its CPU.
//
// The worker side runs from this package's Go init function, so any binary
// that links the package (the host, a test binary) can be the worker; the
// host side is [Start].
package sqlworker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aephost/aep/capabilities/toolkits/sqlrun"
)

// Env carries the worker's [Config]; the worker removes it from its
// environment before it opens anything.
const Env = "AEP_SQL_WORKER"

// Config is what the host tells a worker at start.
type Config struct {
	// Path is the database file as the worker sees it.
	Path string `json:"path"`
	// ReadOnly opens it read-only (mode=ro: a missing file is an error).
	ReadOnly bool `json:"read_only,omitempty"`
	// MaxValueBytes bounds any string or blob a statement makes
	// (SQLITE_LIMIT_LENGTH) and a statement's text.
	MaxValueBytes int `json:"max_value_bytes"`
}

// Ops of a [Request].
const (
	OpQuery      = "query"
	OpTables     = "tables"
	OpDescribe   = "describe"
	OpCheckpoint = "checkpoint"
)

// Request is one call of the host.
type Request struct {
	Op       string          `json:"op"`
	Query    *sqlrun.QueryIn `json:"query,omitempty"`
	Table    string          `json:"table,omitempty"`
	MaxRows  int             `json:"max_rows,omitempty"`
	MaxBytes int             `json:"max_bytes,omitempty"`
	// TimeoutMS is the call's deadline: the worker interrupts the
	// statement when it passes.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// Error kinds a [Response] may carry beside its text.
const (
	KindTimeout = "timeout" // the statement was interrupted at its deadline
	KindMemory  = "memory"  // SQLite could not allocate (the sandbox's memory bound)
	KindOpen    = "open"    // the worker could not open its database
)

// Response is the worker's answer to one request (or, first of all, to
// its start: an empty response once the database is open).
type Response struct {
	Query    *sqlrun.QueryOut    `json:"query,omitempty"`
	Tables   *sqlrun.TablesOut   `json:"tables,omitempty"`
	Describe *sqlrun.DescribeOut `json:"describe,omitempty"`
	Error    string              `json:"error,omitempty"`
	Kind     string              `json:"kind,omitempty"`
}

// Err is the response's error, nil when it succeeded.
func (r *Response) Err() error {
	if r.Error == "" {
		return nil
	}
	return &Error{Kind: r.Kind, Text: r.Error}
}

// Error is a failure the worker reported.
type Error struct {
	Kind string
	Text string
}

func (e *Error) Error() string { return e.Text }

// ErrFrameTooLarge is the cause of a frame past the reader's bound.
var ErrFrameTooLarge = errors.New("sql worker frame too large")

// writeFrame writes v as one frame: a 4-byte big-endian length, then JSON.
func writeFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(b)), uint32(len(b)))
	_, err = w.Write(append(buf, b...))
	return err
}

// readFrame reads one frame of at most max bytes into v; numbers decode as
// json.Number, so an int64 of a row passes through exactly.
func readFrame(r *bufio.Reader, max int, v any) error {
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(head[:])
	if int64(n) > int64(max) {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLarge, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}
