package sqldb

// CachedStmts is how many statements TxStmt keeps prepared for db.
func CachedStmts(db *DB) int {
	db.stmts.mu.Lock()
	defer db.stmts.mu.Unlock()
	return len(db.stmts.stmts)
}
