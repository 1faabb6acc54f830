package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Error is a protocol error: it becomes an `error` message (spec §2.3) on the
// wire. Err is the cause, kept for logs and errors.Is; it never reaches the wire.
type Error struct {
	Code       Code
	Message    string
	Detail     any
	Capability string
	Err        error
	// Internal marks an error whose cause is not meant for the agent: the
	// kernel logs Err under a correlation id and sends only a generic
	// message carrying that id (see [AsError]).
	Internal bool
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether retrying can succeed: the retryable table
// (schemas/errors/retryable.json) by the error's code and detail.reason,
// spec §7's per-code value where the table lists no reason.
func (e *Error) Retryable() bool { return retryable(e.Code, ReasonOf(e.Detail)) }

// ReasonOf returns the detail.reason of an error's detail, "" when it has none.
func ReasonOf(detail any) string {
	switch d := detail.(type) {
	case map[string]any:
		r, _ := d["reason"].(string)
		return r
	case map[string]string:
		return d["reason"]
	}
	return ""
}

// Errorf builds an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FieldError reports a schema violation at one field; the decoder and the
// generated validators return it so the error message names the field.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return "field " + Clip(e.Field) + ": " + e.Reason }

// Sentinel causes. Handlers wrap these with %w; AsError maps them to codes.
var (
	// ErrDecline is returned by a broadcast handler that leaves the request
	// to other plugins (docs/DECISIONS.md, Dispatch).
	ErrDecline = errors.New("declined")
	// ErrNotInFlight is returned by Scope.Emit after the reply was sent.
	ErrNotInFlight = errors.New("request is no longer in flight")
	// ErrTimeout marks an operation that ran out of time.
	ErrTimeout = errors.New("timed out")
	// ErrInvalid marks input that violates a message's contract: a rule
	// of its shape, stated by schemas/ (or, where no static schema can
	// state it, by the schema's description), never a condition of state.
	ErrInvalid = errors.New("invalid input")
	// ErrNotFound marks a reference to something that does not exist for
	// the session: never issued, another session's or tenant's, or gone.
	// Each of these gets the same reply (docs/DECISIONS.md, No existence
	// oracle), so a plugin wraps it with the same text for all of them.
	ErrNotFound = errors.New("not found")
	// ErrDenied marks an operation refused by policy or scope.
	ErrDenied = errors.New("denied")
	// ErrOutOfMemory marks a sandbox that hit its memory limit.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrSandboxCrash marks a sandboxed process killed by a signal.
	ErrSandboxCrash = errors.New("sandbox crashed")
	// ErrCancelled marks a request stopped by `cancel`.
	ErrCancelled = errors.New("cancelled")
	// ErrOverloaded marks a request refused because the session's admission
	// queue is full.
	ErrOverloaded = errors.New("overloaded")
)

// Public marks err's text as written for the agent: [AsError] answers it
// runtime_error with err's message. Any other error that is not a protocol
// error, a field error or one of the sentinels below reaches the wire only
// as a generic message, since its text may hold a path, a DSN or a
// library's internals.
func Public(err error) error { return Reason("", err) }

// Publicf is [Public] of fmt.Errorf(format, args...).
func Publicf(format string, args ...any) error { return Public(fmt.Errorf(format, args...)) }

// Reason is [Public] with a stable detail.reason (snake_case) that says to
// a program what went wrong, and keys the retryable table.
func Reason(reason string, err error) error {
	if err == nil {
		return nil
	}
	return &publicError{err: err, reason: reason}
}

type publicError struct {
	err    error
	reason string
}

func (e *publicError) Error() string { return e.err.Error() }
func (e *publicError) Unwrap() error { return e.err }

// AsError maps any error to the protocol error that answers it. This is the
// one place where causes become wire codes. Sentinels mark text a plugin
// wrote for the agent: ErrInvalid (schema_violation: the request breaks a
// rule of its own shape), ErrNotFound (runtime_error with detail.reason
// "not_found": the request names something that does not exist for the
// session, a condition of state, which no schema can see), ErrDenied
// (runtime_error with detail.reason "denied"), and [Public].
func AsError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	var fe *FieldError
	var pe *publicError
	switch {
	case errors.As(err, &fe):
		return &Error{Code: CodeSchemaViolation, Message: fe.Error(), Detail: map[string]any{"field": cut(fe.Field, MaxEcho)}, Err: err}
	case errors.Is(err, ErrCancelled):
		return &Error{Code: CodeCancelled, Message: "request cancelled", Err: err}
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return limitError(CodeTimeout, err)
	case errors.Is(err, ErrOutOfMemory):
		return limitError(CodeOutOfMemory, err)
	case errors.Is(err, ErrSandboxCrash):
		return limitError(CodeSandboxCrash, err)
	case errors.Is(err, ErrInvalid):
		return &Error{Code: CodeSchemaViolation, Message: Text(err), Err: err}
	case errors.Is(err, ErrOverloaded):
		return &Error{Code: CodeRuntimeError, Message: "session overloaded", Detail: map[string]any{"reason": "overloaded"}, Err: err}
	case errors.Is(err, ErrNotFound):
		return &Error{Code: CodeRuntimeError, Message: Text(err), Detail: map[string]any{"reason": "not_found"}, Err: err}
	case errors.Is(err, ErrDenied):
		return &Error{Code: CodeRuntimeError, Message: Text(err), Detail: map[string]any{"reason": "denied"}, Err: err}
	case errors.As(err, &pe):
		e := &Error{Code: CodeRuntimeError, Message: err.Error(), Err: err}
		if pe.reason != "" {
			e.Detail = map[string]any{"reason": pe.reason}
		}
		return e
	}
	return &Error{Code: CodeRuntimeError, Message: "internal error", Err: err, Internal: true}
}

