package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The documentation of every public package, as `go doc -all` prints it,
// is for users: it names no source file, no internal package and none of
// the package's unexported identifiers, which a user cannot see or use.
// Unexported names are looked for only when they are written in camel case
// (walkChain) or as a selector (db.vac): a one-word name such as
// "checkpoint" is also the English word.
func TestGoDocIsForUsers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command over every package")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	out, err := exec.Command(gocmd, "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}", "mvkv/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fileName := regexp.MustCompile(`[\w./-]*\w\.go\b`)
	internalRef := regexp.MustCompile(`\binternal/|\b(heap|bufpool|rmgr)\.[A-Z]`)
	camel := regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z]`)
	word := regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)
	selector := regexp.MustCompile(`\b[a-z]\w*\.([a-z]\w*)\b`)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pkg, dir := f[0], f[1]
		if strings.Contains(pkg, "/internal/") || strings.HasPrefix(pkg, "mvkv/cmd/") {
			continue
		}
		unexported := map[string]bool{}
		fset := token.NewFileSet()
		for _, name := range f[2:] {
			file, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			// Package-level names, methods and struct fields;
			// parameters are part of the API's text.
			note := func(ids ...*ast.Ident) {
				for _, id := range ids {
					if !id.IsExported() && id.Name != "_" {
						unexported[id.Name] = true
					}
				}
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					note(d.Name)
				case *ast.GenDecl:
					for _, sp := range d.Specs {
						switch sp := sp.(type) {
						case *ast.TypeSpec:
							note(sp.Name)
							if st, ok := sp.Type.(*ast.StructType); ok {
								for _, fl := range st.Fields.List {
									note(fl.Names...)
								}
							}
						case *ast.ValueSpec:
							note(sp.Names...)
						}
					}
				}
			}
		}
		doc, err := exec.Command(gocmd, "doc", "-all", pkg).Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", pkg, err)
		}
		checked++
		for i, l := range strings.Split(string(doc), "\n") {
			if i == 0 && strings.HasPrefix(l, "package ") {
				continue // package engine // import "mvkv/engine"
			}
			// Declarations (func, type, const and var lines, and the
			// field and value lines of their blocks, indented by a tab)
			// name parameters, which are unexported by nature: only
			// their comments are checked. Doc text is indented by
			// spaces, the package's own at column 0.
			text := l
			decl := strings.HasPrefix(l, "\t")
			for _, kw := range []string{"func ", "type ", "const ", "var "} {
				decl = decl || strings.HasPrefix(l, kw)
			}
			if decl {
				c := strings.Index(l, "//")
				if c < 0 {
					continue
				}
				text = l[c:]
			}
			if m := fileName.FindString(text); m != "" {
				t.Errorf("go doc %s names the file %q: %s", pkg, m, strings.TrimSpace(l))
			}
			if m := internalRef.FindString(text); m != "" {
				t.Errorf("go doc %s names the internal package %q: %s", pkg, m, strings.TrimSpace(l))
			}
			for _, w := range word.FindAllString(text, -1) {
				if unexported[w] && camel.MatchString(w) {
					t.Errorf("go doc %s names the unexported %s: %s", pkg, w, strings.TrimSpace(l))
				}
			}
			for _, m := range selector.FindAllStringSubmatch(text, -1) {
				// One letter is more likely prose (xlog.c) than code.
				if len(m[1]) > 1 && unexported[m[1]] {
					t.Errorf("go doc %s names the unexported %s: %s", pkg, m[0], strings.TrimSpace(l))
				}
			}
		}
	}
	if checked < 8 {
		t.Fatalf("checked the docs of %d public packages; the list looks wrong:\n%s", checked, out)
	}
}
