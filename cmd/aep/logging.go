package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/aephost/aep/server"
)

// newLogger makes the host's logger on w (stderr: in --stdio mode stdout
// carries the protocol) in the format of the log section: slog's text
// lines by default, one JSON object per line with log.format json. The
// host wraps it in its scrubbing handler (server/secrets.go), which takes
// every secret out of a record and adds the request's id, the session's
// public handle and the trace ids before this handler formats it.
func newLogger(w io.Writer, lc server.LogConfig, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch lc.Format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log.format: %q is neither text nor json", lc.Format)
}
