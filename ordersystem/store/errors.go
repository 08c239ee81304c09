package store

import (
	"errors"

	"github.com/ordercast/ordercast/sqldb"
)

// ErrSchemaTooNew is returned (wrapped) by [Migrate] when a newer build has
// migrated the database with a change this build cannot run against (a
// version above SchemaVersion not recorded as expand-only). It is permanent:
// upgrade this instance.
var ErrSchemaTooNew = errors.New("database schema is newer than this build and not backward compatible")

// IsRetryable is [sqldb.IsRetryable].
func IsRetryable(err error) bool { return sqldb.IsRetryable(err) }

// IsUniqueViolation is [sqldb.IsUniqueViolation].
func IsUniqueViolation(err error) bool { return sqldb.IsUniqueViolation(err) }
