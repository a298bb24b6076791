package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestLayoutCheckListsEveryGoConstant keeps testdata/layoutcheck.c honest:
// it must list every integer constant of types.go and errors.go (GOCONST
// lines) with the value the Go source has, so the device-side comparison
// with cuda.h covers all of them.
func TestLayoutCheckListsEveryGoConstant(t *testing.T) {
	src, err := os.ReadFile("testdata/layoutcheck.c")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]int64{}
	for _, m := range regexp.MustCompile(`GOCONST\((\w+), (\w+), \w+\);`).FindAllStringSubmatch(string(src), -1) {
		v, err := strconv.ParseInt(m[2], 0, 64)
		if err != nil {
			t.Fatalf("GOCONST(%s): value %q: %v", m[1], m[2], err)
		}
		if _, dup := listed[m[1]]; dup {
			t.Errorf("GOCONST(%s) listed twice", m[1])
		}
		listed[m[1]] = v
	}

	goConsts := map[string]int64{}
	fset := token.NewFileSet()
	for _, file := range []string{"types.go", "errors.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						t.Fatalf("%s: constant %s without an explicit value", file, name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.INT {
						continue
					}
					v, err := strconv.ParseInt(lit.Value, 0, 64)
					if err != nil {
						t.Fatal(err)
					}
					goConsts[name.Name] = v
				}
			}
		}
	}
	if len(goConsts) < 50 {
		t.Fatalf("found only %d Go constants; parser broken?", len(goConsts))
	}
	for name, v := range goConsts {
		lv, ok := listed[name]
		switch {
		case !ok:
			t.Errorf("testdata/layoutcheck.c lacks GOCONST(%s, %d, <cuda.h name>)", name, v)
		case lv != v:
			t.Errorf("testdata/layoutcheck.c: GOCONST(%s) has %d, Go source %d", name, lv, v)
		}
	}
	for name := range listed {
		if _, ok := goConsts[name]; !ok {
			t.Errorf("testdata/layoutcheck.c lists %s, which is no constant in types.go/errors.go", name)
		}
	}
}
