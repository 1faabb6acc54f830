// Command aepgen generates the message layer of aep from schemas/: it runs
// go-jsonschema for the models, then writes, per schema file, the type
// registry entries, validators, default constructors, the namespace's handler
// interface and typed client methods; beside them the wire error codes and
// the protocol reference. See README.md for the mapping rules.
package main

import (
	"flag"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	var (
		schemaDir = flag.String("schemas", "schemas", "directory of JSON Schema files")
		outDir    = flag.String("out", "gen/msg", "output directory of the Go package")
		pkg       = flag.String("pkg", "msg", "Go package name")
		codesOut  = flag.String("codes", "", "where to write the error catalogue of x-aep-codes (package wire); empty: none")
		envOut    = flag.String("envelope", "", "where to write the envelope constants of envelope.json (package wire); empty: none")
		wirePkg   = flag.String("wirepkg", "wire", "package of the -codes and -envelope files")
		docsOut   = flag.String("docs", "", "where to write the protocol reference; empty: none")
	)
	flag.Parse()
	o := options{schemaDir: *schemaDir, outDir: *outDir, pkg: *pkg, codesOut: *codesOut, envOut: *envOut, wirePkg: *wirePkg, docsOut: *docsOut}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "aepgen:", err)
		os.Exit(1)
	}
}

type options struct {
	schemaDir, outDir, pkg    string
	codesOut, envOut, wirePkg string
	docsOut                   string
}

func run(o options) error {
	files, err := loadSchemas(o.schemaDir)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no schema files in %s", o.schemaDir)
	}
	if err := os.MkdirAll(o.outDir, 0o755); err != nil {
		return err
	}
	g := &generator{files: files, pkg: o.pkg}
	if err := g.index(); err != nil {
		return err
	}
	// Every output is built before any file is written, so a failed
	// generation leaves the previous files in place.
	out := map[string][]byte{}
	if o.codesOut != "" {
		src, err := g.codes(o.wirePkg)
		if err != nil {
			return err
		}
		out[o.codesOut] = src
	}
	if o.envOut != "" {
		src, err := g.envelope(o.wirePkg)
		if err != nil {
			return err
		}
		out[o.envOut] = src
	}
	modelDir, err := os.MkdirTemp("", "aepgen-out-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(modelDir)
	if err := runModels(g, modelDir, o.pkg); err != nil {
		return err
	}
	if g.models, err = parseModels(modelDir); err != nil {
		return err
	}
	if err := g.checkModels(); err != nil {
		return err
	}
	models, _ := filepath.Glob(filepath.Join(modelDir, "*.models.gen.go"))
	for _, m := range models {
		b, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		out[filepath.Join(o.outDir, filepath.Base(m))] = b
	}
	for _, f := range files {
		if f.Namespace == "" {
			continue
		}
		src, err := g.file(f)
		if err != nil {
			return err
		}
		out[filepath.Join(o.outDir, f.Base+".gen.go")] = src
	}
	out[filepath.Join(o.outDir, "package.gen.go")] = g.packageFile(g.usesPtr)
	if o.docsOut != "" {
		doc, err := g.docs()
		if err != nil {
			return err
		}
		out[o.docsOut] = doc
	}
	formatted := map[string][]byte{}
	for _, p := range sortedKeys(out) {
		if !strings.HasSuffix(p, ".go") {
			formatted[p] = out[p]
			continue
		}
		src, err := format.Source(out[p])
		if err != nil {
			return fmt.Errorf("format %s: %w\n%s", p, err, numbered(out[p]))
		}
		formatted[p] = src
	}
	// Remove stale outputs so a deleted schema leaves nothing behind.
	old, _ := filepath.Glob(filepath.Join(o.outDir, "*.gen.go"))
	for _, f := range old {
		if _, keep := formatted[f]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for _, p := range sortedKeys(formatted) {
		if err := os.WriteFile(p, formatted[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func numbered(src []byte) string {
	var b strings.Builder
	for i, l := range strings.Split(string(src), "\n") {
		fmt.Fprintf(&b, "%4d %s\n", i+1, l)
	}
	return b.String()
}
