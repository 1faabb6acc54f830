package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// keepDefaultedFields rewrites go-jsonschema's json tags so that a field
// whose schema has a default is always encoded. With omitempty, an explicit
// zero (shutdown timeout 0: "do not wait") would not be written and the
// receiver's constructor would put the default back.
func keepDefaultedFields(files []*schemaFile, outDir string) error {
	defaulted := map[string]map[string]bool{} // struct name → json names
	for _, f := range files {
		for name, n := range f.Defs {
			for prop, p := range n.Properties {
				if p.Default == nil {
					continue
				}
				if defaulted[name] == nil {
					defaulted[name] = map[string]bool{}
				}
				defaulted[name][prop] = true
			}
		}
	}
	paths, _ := filepath.Glob(filepath.Join(outDir, "*.models.gen.go"))
	for _, p := range paths {
		if err := rewriteTags(p, defaulted); err != nil {
			return err
		}
	}
	return nil
}

type edit struct {
	start, end int
	text       string
}

func rewriteTags(path string, defaulted map[string]map[string]bool) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return err
	}
	var edits []edit
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || defaulted[ts.Name.Name] == nil {
			return true
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			return true
		}
		for _, fl := range st.Fields.List {
			if fl.Tag == nil {
				continue
			}
			if _, ptr := fl.Type.(*ast.StarExpr); ptr {
				continue // nil already means absent
			}
			raw, err := strconv.Unquote(fl.Tag.Value)
			if err != nil {
				continue
			}
			tag := reflect.StructTag(raw).Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if !defaulted[ts.Name.Name][name] {
				continue
			}
			fixed := strings.Replace(raw, `json:"`+tag+`"`, `json:"`+name+`"`, 1)
			edits = append(edits, edit{
				start: fset.Position(fl.Tag.Pos()).Offset,
				end:   fset.Position(fl.Tag.End()).Offset,
				text:  "`" + fixed + "`",
			})
		}
		return true
	})
	if len(edits) == 0 {
		return nil
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].start > edits[j].start })
	for _, e := range edits {
		src = append(src[:e.start], append([]byte(e.text), src[e.end:]...)...)
	}
	return os.WriteFile(path, src, 0o644)
}
