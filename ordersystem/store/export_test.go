package store

import "context"

// TestMigration is a migration a test adds, as a newer build would have it.
type TestMigration struct {
	Version    int
	Name       string
	ExpandOnly bool
	Stmts      []string
}

// MigrateAs runs Migrate as a build that knows the migrations up to version
// known (an older build) plus extra (a newer build's).
func MigrateAs(ctx context.Context, db *DB, known int, extra ...TestMigration) error {
	var ms []migration
	for _, m := range migrations {
		if m.version <= known {
			ms = append(ms, m)
		}
	}
	for _, e := range extra {
		ms = append(ms, migration{version: e.Version, name: e.Name, expandOnly: e.ExpandOnly, stmts: e.Stmts})
	}
	return migrate(ctx, db, ms)
}
