package processor

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestRuntimeLinksNoDriver: what `go list -deps` says a program importing
// processor, processor/dlq, inbox and outbox links contains no package of the order system
// (only processor, processor/dlq, inbox, outbox, sqldb, internal/txncheck, internal/txnretry, internal/kread,
// internal/brokererr and internal/ctxtime of this module: not sqldb/drivers, nor any package
// under ordersystem/), no SQL
// driver (the user brings theirs: no pgx, lib/pq, modernc.org/sqlite,
// mattn/go-sqlite3), no Avro library, no cobra and no OpenTelemetry (tracing
// is processor/proctrace's, imported only by who wants it). A failure names the chain of
// imports that pulls the package in. Test imports are not counted: they are not
// linked into a user's binary. docs/architecture.md states the rule.
func TestRuntimeLinksNoDriver(t *testing.T) {
	const module = "github.com/ordercast/ordercast/"
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list -deps` and needs the go command on PATH: %v", err)
	}
	roots := []string{module + "processor", module + "processor/dlq", module + "inbox", module + "outbox"}
	cmd := exec.Command(goBin, append([]string{"list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`}, roots...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	allowed := map[string]bool{"processor": true, "inbox": true, "outbox": true, "sqldb": true,
		"internal/txncheck": true, "internal/brokererr": true, "internal/ctxtime": true, "internal/txnretry": true, // the relay's commit read-back, the start checks' error class (franz-go and the standard library only)
		"processor/dlq": true, "internal/kread": true} // the DLQ tools and their read_committed range reads
	forbidden := []string{
		"github.com/jackc/",           // pgx
		"github.com/lib/pq",           // lib/pq
		"modernc.org/sqlite",          // modernc SQLite (and modernc.org/libc below it)
		"modernc.org/libc",            //
		"github.com/mattn/go-sqlite3", // cgo SQLite
		"github.com/hamba/avro",       // the order system's Avro library
		"github.com/linkedin/goavro",  //
		"github.com/spf13/cobra",      // the CLI
		"go.opentelemetry.io/",        // tracing: processor/proctrace, for who wants it
	}
	importedBy := map[string]string{} // package -> one package importing it
	var deps []string
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		deps = append(deps, f[0])
		for _, imp := range f[1:] {
			if _, ok := importedBy[imp]; !ok {
				importedBy[imp] = f[0]
			}
		}
	}
	chain := func(pkg string) string {
		c := []string{pkg}
		for p := pkg; !slices.Contains(roots, p); {
			next, ok := importedBy[p]
			if !ok || len(c) > 50 {
				break
			}
			c = append(c, next)
			p = next
		}
		slices.Reverse(c)
		return strings.Join(c, " -> ")
	}
	for _, root := range roots {
		if !slices.Contains(deps, root) {
			t.Fatalf("go list -deps did not list %s itself: %q", root, out)
		}
	}
	bad := func(pkg string) string {
		if rel, ok := strings.CutPrefix(pkg, module); ok {
			if !allowed[rel] {
				return "only processor, processor/dlq, inbox, outbox, sqldb, internal/txncheck, internal/txnretry, internal/kread, internal/brokererr and internal/ctxtime of this module may be linked"
			}
			return ""
		}
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				return "the user brings their own SQL driver, and the order system's libraries stay out"
			}
		}
		return ""
	}
	for _, dep := range deps {
		// Report where the chain first leaves the allowed set, not every
		// package below it.
		if why := bad(dep); why != "" && bad(importedBy[dep]) == "" {
			t.Errorf("the runtime links %s (%s): %s", dep, chain(dep), why)
		}
	}
}
