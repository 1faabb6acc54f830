package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
)

// cmdExport is `aep export trajectories`: the operator's export of a
// recorded trajectory straight from the store, by the session's public
// handle (docs/DECISIONS.md, Trajectories). Agents export their own through
// session/trajectory/export.
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "trajectories" {
		fmt.Fprintf(stderr, "Usage: aep export trajectories --session HANDLE [--format jsonl|chat] [--config FILE] [--data-dir DIR] [--out FILE]\n")
		return errUsage
	}
	f := newFlags("export trajectories", stderr)
	configPath := f.String("config", "", "YAML configuration `FILE` whose store.dsn names the store (default: SQLite in --data-dir)")
	dataDir := f.String("data-dir", "./aep-data", "the host's data `DIR`")
	handle := f.String("session", "", "the public `HANDLE` (h-…) of the session to export, as logs and audit lines name it")
	format := f.String("format", "jsonl", "jsonl (the records, schemas/records/trajectory.json) or chat (messages with tool calls)")
	out := f.String("out", "", "write to `FILE` instead of stdout")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep export trajectories --session HANDLE [flags]\n\nWrites a session's recorded trajectory.\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args[1:]); err != nil {
		return err
	}
	if f.NArg() != 0 || *handle == "" {
		f.Usage()
		return errUsage
	}
	if *format != "jsonl" && *format != "chat" {
		return fmt.Errorf("--format %q: want jsonl or chat", *format)
	}
	cfg, _, err := loadServeConfig(*configPath)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.Store.DSN, *dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	w := stdout
	if *out != "" {
		file, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer file.Close()
		w = file
	}
	n, err := persist.ExportTrajectories(ctx, st, *handle, *format, w)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(stderr, "aep export: no records of session %s\n", *handle)
	}
	return nil
}
