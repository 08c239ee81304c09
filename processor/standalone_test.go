package processor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// ddlRE matches a schema statement in an SQL string and captures the table it
// creates or changes: the table of CREATE/ALTER/DROP TABLE, or the ON table
// of CREATE INDEX.
// The table may be the placeholder {{TABLE}} of a table name the user
// chooses (inbox.New, outbox.New), which stands for the package's own table.
var ddlRE = regexp.MustCompile(`(?is)\b(?:CREATE|ALTER|DROP)\s+(?:TABLE(?:\s+IF\s+(?:NOT\s+)?EXISTS)?\s+"?(\w+|\{\{TABLE\}\})|(?:UNIQUE\s+)?INDEX(?:\s+IF\s+(?:NOT\s+)?EXISTS)?\s+[\w{}]+\s+ON\s+"?(\w+|\{\{TABLE\}\}))`)

// TestRuntimeStandsAlone: the runtime (processor, inbox, outbox) imports
// nothing of the order system, directly or through another package of this
// module. Allowed are the runtime's packages themselves and sqldb, the
// generic SQL layer the inbox and outbox write through (whose own imports are
// checked the same way); package store, which holds the order system's
// schema, is not. The packages reached may hold no schema but their own:
// every CREATE/ALTER/DROP of a table or index in their string literals names
// the inbox table in inbox, the outbox table in outbox, and none elsewhere,
// so that inbox.Migrate and outbox.Migrate create only those tables on a
// database of one's own. Test files are not checked: tests may use internal
// helpers.
func TestRuntimeStandsAlone(t *testing.T) {
	const module = "github.com/ordercast/ordercast/"
	allowed := map[string]bool{"processor": true, "inbox": true, "outbox": true, "sqldb": true,
		"internal/txncheck": true, "internal/brokererr": true, "internal/ctxtime": true, "internal/txnretry": true} // the relay's commit read-back, the start checks' error class, the context-aware sleep, the transactional clients' retry options (franz-go and the standard library only)
	ownTables := map[string][]string{"inbox": {"inbox", "{{table}}"}, "outbox": {"outbox", "{{table}}"}}
	root := ".." // this package's directory is <module>/processor
	seen := map[string]bool{}
	ddl := map[string]int{} // DDL statements found per package
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
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				for _, m := range ddlRE.FindAllStringSubmatch(s, -1) {
					ddl[pkg]++
					table := strings.ToLower(m[1] + m[2])
					if !slices.Contains(ownTables[pkg], table) {
						t.Errorf("%s (package %s) holds schema for table %q (%q): only %v may be created there", f, pkg, table, strings.Join(strings.Fields(m[0]), " "), ownTables[pkg])
					}
				}
				return true
			})
			for _, imp := range file.Imports {
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
	if !seen["sqldb"] {
		t.Error("inbox and outbox no longer reach sqldb: update this test's allowed packages")
	}
	// The check above must see the runtime's own DDL, or it checks nothing.
	for pkg := range ownTables {
		if ddl[pkg] == 0 {
			t.Errorf("no CREATE TABLE found in package %s: the DDL check does not see its Migrate", pkg)
		}
	}
}
