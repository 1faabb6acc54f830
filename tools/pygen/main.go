// Command pygen writes the Python SDK's wire models and typed request
// methods (sdk/python/aep/_models.py, sdk/python/aep/_methods.py) from the
// contract bundle gen/contract/aep.schema.json, so a change to schemas/
// reaches Python through `go generate ./...` with nothing but Go installed.
// README.md gives the mapping rules.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	bundle := flag.String("bundle", "gen/contract/aep.schema.json", "the contract bundle")
	out := flag.String("out", "sdk/python/aep", "directory of the Python package")
	flag.Parse()
	if err := run(*bundle, *out); err != nil {
		fmt.Fprintln(os.Stderr, "pygen:", err)
		os.Exit(1)
	}
}

func run(bundlePath, outDir string) error {
	data, err := os.ReadFile(bundlePath)
	if err != nil {
		return fmt.Errorf("read bundle: %w", err)
	}
	files, err := generate(data)
	if err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(outDir, name), b, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}
