package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

// backwardCompatible reports whether data written with writer can be read
// with reader (BACKWARD: the new schema reads the old data), parsing each
// with its own cache so that same-named types do not collide.
func backwardCompatible(reader, writer string) error {
	r, err := avro.ParseWithCache(reader, "", &avro.SchemaCache{})
	if err != nil {
		return fmt.Errorf("parse reader: %w", err)
	}
	w, err := avro.ParseWithCache(writer, "", &avro.SchemaCache{})
	if err != nil {
		return fmt.Errorf("parse writer: %w", err)
	}
	return avro.NewSchemaCompatibility().Compatible(r, w)
}

var historyName = regexp.MustCompile(`^(.+)\.v([0-9]+)\.avsc$`)

// history returns avro/history/<name>.v<N>.avsc files by name, sorted by N.
func history(t *testing.T) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("avro", "history"))
	if err != nil {
		t.Fatal(err)
	}
	type ver struct {
		n    int
		path string
	}
	byName := map[string][]ver{}
	for _, e := range entries {
		m := historyName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("avro/history/%s: name must be <name>.v<N>.avsc", e.Name())
			continue
		}
		n, _ := strconv.Atoi(m[2])
		byName[m[1]] = append(byName[m[1]], ver{n, filepath.Join("avro", "history", e.Name())})
	}
	out := map[string][]string{}
	for name, vs := range byName {
		slices.SortFunc(vs, func(a, b ver) int { return a.n - b.n })
		for i, v := range vs {
			if v.n != i+1 {
				t.Errorf("%s: versions must be v1, v2, ... without gaps; found v%d at position %d", name, v.n, i+1)
			}
			out[name] = append(out[name], v.path)
		}
	}
	return out
}

// TestBackwardCompatibleWithHistory is the schema-evolution gate: every
// schema in avro/ must read data written with each released version kept in
// avro/history/ (transitive BACKWARD, as the registry's BACKWARD_TRANSITIVE
// level checks), and the newest released version must be the current file,
// so that a change is released by adding the next vN copy, which the next
// change is then checked against.
func TestBackwardCompatibleWithHistory(t *testing.T) {
	hist := history(t)
	current, err := filepath.Glob(filepath.Join("avro", "*.avsc"))
	if err != nil || len(current) == 0 {
		t.Fatalf("no schemas in avro/: %v", err)
	}
	for _, path := range current {
		name := strings.TrimSuffix(filepath.Base(path), ".avsc")
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		versions := hist[name]
		if len(versions) == 0 {
			t.Errorf("%s: no released version in avro/history/%s.v1.avsc", name, name)
			continue
		}
		for _, v := range versions {
			old, err := os.ReadFile(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := backwardCompatible(string(cur), string(old)); err != nil {
				t.Errorf("BREAKING CHANGE: %s cannot read data written with %s: %v", path, v, err)
			}
		}
		latest, _ := os.ReadFile(versions[len(versions)-1])
		a := avro.MustParse(string(cur)).Fingerprint()
		b, err := avro.ParseWithCache(string(latest), "", &avro.SchemaCache{})
		if err != nil {
			t.Fatal(err)
		}
		if a != b.Fingerprint() {
			t.Errorf("%s differs from its newest released version %s: copy it to avro/history/%s.v%d.avsc",
				path, versions[len(versions)-1], name, len(versions)+1)
		}
		delete(hist, name)
	}
	for name := range hist {
		t.Errorf("avro/history has versions of %q but avro/%s.avsc does not exist", name, name)
	}
}

// TestBackwardCheckDetectsBreakingChanges proves the gate above fails on the
// changes that break consumers, and passes the ones that do not.
func TestBackwardCheckDetectsBreakingChanges(t *testing.T) {
	v1, err := os.ReadFile(filepath.Join("avro", "history", "orderCreated.v1.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	const anchor = `{"name": "totalMilli", "type": "long"`
	if !strings.Contains(string(v1), anchor) {
		t.Fatal("anchor not found in orderCreated.v1.avsc")
	}
	edit := func(repl string) string { return strings.Replace(string(v1), anchor, repl, 1) }
	cases := []struct {
		name     string
		next     string
		breaking bool
	}{
		{"required field added without default",
			edit(`{"name": "channel", "type": "string"}, ` + anchor), true},
		{"field type changed long -> string",
			edit(`{"name": "totalMilli", "type": "string"`), true},
		{"field renamed without alias",
			edit(`{"name": "totalAmountMilli", "type": "long"`), true},
		{"optional field added with default",
			edit(`{"name": "channel", "type": ["null", "string"], "default": null}, ` + anchor), false},
		{"required field added with default",
			edit(`{"name": "channel", "type": "string", "default": "web"}, ` + anchor), false},
		{"optional field removed",
			regexp.MustCompile(`,\s*\{"name": "reference"[^}]*\}`).ReplaceAllString(string(v1), ""), false},
		{"field removed that had no default (old data still readable)",
			regexp.MustCompile(`\{"name": "totalMilli"[^}]*\},\s*`).ReplaceAllString(string(v1), ""), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.next == string(v1) {
				t.Fatal("edit did not apply")
			}
			err := backwardCompatible(c.next, string(v1))
			if c.breaking && err == nil {
				t.Fatal("breaking change not detected")
			}
			if !c.breaking && err != nil {
				t.Fatalf("compatible change reported as breaking: %v", err)
			}
		})
	}
}
