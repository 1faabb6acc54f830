package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
)

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

// parseModels reads go-jsonschema's output, so that aepgen uses its exact
// names rather than guessing its naming rules.
func parseModels(dir string) (map[string]*goStruct, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "*.models.gen.go"))
	fset := token.NewFileSet()
	out := map[string]*goStruct{}
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
				out[gs.Name] = gs
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
	}
	return fmt.Sprintf("%T", e)
}
