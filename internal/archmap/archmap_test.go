package archmap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// mapDoc is the document holding the map, from the module's root.
const mapDoc = "docs/design/architecture.md"

// TestMapMatchesCode holds the code to the map of docs/design/architecture.md,
// over every package go list finds with the Makefile's LINT_TAGS (so the
// e2e suites and the other tagged packages are listed too).
func TestMapMatchesCode(t *testing.T) {
	root, module := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, mapDoc))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(string(doc))
	if err != nil {
		t.Fatalf("%s: %v", mapDoc, err)
	}
	tags := lintTags(t, filepath.Join(root, "Makefile"))
	pkgs := goList(t, root, tags)
	for _, p := range Check(m, module, pkgs) {
		t.Errorf("%s: %s", mapDoc, p)
	}
	t.Logf("%d packages in the map, %d listed by go list -tags %s", len(m), len(pkgs), tags)
}

// moduleRoot walks up from the working directory to the go.mod, and
// returns its directory and the module's path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for l := range strings.Lines(string(data)) {
				if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// lintTags returns the build tags of `make lint` (LINT_TAGS), which
// between them build every file of the module.
func lintTags(t *testing.T, makefile string) string {
	t.Helper()
	f, err := os.Open(makefile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^LINT_TAGS\s*:?=\s*(\S+)\s*$`)
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := re.FindStringSubmatch(s.Text()); m != nil {
			return m[1]
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("%s: no LINT_TAGS := line", makefile)
	return ""
}

// goList runs go list over the module's packages.
func goList(t *testing.T, root, tags string) []Package {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil && os.Getenv("GOROOT") != "" {
		goBin, err = filepath.Join(os.Getenv("GOROOT"), "bin", "go"), nil
	}
	if err != nil {
		t.Fatalf("no go command to list the packages with: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "list", "-e", "-tags", tags,
		"-json=ImportPath,Imports,TestImports,XTestImports,Error,DepsErrors", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.Bytes())
	}
	pkgs, err := decodeGoList(out)
	if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return pkgs
}

// listed is the part of go list's JSON the check reads.
type listed struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Error        *struct{ Err string }
	DepsErrors   []*struct{ Err string }
}

func decodeGoList(out []byte) ([]Package, error) {
	var pkgs []Package
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, err
		}
		p := Package{ImportPath: l.ImportPath, Imports: l.Imports, TestImports: l.TestImports, XTestImports: l.XTestImports}
		if l.Error != nil {
			p.Errors = append(p.Errors, l.Error.Err)
		}
		for _, e := range l.DepsErrors {
			p.Errors = append(p.Errors, e.Err)
		}
		pkgs = append(pkgs, p)
	}
}

func TestDecodeGoList(t *testing.T) {
	out := []byte(`{"ImportPath": "m/a", "Imports": ["fmt", "m/b"], "XTestImports": ["m/a"]}
{"ImportPath": "m/b", "Error": {"Err": "import cycle not allowed"}, "DepsErrors": [{"Err": "x"}]}
`)
	got, err := decodeGoList(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []Package{
		{ImportPath: "m/a", Imports: []string{"fmt", "m/b"}, XTestImports: []string{"m/a"}},
		{ImportPath: "m/b", Errors: []string{"import cycle not allowed", "x"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decodeGoList = %+v, want %+v", got, want)
	}
}

// table is a map document with the given rows.
func table(rows ...string) string {
	return "# Map\n\nSome prose.\n\n| layer | package | kind | owns |\n| --- | --- | --- | --- |\n" +
		strings.Join(rows, "\n") + "\n\nMore prose | with a bar.\n"
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		want    Map
		wantErr string
	}{
		{
			name: "rows",
			doc: table(
				"| 0 | `internal/testutil` | test-support | helpers |",
				"| 10 | `pkg/a` | prod | a \\| b |",
				"| 20 | test/e2e | test | the suite |"),
			want: Map{
				"internal/testutil": {Layer: 0, Kind: TestSupport, Line: 7},
				"pkg/a":             {Layer: 10, Kind: Prod, Line: 8},
				"test/e2e":          {Layer: 20, Kind: Test, Line: 9},
			},
		},
		{name: "no table", doc: "# Map\n\n| layer | package | owns |\n| --- | --- | --- |\n| 1 | pkg/a | a |\n", wantErr: "no table"},
		{name: "no rows", doc: table(), wantErr: "no rows"},
		{name: "no separator", doc: "| layer | package | kind | owns |\n| 1 | pkg/a | prod | a |\n", wantErr: "not followed by"},
		{name: "two tables", doc: table("| 1 | pkg/a | prod | a |") + table("| 1 | pkg/b | prod | b |"), wantErr: "a second map table"},
		{name: "bad layer", doc: table("| one | pkg/a | prod | a |"), wantErr: `layer "one"`},
		{name: "negative layer", doc: table("| -1 | pkg/a | prod | a |"), wantErr: `layer "-1"`},
		{name: "bad kind", doc: table("| 1 | pkg/a | library | a |"), wantErr: `kind "library"`},
		{name: "full import path", doc: table("| 1 | github.com/x/y/pkg/a | prod | a |"), wantErr: "not a path inside the module"},
		{name: "empty package", doc: table("| 1 | `` | prod | a |"), wantErr: "not a path inside the module"},
		{name: "owns nothing", doc: table("| 1 | pkg/a | prod |  |"), wantErr: "owns nothing"},
		{name: "too few cells", doc: table("| 1 | pkg/a | prod |"), wantErr: "3 cells"},
		{name: "twice", doc: table("| 1 | pkg/a | prod | a |", "| 2 | pkg/a | prod | a again |"), wantErr: "twice (first at line 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.doc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse: error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Parse = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	const mod = "example.com/m"
	m := Map{
		"internal/fake": {Layer: 0, Kind: TestSupport, Line: 1},
		"pkg/leaf":      {Layer: 10, Kind: Prod, Line: 2},
		"pkg/other":     {Layer: 10, Kind: Prod, Line: 3},
		"pkg/mid":       {Layer: 20, Kind: Prod, Line: 4},
		"test/harness":  {Layer: 20, Kind: TestSupport, Line: 5},
		"cmd/d":         {Layer: 30, Kind: Prod, Line: 6},
		"test/suite":    {Layer: 40, Kind: Test, Line: 7},
	}
	clean := func() []Package {
		return []Package{
			{ImportPath: mod + "/internal/fake", Imports: []string{"fmt"}},
			{ImportPath: mod + "/pkg/leaf", Imports: []string{"fmt"}, TestImports: []string{mod + "/internal/fake"}},
			{ImportPath: mod + "/pkg/other", XTestImports: []string{mod + "/pkg/other", mod + "/internal/fake"}},
			{ImportPath: mod + "/pkg/mid", Imports: []string{mod + "/pkg/leaf", mod + "/pkg/other"}},
			{ImportPath: mod + "/test/harness", Imports: []string{mod + "/pkg/leaf"}},
			{ImportPath: mod + "/cmd/d", Imports: []string{mod + "/pkg/mid"}, TestImports: []string{mod + "/test/harness"}},
			{ImportPath: mod + "/test/suite", Imports: []string{mod + "/test/harness", mod + "/pkg/mid"}},
		}
	}
	pkg := func(pkgs []Package, rel string) *Package {
		i := slices.IndexFunc(pkgs, func(p Package) bool { return p.ImportPath == mod+"/"+rel })
		return &pkgs[i]
	}
	for _, tc := range []struct {
		name string
		m    Map
		edit func([]Package) []Package
		want []string // substrings of the problems, one each, in order
	}{
		{name: "clean"},
		{
			name: "missing from the map",
			edit: func(p []Package) []Package { return append(p, Package{ImportPath: mod + "/pkg/new"}) },
			want: []string{"pkg/new is not in the map"},
		},
		{
			name: "unknown to the code",
			edit: func(p []Package) []Package {
				return slices.DeleteFunc(p, func(p Package) bool { return p.ImportPath == mod+"/pkg/other" })
			},
			want: []string{"the map names pkg/other (line 3), which is not a package"},
		},
		{
			name: "same layer",
			edit: func(p []Package) []Package {
				pkg(p, "pkg/leaf").Imports = []string{mod + "/pkg/other"}
				return p
			},
			want: []string{"pkg/leaf (layer 10) imports pkg/other (layer 10): a package may import only packages of a lower layer"},
		},
		{
			name: "higher layer from a test file",
			edit: func(p []Package) []Package {
				pkg(p, "pkg/leaf").XTestImports = []string{mod + "/pkg/mid"}
				return p
			},
			want: []string{"pkg/leaf (layer 10) imports pkg/mid (layer 20) in its external _test.go files: a package may import only"},
		},
		{
			name: "prod code imports a test helper",
			edit: func(p []Package) []Package {
				pkg(p, "pkg/mid").Imports = append(pkg(p, "pkg/mid").Imports, mod+"/internal/fake")
				return p
			},
			want: []string{"pkg/mid (prod) imports internal/fake (test-support): a test helper"},
		},
		{
			name: "prod test imports a test package",
			m: func() Map {
				m := maps.Clone(m)
				m["cmd/d"] = Entry{Layer: 50, Kind: Prod, Line: 6}
				return m
			}(),
			edit: func(p []Package) []Package {
				pkg(p, "cmd/d").TestImports = []string{mod + "/test/suite"}
				return p
			},
			want: []string{"cmd/d (prod) imports test/suite (test) in its _test.go files: only test packages"},
		},
		{
			name: "cycle",
			edit: func(p []Package) []Package {
				pkg(p, "pkg/leaf").TestImports = []string{mod + "/pkg/mid"}
				return p
			},
			want: []string{
				"import cycle: pkg/mid -> pkg/leaf -> pkg/mid",
				"pkg/leaf (layer 10) imports pkg/mid (layer 20) in its _test.go files",
			},
		},
		{
			name: "go list error",
			edit: func(p []Package) []Package {
				pkg(p, "pkg/mid").Errors = []string{"import cycle not allowed"}
				return p
			},
			want: []string{"pkg/mid: go list: import cycle not allowed"},
		},
		{
			name: "nothing listed",
			edit: func([]Package) []Package { return nil },
			want: []string{"go list found no packages"},
		},
		{
			name: "empty map",
			m:    Map{},
			want: nil, // checked below: one problem per package and the empty map
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := clean()
			if tc.edit != nil {
				pkgs = tc.edit(pkgs)
			}
			mm := m
			if tc.m != nil {
				mm = tc.m
			}
			got := Check(mm, mod, pkgs)
			if tc.name == "empty map" {
				if len(got) != len(pkgs)+1 || !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "the map has no packages") }) {
					t.Errorf("Check with an empty map = %q, want the map's and every package's problem", got)
				}
				return
			}
			if tc.name == "nothing listed" {
				// Every row then names a package that does not exist.
				got = slices.DeleteFunc(got, func(s string) bool { return strings.Contains(s, "which is not a package") })
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Check = %q, want %d problems like %q", got, len(tc.want), tc.want)
			}
			for i := range got {
				if !strings.Contains(got[i], tc.want[i]) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}
