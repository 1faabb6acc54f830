package server

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aephost/aep/wire"
)

// sentReason is one detail.reason the host's source can send, with its code.
type sentReason struct {
	code, reason, where string
}

// codeConsts maps the Go names of the error codes (wire.CodeRuntimeError)
// to the codes.
func codeConsts() map[string]wire.Code {
	out := map[string]wire.Code{}
	for _, c := range wire.Codes {
		name := "Code"
		for _, part := range strings.Split(string(c), "_") {
			name += strings.ToUpper(part[:1]) + part[1:]
		}
		out[name] = c
	}
	return out
}

// sourceReasons finds every detail.reason in the module's Go source (tests
// and generated code aside): the first argument of wire.Reason (answered
// runtime_error by wire.AsError), and every "reason" key of a map literal,
// which must sit in the Detail of a wire.Error literal whose Code is a
// code constant. Anything else is an error, so no reason reaches the wire
// unseen by this test.
func sourceReasons(t *testing.T, root string) []sentReason {
	t.Helper()
	consts := codeConsts()
	var out []sentReason
	fset := token.NewFileSet()
	// Reasons named by a string constant (mcp.ReasonUnavailable): the
	// package-level string constants of each directory.
	strConsts := map[string]map[string]string{}
	skip := func(rel string) bool {
		switch rel {
		case "gen", "ent", ".git", "sdk", "node_modules":
			return true
		case "tools": // generators: their "reason" keys are schema text, not errors sent
			return true
		}
		return false
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skip(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if strConsts[dir] == nil {
								strConsts[dir] = map[string]string{}
							}
							strConsts[dir][name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if skip(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".gen.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		inWire := f.Name.Name == "wire"
		// Error literals and the map literals inside their Detail.
		owned := map[*ast.CompositeLit]string{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Reason" && len(x.Args) == 2 {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == "wire" {
						var r string
						switch a := x.Args[0].(type) {
						case *ast.BasicLit:
							r, _ = strconv.Unquote(a.Value)
						case *ast.Ident:
							v, ok := strConsts[filepath.Dir(path)][a.Name]
							if !ok {
								t.Errorf("%s: wire.Reason with a reason that is no string constant", fset.Position(x.Pos()))
								return true
							}
							r = v
						default:
							t.Errorf("%s: wire.Reason with a reason that is no literal", fset.Position(x.Pos()))
							return true
						}
						out = append(out, sentReason{string(wire.CodeRuntimeError), r, fset.Position(x.Pos()).String()})
					}
				}
			case *ast.CompositeLit:
				if !isErrorType(x.Type, inWire) {
					return true
				}
				code := ""
				var detail ast.Expr
				for _, el := range x.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					switch k := kv.Key.(*ast.Ident); {
					case k == nil:
					case k.Name == "Code":
						name := ""
						switch v := kv.Value.(type) {
						case *ast.SelectorExpr:
							name = v.Sel.Name
						case *ast.Ident:
							name = v.Name
						}
						if c, ok := consts[name]; ok {
							code = string(c)
						}
					case k.Name == "Detail":
						detail = kv.Value
					}
				}
				if m, ok := detail.(*ast.CompositeLit); ok {
					owned[m] = code
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			m, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			for _, el := range m.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, ok := kv.Key.(*ast.BasicLit)
				if !ok || key.Value != `"reason"` {
					continue
				}
				pos := fset.Position(kv.Pos()).String()
				code, isDetail := owned[m]
				lit, isLit := kv.Value.(*ast.BasicLit)
				switch {
				case !isDetail && inWire && !isLit:
					// wire.AsError copying a wire.Reason's reason: found above.
				case !isDetail || code == "":
					t.Errorf("%s: a \"reason\" outside the Detail of a wire.Error literal with a code constant; the retryable test cannot see its code", pos)
				case !isLit:
					t.Errorf("%s: a detail.reason that is no literal", pos)
				default:
					r, _ := strconv.Unquote(lit.Value)
					out = append(out, sentReason{code, r, pos})
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func isErrorType(e ast.Expr, inWire bool) bool {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && id.Name == "wire" && x.Sel.Name == "Error"
	case *ast.Ident:
		return inWire && x.Name == "Error"
	}
	return false
}

// Every detail.reason the host can send is in the retryable table
// (schemas/errors/retryable.json) under its code, and the retryable an
// error message carries on the wire is the table's: the reason's value, or
// the code's (spec §7) for errors without a reason. The table holds no
// reason the host never sends.
func TestRetryableTable(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "schemas", "errors", "retryable.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Codes map[string]struct {
			Retryable bool `json:"retryable"`
			Reasons   map[string]struct {
				Retryable bool `json:"retryable"`
			} `json:"reasons"`
		} `json:"codes"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	sent := sourceReasons(t, "..")
	if len(sent) < 15 {
		t.Fatalf("found only %d reasons in the source; the walk is broken", len(sent))
	}
	seen := map[[2]string]bool{}
	for _, s := range sent {
		seen[[2]string{s.code, s.reason}] = true
		entry, ok := table.Codes[s.code]
		if !ok {
			t.Errorf("%s: code %s is not in the table", s.where, s.code)
			continue
		}
		want, ok := entry.Reasons[s.reason]
		if !ok {
			t.Errorf("%s: %s with detail.reason %q is not in the table", s.where, s.code, s.reason)
			continue
		}
		m := errorMessage(&wire.Error{Code: wire.Code(s.code), Message: "m", Detail: map[string]any{"reason": s.reason, "limit": 1}})
		if m.Retryable != want.Retryable {
			t.Errorf("%s: %s/%s goes on the wire with retryable %v, the table says %v", s.where, s.code, s.reason, m.Retryable, want.Retryable)
		}
	}
	for code, entry := range table.Codes {
		// Without a reason, an error takes its code's value (spec §7).
		if m := errorMessage(&wire.Error{Code: wire.Code(code), Message: "m"}); m.Retryable != entry.Retryable {
			t.Errorf("%s without a reason: retryable %v on the wire, table %v", code, m.Retryable, entry.Retryable)
		}
		for r := range entry.Reasons {
			if !seen[[2]string{code, r}] {
				t.Errorf("the table lists %s/%s, which the host never sends", code, r)
			}
		}
	}
	// Conditions no retry can cure are false (spec §2.3: whether retrying can succeed).
	// retry column, are false.
	for _, r := range []string{"step_limit", "depth_limit", "not_found", "staging_root_unset", "program_not_found", "denied"} {
		if wire.AsError(&wire.Error{Code: wire.CodeRuntimeError, Detail: map[string]any{"reason": r}}).Retryable() {
			t.Errorf("runtime_error/%s is retryable", r)
		}
	}
	for _, err := range []error{wire.ErrNotFound, wire.ErrDenied, wire.ErrInvalid} {
		if wire.AsError(err).Retryable() {
			t.Errorf("%v is retryable", err)
		}
	}
}
