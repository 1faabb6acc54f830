package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/schemas"
)

// cmdSchema prints the embedded schemas (all, or those named) to stdout as
// a stream of JSON documents, or writes them as files into --out.
func cmdSchema(args []string, stdout, stderr io.Writer) error {
	f := newFlags("schema", stderr)
	out := f.String("out", "", "write the schema files into `DIR` instead of printing them")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep schema [--out DIR] [NAME...]\n\nPrints the protocol's JSON Schemas (all, or the namespaces named, e.g. core session).\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args); err != nil {
		return err
	}
	names, err := schemaNames(f.Args())
	if err != nil {
		return err
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
	}
	for _, name := range names {
		data, err := fs.ReadFile(schemas.FS, name)
		if err != nil {
			return err
		}
		if *out == "" {
			if _, err := stdout.Write(data); err != nil {
				return err
			}
			if len(data) > 0 && data[len(data)-1] != '\n' {
				fmt.Fprintln(stdout)
			}
			continue
		}
		path := filepath.Join(*out, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "wrote", path)
	}
	return nil
}

// schemaNames resolves namespace names (with or without .json) to embedded
// files; none means all of them, in name order.
func schemaNames(want []string) ([]string, error) {
	all, err := fs.Glob(schemas.FS, "*.json")
	if err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return all, nil
	}
	have := map[string]bool{}
	for _, n := range all {
		have[n] = true
	}
	out := make([]string, 0, len(want))
	for _, w := range want {
		n := strings.TrimSuffix(w, ".json") + ".json"
		if !have[n] {
			return nil, fmt.Errorf("no schema %q; have %s", w, strings.Join(all, ", "))
		}
		out = append(out, n)
	}
	return out, nil
}
