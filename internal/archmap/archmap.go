// Package archmap checks the package map of docs/design/architecture.md
// against the code: every package of the module is in the map, the map names
// no package that does not exist, every import (a test file's too) goes to
// a lower layer, test helpers stay out of the binaries, and go list reports
// no error such as an import cycle. Parse and Check are pure; the test of
// this package feeds them the document and `go list`'s answer.
package archmap

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Kind says who may import a package.
type Kind string

const (
	// Prod is code in the binaries: its non-test files import only Prod
	// packages.
	Prod Kind = "prod"
	// TestSupport is a helper for tests: imported only by _test.go files
	// and by Test packages.
	TestSupport Kind = "test-support"
	// Test is a suite, benchmark, test tool or checker: imported by Test
	// packages only.
	Test Kind = "test"
)

// Entry is one row of the map.
type Entry struct {
	Layer int
	Kind  Kind
	// Line is the row's line in the document, for messages.
	Line int
}

// Map is the package map: the entry of each package, by its path inside
// the module ("pkg/cni").
type Map map[string]Entry

// header is the header row of the map's table.
var header = regexp.MustCompile(`^\|\s*layer\s*\|\s*package\s*\|\s*kind\s*\|\s*owns\s*\|\s*$`)

// separator is the row under a markdown table's header.
var separator = regexp.MustCompile(`^\|(\s*:?-+:?\s*\|)+\s*$`)

// Parse reads the map from the markdown document: the one table whose
// header is `| layer | package | kind | owns |`, one package a row. A
// document without that table, a table without rows, a bad layer or kind,
// an empty cell or a package named twice is an error.
func Parse(doc string) (Map, error) {
	lines := strings.Split(doc, "\n")
	start := -1
	for i, l := range lines {
		if header.MatchString(strings.TrimSpace(l)) {
			if start >= 0 {
				return nil, fmt.Errorf("line %d: a second map table (the first is at line %d)", i+1, start+1)
			}
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("no table with the header | layer | package | kind | owns |")
	}
	if start+1 >= len(lines) || !separator.MatchString(strings.TrimSpace(lines[start+1])) {
		return nil, fmt.Errorf("line %d: the map's header is not followed by a | --- | row", start+2)
	}
	m := Map{}
	for i := start + 2; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			break
		}
		n := i + 1
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if len(cells) < 4 {
			return nil, fmt.Errorf("line %d: %d cells, want layer | package | kind | owns", n, len(cells))
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		layer, err := strconv.Atoi(cells[0])
		if err != nil || layer < 0 {
			return nil, fmt.Errorf("line %d: layer %q is not a number >= 0", n, cells[0])
		}
		pkg := strings.Trim(cells[1], "`")
		if pkg == "" || strings.ContainsAny(pkg, " \t`") || strings.HasPrefix(pkg, "/") || strings.HasSuffix(pkg, "/") || strings.Contains(pkg, ".") {
			return nil, fmt.Errorf("line %d: package %q is not a path inside the module (such as pkg/cni)", n, cells[1])
		}
		kind := Kind(cells[2])
		if kind != Prod && kind != TestSupport && kind != Test {
			return nil, fmt.Errorf("line %d: kind %q is none of %s, %s, %s", n, cells[2], Prod, TestSupport, Test)
		}
		if strings.TrimSpace(strings.Join(cells[3:], "|")) == "" {
			return nil, fmt.Errorf("line %d: %s owns nothing: say what it owns", n, pkg)
		}
		if prev, ok := m[pkg]; ok {
			return nil, fmt.Errorf("line %d: %s is in the map twice (first at line %d)", n, pkg, prev.Line)
		}
		m[pkg] = Entry{Layer: layer, Kind: kind, Line: n}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("line %d: the map's table has no rows", start+1)
	}
	return m, nil
}

// Package is what go list says of one package of the module.
type Package struct {
	ImportPath   string
	Imports      []string // of its non-test files
	TestImports  []string // of its _test.go files in the package itself
	XTestImports []string // of its _test.go files in package X_test
	// Errors are go list's errors for the package and its dependencies
	// (an import cycle, a missing package).
	Errors []string
}

