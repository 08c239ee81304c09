package processor

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestExamplesTable: the Examples table of docs/runtime.md lists exactly the
// Example functions of the runtime's packages, each under its package, so a
// new Example without a row, or a row without an Example, fails.
func TestExamplesTable(t *testing.T) {
	dirs := map[string]string{ // package path in the table: directory from here
		"processor": ".", "processor/dlq": "dlq", "processor/middleware": "middleware",
		"processor/processortest": "processortest", "processor/proctrace": "proctrace",
		"inbox": "../inbox", "outbox": "../outbox", "sqldb": "../sqldb",
	}
	exampleRe := regexp.MustCompile(`(?m)^func (Example\w*)\(\)`)
	var have []string
	for pkg, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no test files in %s (%v)", dir, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range exampleRe.FindAllStringSubmatch(string(b), -1) {
				have = append(have, pkg+" "+m[1])
			}
		}
	}
	doc, err := os.ReadFile("../docs/runtime.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z/]+)` \\| `(Example\\w*)` \\|").FindAllStringSubmatch(string(doc), -1) {
		listed = append(listed, m[1]+" "+m[2])
	}
	slices.Sort(have)
	slices.Sort(listed)
	if !slices.Equal(have, listed) {
		t.Errorf("docs/runtime.md's Examples table lists\n  %s\nthe packages have\n  %s", strings.Join(listed, "\n  "), strings.Join(have, "\n  "))
	}
}
