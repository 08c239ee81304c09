package processor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestTxnOptDocListsNewOnlyOptions: the list of New-only options in
// TxnOpt's doc is exactly the package's functions that return an Opt (not
// a TxnOpt), and each of them returns a value that is not a TxnOpt.
func TestTxnOptDocListsNewOnlyOptions(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	var txnOptDoc string
	for _, f := range pkgs["processor"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil || !d.Name.IsExported() || d.Type.Results == nil || len(d.Type.Results.List) != 1 {
					continue
				}
				if id, ok := d.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Opt" {
					declared = append(declared, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == "TxnOpt" {
						txnOptDoc = d.Doc.Text()
					}
				}
			}
		}
	}
	m := regexp.MustCompile(`New or NewQueue alone \(([^)]*)\) are an Opt only`).FindStringSubmatch(strings.Join(strings.Fields(txnOptDoc), " "))
	if m == nil {
		t.Fatalf("TxnOpt's doc has no list of the options of New or NewQueue alone:\n%s", txnOptDoc)
	}
	listed := strings.Split(m[1], ", ")
	slices.Sort(listed)
	slices.Sort(declared)
	if !slices.Equal(listed, declared) {
		t.Errorf("TxnOpt's doc lists as New-only %v; the functions returning Opt are %v", listed, declared)
	}

	for name, o := range map[string]Opt{
		"MaxBlockedKeys": MaxBlockedKeys(1), "BlockedKeysTopic": BlockedKeysTopic("b"), "Delivery": Delivery(AtMostOnce),
		"MaxDeliveries": MaxDeliveries(2), "ShareSessions": ShareSessions(1),
	} {
		if _, ok := o.(TxnOpt); ok {
			t.Errorf("%s returns a TxnOpt: NewTransactional would take it", name)
		}
	}
}
