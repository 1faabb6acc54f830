package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/aephost/aep/gen/contract"
	"github.com/aephost/aep/schemas"
)

// cmdSchema prints the contract bundle (gen/contract/aep.schema.json) by
// default: the one document a third party generates types from. Names print
// the source files of schemas/ instead (--sources all of them), --asyncapi
// the AsyncAPI document; --out writes all of it into a directory.
func cmdSchema(args []string, stdout, stderr io.Writer) error {
	f := newFlags("schema", stderr)
	out := f.String("out", "", "write the bundle, the AsyncAPI document and the source files into `DIR` instead of printing")
	sources := f.Bool("sources", false, "print every source file of schemas/ instead of the bundle")
	asyncAPI := f.Bool("asyncapi", false, "print the AsyncAPI 3.0 document instead of the bundle")
	f.Usage = func() {
		fmt.Fprintf(stderr, "Usage: aep schema [--sources | --asyncapi | --out DIR] [NAME...]\n\nPrints the protocol's contract: the JSON Schema bundle of every wire message (default),\nthe AsyncAPI document, or the source schemas (all, or the namespaces named, e.g. core session).\n\n")
		f.PrintDefaults()
	}
	if err := parse(f, args); err != nil {
		return err
	}
	switch {
	case *asyncAPI:
		_, err := stdout.Write(contract.AsyncAPI)
		return err
	case *out == "" && !*sources && f.NArg() == 0:
		_, err := stdout.Write(contract.Bundle)
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
		for name, data := range map[string][]byte{"aep.schema.json": contract.Bundle, "asyncapi.yaml": contract.AsyncAPI} {
			path := filepath.Join(*out, name)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				return err
			}
			fmt.Fprintln(stderr, "wrote", path)
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
