package processor

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRuntimeStandsAlone: the runtime (processor, inbox, outbox) imports
// nothing of the order system, directly or through another package of this
// module. Allowed are the runtime's packages themselves and store, the SQL
// layer the inbox and outbox write through (whose own imports are checked
// the same way). Test files are not checked: tests may use internal helpers.
func TestRuntimeStandsAlone(t *testing.T) {
	const module = "github.com/ordercast/ordercast/"
	allowed := map[string]bool{"processor": true, "inbox": true, "outbox": true, "store": true}
	root := ".." // this package's directory is <module>/processor
	seen := map[string]bool{}
	var check func(pkg string, via []string)
	check = func(pkg string, via []string) {
		if seen[pkg] {
			return
		}
		seen[pkg] = true
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			ast, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range ast.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				dep, ok := strings.CutPrefix(path, module)
				if !ok {
					continue
				}
				chain := append(slices.Clone(via), dep)
				if !allowed[dep] {
					t.Errorf("%s imports %s (%s): the runtime must not depend on the order system", f, path, strings.Join(chain, " -> "))
					continue
				}
				check(dep, chain)
			}
		}
	}
	for _, pkg := range []string{"processor", "inbox", "outbox"} {
		check(pkg, []string{pkg})
	}
}
