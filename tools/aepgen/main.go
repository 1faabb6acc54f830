// Command aepgen generates the message layer of aep from schemas/: it runs
// go-jsonschema for the models, then writes, per schema file, the type
// registry entries, validators, default constructors, the namespace's handler
// interface and typed client methods; beside them the wire error codes and
// the protocol reference. See README.md for the mapping rules.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	var (
		schemaDir = flag.String("schemas", "schemas", "directory of JSON Schema files")
		outDir    = flag.String("out", "gen/msg", "output directory of the Go package")
		pkg       = flag.String("pkg", "msg", "Go package name")
		codesOut  = flag.String("codes", "", "where to write the error-code constants (package wire); empty: none")
		docsOut   = flag.String("docs", "", "where to write the protocol reference; empty: none")
	)
	flag.Parse()
	if err := run(*schemaDir, *outDir, *pkg, *codesOut, *docsOut); err != nil {
		fmt.Fprintln(os.Stderr, "aepgen:", err)
		os.Exit(1)
	}
}

func run(schemaDir, outDir, pkg, codesOut, docsOut string) error {
	files, err := loadSchemas(schemaDir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no schema files in %s", schemaDir)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	// Remove stale outputs so a deleted schema leaves nothing behind.
	old, _ := filepath.Glob(filepath.Join(outDir, "*.gen.go"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	if err := runModels(files, outDir, pkg); err != nil {
		return err
	}
	models, err := parseModels(outDir)
	if err != nil {
		return err
	}
	g := &generator{files: files, models: models, pkg: pkg}
	if err := g.index(); err != nil {
		return err
	}
	for _, f := range files {
		if f.Namespace == "" {
			continue
		}
		src, err := g.file(f)
		if err != nil {
			return err
		}
		if err := writeGo(filepath.Join(outDir, f.Base+".gen.go"), src); err != nil {
			return err
		}
	}
	if err := writeGo(filepath.Join(outDir, "package.gen.go"), g.packageFile()); err != nil {
		return err
	}
	if codesOut != "" {
		src, err := g.codes()
		if err != nil {
			return err
		}
		if err := writeGo(codesOut, src); err != nil {
			return err
		}
	}
	if docsOut != "" {
		if err := os.WriteFile(docsOut, g.docs(), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runModels runs go-jsonschema over every schema file, one output per file.
func runModels(files []*schemaFile, outDir, pkg string) error {
	args := []string{"tool", "go-jsonschema", "--only-models", "--tags", "json",
		"--capitalization", "ID", "--capitalization", "URL", "--capitalization", "TTL",
		"--capitalization", "JSON", "--capitalization", "SQL", "--capitalization", "MCP",
		"-p", pkg}
	for _, f := range files {
		args = append(args, "--schema-output="+f.ID+"="+filepath.Join(outDir, f.Base+".models.gen.go"))
	}
	for _, f := range files {
		args = append(args, f.Path)
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go-jsonschema: %w: %s", err, stderr.String())
	}
	return nil
}

func writeGo(path string, src []byte) error {
	out, err := format.Source(src)
	if err != nil {
		return fmt.Errorf("format %s: %w\n%s", path, err, numbered(src))
	}
	return os.WriteFile(path, out, 0o644)
}

func numbered(src []byte) string {
	var b strings.Builder
	for i, l := range strings.Split(string(src), "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
