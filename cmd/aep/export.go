package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aephost/aep/server/persist"
	"github.com/aephost/aep/server/store"
)

// cmdExport is `aep export trajectories`: the operator's export of
// recorded trajectories straight from the store, by a session's public
// handle or a fork group's id (docs/DECISIONS.md, Trajectories), the same
// lines an agent's session/trajectory/export gives. Agents export their
// own through session/trajectory/export.
func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "trajectories" {
		fmt.Fprintf(stderr, "Usage: aep export trajectories --session HANDLE|--group GROUP [--descendants] [--prefix repeat|once|none] [--format jsonl|chat] [--config FILE] [--data-dir DIR] [--out FILE]\n")
		return errUsage
	}
	f := newFlags("export trajectories", stderr)
	configPath := f.String("config", "", "YAML configuration `FILE` whose store.dsn names the store (default: SQLite in --data-dir)")
	dataDir := f.String("data-dir", "./aep-data", "the host's data `DIR`")
	handle := f.String("session", "", "the public `HANDLE` (h-…) of the session to export, as logs and audit lines name it")
	group := f.String("group", "", "export the episodes of this fork `GROUP` (g-…, session/fork/resp group) instead")
	descendants := f.Bool("descendants", false, "export the session's descendants (its forks, theirs…) too, one episode each")
	prefix := f.String("prefix", "repeat", "a fork's prefix (its ancestors' records before the fork): repeat in each episode, once, or none")
	format := f.String("format", "jsonl", "jsonl (the records, schemas/records/trajectory.json) or chat (messages with tool calls)")
	out := f.String("out", "", "write to `FILE` instead of stdout")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep export trajectories --session HANDLE|--group GROUP [flags]\n\nWrites recorded trajectories: a session's, a fork's whole episode, a fork group's episodes.\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args[1:]); err != nil {
		return err
	}
	if f.NArg() != 0 || (*handle == "") == (*group == "") {
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
	res, err := persist.ExportTrajectories(ctx, st, persist.ExportOptions{Handle: *handle, Group: *group, Descendants: *descendants, Prefix: *prefix, Format: *format}, w)
	if err != nil {
		return err
	}
	what := "session " + *handle
	if *group != "" {
		what = "group " + *group
	}
	if res.Records == 0 {
		fmt.Fprintf(stderr, "aep export: no records of %s\n", what)
	}
	if len(res.PrefixMissing) > 0 {
		// The lines say so too (prefix: missing); the operator sees it here.
		fmt.Fprintf(stderr, "aep export: prefix: missing: the prefix of %s was not recorded\n", strings.Join(res.PrefixMissing, ", "))
	}
	return nil
}