// Check compares the map with the packages go list found in module, and
// returns one message per problem, sorted; none when the code keeps to the
// map. Finding no packages at all is a problem: a check that saw nothing
// must not pass.
func Check(m Map, module string, pkgs []Package) []string {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	if len(m) == 0 {
		add("the map has no packages")
	}
	if len(pkgs) == 0 {
		add("go list found no packages in module %s", module)
	}
	rel := func(path string) (string, bool) {
		if p, ok := strings.CutPrefix(path, module+"/"); ok {
			return p, true
		}
		return "", path == module // the module's root package, if any
	}
	found := map[string]bool{}
	for _, p := range pkgs {
		if r, ok := rel(p.ImportPath); ok {
			found[r] = true
		}
	}
	for _, p := range pkgs {
		from, ok := rel(p.ImportPath)
		if !ok {
			add("%s is not in module %s", p.ImportPath, module)
			continue
		}
		for _, e := range p.Errors {
			add("%s: go list: %s", from, e)
		}
		fe, ok := m[from]
		if !ok {
			add("%s is not in the map: add its row (layer, kind, what it owns) to the table", from)
			continue
		}
		for _, set := range []struct {
			files   string
			test    bool
			imports []string
		}{
			{"", false, p.Imports},
			{" in its _test.go files", true, p.TestImports},
			{" in its external _test.go files", true, p.XTestImports},
		} {
			for _, imp := range set.imports {
				to, ok := rel(imp)
				if !ok || to == from {
					continue
				}
				te, ok := m[to]
				if !ok {
					continue // reported as missing from the map, or by go list
				}
				if te.Layer >= fe.Layer {
					add("%s (layer %d) imports %s (layer %d)%s: a package may import only packages of a lower layer", from, fe.Layer, to, te.Layer, set.files)
				}
				if msg := kindRule(fe.Kind, te.Kind, set.test); msg != "" {
					add("%s (%s) imports %s (%s)%s: %s", from, fe.Kind, to, te.Kind, set.files, msg)
				}
			}
		}
	}
	for pkg, e := range m {
		if !found[pkg] {
			add("the map names %s (line %d), which is not a package of the module", pkg, e.Line)
		}
	}
	problems = append(problems, cycles(module, pkgs)...)
	slices.Sort(problems)
	return problems
}

// kindRule says what is wrong with a package of kind from importing one of
// kind to ("" if nothing); test is whether the import is a _test.go file's.
func kindRule(from, to Kind, test bool) string {
	switch {
	case to == Test && from != Test:
		return "only test packages may import a test package"
	case to == TestSupport && from == Prod && !test:
		return "a test helper may be imported only by _test.go files and test packages, never by the non-test files of a prod package"
	}
	return ""
}

// cycles returns an import cycle among the module's packages, if any, as
// one message. The edges are the non-test imports and those of the
// package's own _test.go files (an external test package may import a
// package that imports the one under test).
func cycles(module string, pkgs []Package) []string {
	edges := map[string][]string{}
	for _, p := range pkgs {
		for _, imp := range slices.Concat(p.Imports, p.TestImports) {
			if imp != p.ImportPath && (imp == module || strings.HasPrefix(imp, module+"/")) {
				edges[p.ImportPath] = append(edges[p.ImportPath], imp)
			}
		}
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var cycle []string
	var visit func(string) bool
	visit = func(p string) bool {
		state[p] = onPath
		path = append(path, p)
		for _, q := range edges[p] {
			switch state[q] {
			case onPath:
				i := slices.Index(path, q)
				cycle = append(slices.Clone(path[i:]), q)
				return true
			case unseen:
				if visit(q) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[p] = done
		return false
	}
	roots := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		roots = append(roots, p.ImportPath)
	}
	slices.Sort(roots)
	for _, p := range roots {
		if state[p] == unseen && visit(p) {
			for i := range cycle {
				cycle[i] = strings.TrimPrefix(cycle[i], module+"/")
			}
			return []string{"import cycle: " + strings.Join(cycle, " -> ")}
		}
	}
	return nil
}