// limitTexts are the fixed messages of the limit codes, for an error whose
// own text was not meant for the agent.
var limitTexts = map[Code]string{
	CodeTimeout:      "timed out",
	CodeOutOfMemory:  "out of memory",
	CodeSandboxCrash: "the sandbox crashed",
}

// limitError answers an error of a limit (timeout, out of memory, a
// crash) with its code. Its text reaches the agent only when a plugin
// marked it [Public] (the sandbox's outcomes, the kernel's own deadlines):
// a backend's text, which may quote a DSN or a host path, is Internal — the
// agent gets the code's fixed message and the log gets the text under a
// correlation id.
func limitError(code Code, err error) *Error {
	var pe *publicError
	if errors.As(err, &pe) {
		e := &Error{Code: code, Message: err.Error(), Err: err}
		if pe.reason != "" {
			e.Detail = map[string]any{"reason": pe.reason}
		}
		return e
	}
	return &Error{Code: code, Message: limitTexts[code], Err: err, Internal: true}
}

// Text is err's message for a reader: without the words of the ErrInvalid
// sentinel it wraps, which a schema_violation code (or a failed tool
// result) already says ("unknown proc_id: invalid input" reads "unknown
// proc_id").
func Text(err error) string {
	m := err.Error()
	var sentinel error
	switch {
	case errors.Is(err, ErrInvalid):
		sentinel = ErrInvalid
	case errors.Is(err, ErrNotFound):
		sentinel = ErrNotFound
	case errors.Is(err, ErrDenied):
		sentinel = ErrDenied
	default:
		return m
	}
	inv := sentinel.Error()
	if t := strings.TrimSuffix(strings.TrimPrefix(m, inv+": "), ": "+inv); t != "" {
		m = strings.Replace(t, ": "+inv+": ", ": ", 1)
	}
	return m
}

// Nest prefixes the field of a FieldError with the path of the value that
// holds it; other errors pass through.
func Nest(prefix string, err error) error {
	var fe *FieldError
	if !errors.As(err, &fe) {
		return err
	}
	sep := "."
	if strings.HasPrefix(fe.Field, "[") {
		sep = ""
	}
	return &FieldError{Field: prefix + sep + fe.Field, Reason: fe.Reason}
}
