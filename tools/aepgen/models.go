package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
)

// The Go models come from go-jsonschema, which reads only the structure of
// a schema: types, properties, required, items, map values, enums, defaults
// and its own type hints. It is given a copy of each message file holding
// just those keywords, because it interprets others on its own (an anyOf
// becomes throwaway map types), and every rule is aepgen's to enforce.
var modelKeywords = map[string]bool{
	"$schema": true, "$id": true, "title": true, "description": true, "$defs": true,
	"$ref": true, "type": true, "properties": true, "required": true, "items": true,
	"additionalProperties": true, "enum": true, "default": true, "goJSONSchema": true,
}

// runModels runs go-jsonschema over the structural copy of every message
// file, one output per file.
func runModels(g *generator, outDir, pkg string) error {
	tmp, err := os.MkdirTemp("", "aepgen-models-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := []string{"tool", "go-jsonschema", "--only-models", "--tags", "json",
		"--capitalization", "ID", "--capitalization", "URL", "--capitalization", "TTL",
		"--capitalization", "JSON", "--capitalization", "SQL", "--capitalization", "MCP",
		"-p", pkg}
	var paths []string
	for _, f := range g.files {
		if f.Namespace == "" {
			continue
		}
		doc, err := g.structural(f)
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(doc, "", "  ")
		if err != nil {
			return err
		}
		p := filepath.Join(tmp, f.Base+".json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
		args = append(args, "--schema-output="+f.ID+"="+filepath.Join(outDir, f.Base+".models.gen.go"))
		paths = append(paths, p)
	}
	if len(paths) == 0 {
		return nil
	}
	cmd := exec.Command("go", append(args, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go-jsonschema: %w: %s", err, stderr.String())
	}
	return nil
}

// structural returns the copy of a file that go-jsonschema reads.
func (g *generator) structural(f *schemaFile) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range f.Raw {
		if !modelKeywords[k] {
			continue
		}
		if k != "$defs" {
			out[k] = v
			continue
		}
		defs := map[string]any{}
		for name, d := range v.(map[string]any) {
			dm := d.(map[string]any)
			if dm["type"] != "object" {
				continue // scalar defs are inlined where they are used
			}
			s, err := g.structuralNode(f, dm)
			if err != nil {
				return nil, err
			}
			defs[name] = s
		}
		out[k] = defs
	}
	return out, nil
}

func (g *generator) structuralNode(f *schemaFile, n map[string]any) (map[string]any, error) {
	if h, ok := n["goJSONSchema"].(map[string]any); ok && h["type"] == "any" {
		// go-jsonschema makes an untyped property interface{}.
		out := map[string]any{}
		if d, ok := n["description"]; ok {
			out["description"] = d
		}
		return out, nil
	}
	if ref, ok := n["$ref"].(string); ok {
		d, err := g.resolve(f, &schemaNode{Ref: ref})
		if err != nil {
			return nil, err
		}
		if d.node.typeName() != "object" {
			// A scalar def (a catalogue such as core.json's Code) is
			// inlined as its type, so the field keeps a plain Go type.
			out := map[string]any{"type": d.node.Type}
			if desc, ok := n["description"]; ok {
				out["description"] = desc
			}
			return out, nil
		}
	}
	out := map[string]any{}
	for k, v := range n {
		if !modelKeywords[k] {
			continue
		}
		switch k {
		case "properties":
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				s, err := g.structuralNode(f, p.(map[string]any))
				if err != nil {
					return nil, err
				}
				props[name] = s
			}
			out[k] = props
		case "items":
			s, err := g.structuralNode(f, v.(map[string]any))
			if err != nil {
				return nil, err
			}
			out[k] = s
		case "additionalProperties":
			sub, ok := v.(map[string]any)
			if !ok {
				continue // true: open, which is go-jsonschema's default anyway
			}
			s, err := g.structuralNode(f, sub)
			if err != nil {
				return nil, err
			}
			out[k] = s
		default:
			out[k] = v
		}
	}
	return out, nil
}

// goField is one struct field that go-jsonschema generated.
type goField struct {
	Name    string // Go name
	JSON    string // json name
	Type    string // Go type expression as written
	Pointer bool
}

// goStruct maps json names to fields of one generated struct.
type goStruct struct {
	Name   string
	Fields map[string]*goField
}

// goModels is what go-jsonschema generated: structs, and the other named
// types (enums, nullable pointers, maps) with their underlying type.
type goModels struct {
	structs map[string]*goStruct
	named   map[string]string
}

// parseModels reads go-jsonschema's output, so that aepgen uses its exact
// names rather than guessing its naming rules.
func parseModels(dir string) (*goModels, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.models.gen.go"))
	fset := token.NewFileSet()
	out := &goModels{structs: map[string]*goStruct{}, named: map[string]string{}}
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					out.named[ts.Name.Name] = exprString(ts.Type)
					continue
				}
				gs := &goStruct{Name: ts.Name.Name, Fields: map[string]*goField{}}
				for _, fl := range st.Fields.List {
					if fl.Tag == nil || len(fl.Names) == 0 {
						continue
					}
					tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`")).Get("json")
					name, _, _ := strings.Cut(tag, ",")
					_, ptr := fl.Type.(*ast.StarExpr)
					gs.Fields[name] = &goField{Name: fl.Names[0].Name, JSON: name, Type: exprString(fl.Type), Pointer: ptr}
				}
				out.structs[gs.Name] = gs
			}
		}
	}
	return out, nil
}

func exprString(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return "*" + exprString(t.X)
	case *ast.ArrayType:
		return "[]" + exprString(t.Elt)
	case *ast.MapType:
		return "map[" + exprString(t.Key) + "]" + exprString(t.Value)
	case *ast.SelectorExpr:
		return exprString(t.X) + "." + t.Sel.Name
	case *ast.InterfaceType:
		return "interface{}"
	case *ast.StructType:
		return "struct{}"
	}
	return fmt.Sprintf("%T", e)
}
