package fulfillment

// Queries returns how many queries DBRecords' r has run.
func Queries(r Records) int64 { return r.(*dbRecords).queries.Load() }

// Queued returns how many lookups of DBRecords' r wait for a query.
func Queued(r Records) int {
	d := r.(*dbRecords)
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queued)
}

// Querying returns how many lookups of DBRecords' r are in its running
// query.
func Querying(r Records) int {
	d := r.(*dbRecords)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.querying
}
