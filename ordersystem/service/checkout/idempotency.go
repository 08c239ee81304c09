package checkout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordercast/ordercast/ordersystem/order"
	"github.com/ordercast/ordercast/sqldb"
)

// Statuses of a checkout_requests row.
const (
	statusPending   = "pending"
	statusPublished = "published"
)

// outcome is a successful answer to POST /orders.
type outcome struct {
	status   int
	body     []byte
	orderID  string
	replayed bool // a stored answer, sent with Idempotent-Replayed: true
}

// requestRow is a checkout_requests row.
type requestRow struct {
	key, hash, orderID, eventID, status string
	payload                             []byte
	responseStatus                      sql.NullInt64
	responseBody                        sql.NullString
}

// decision is what the transaction of claim decided.
type decision struct {
	replay *outcome // set: answer this, nothing to publish

	// Otherwise publish payload, the encoded event, for key.
	key     string
	orderID string
	payload []byte
	event   *order.OrderCreated // nil when the payload was read from the table
	fresh   bool                // this request inserted the row

	// retryKey is the Idempotency-Key the client retries with (its own, or
	// the issued "order:<id>"); key may be its scoped form (scopedKey).
	retryKey string
}

// scopeSep separates the parts of a customer's scoped key. Client keys are
// printable ASCII (idempotencyKey), so no client key, stored unscoped for a
// guest, can ever equal a customer's scoped key.
const scopeSep = "\x1f"

// scopedKey is the checkout_requests key of the Idempotency-Key clientKey
// sent by p: a customer's key is "customer" US <customer> US <clientKey>
// (US: scopeSep), so that customer A's key is A's alone; a guest's (and
// every key without Config.Auth) is clientKey itself, as stored before keys
// were scoped (guests have no identity and share one scope). A key the
// server issued (keylessPrefix) is not scoped: it names its order, whose
// request hash includes its customer.
func scopedKey(p principal, clientKey string) string {
	if p.customer == "" || strings.HasPrefix(clientKey, keylessPrefix) {
		return clientKey
	}
	return "customer" + scopeSep + p.customer + scopeSep + clientKey
}

// ClientKey is the Idempotency-Key a client sent for the checkout_requests
// key stored: a customer's scoped key ("customer" US <customer> US <key>)
// without its scope, any other key as it is. For tools that match their
// requests' keys against the table (the crash harness).
func ClientKey(stored string) string {
	rest, ok := strings.CutPrefix(stored, "customer"+scopeSep)
	if !ok {
		return stored
	}
	if _, key, ok := strings.Cut(rest, scopeSep); ok {
		return key
	}
	return stored
}

// place runs the idempotent flow of the package doc for a validated request
// whose canonical hash is hash; clientKey is its Idempotency-Key or "", sent
// by p (its key is scoped to p: scopedKey).
func (s *Service) place(ctx context.Context, p principal, req *order.PlaceOrderRequest, hash, clientKey string) (*outcome, *apiError) {
	key := scopedKey(p, clientKey)
	// A customer's key stored before keys were scoped: read only as a
	// fallback, and only if its request is this one (its hash includes the
	// customer, so no other caller's row ever matches).
	legacyKey := ""
	if key != clientKey {
		legacyKey = clientKey
	}
	release := func() {}
	var prebuilt *order.OrderCreated
	if clientKey == "" {
		// No key: a new order whatever happens, priced now; its row key
		// is unique, so nothing can race for it.
		if aerr := s.unwritable(req); aerr != nil {
			return nil, aerr
		}
		ev, aerr := s.newEvent(req, order.NewTimeOrderedID("ord_"), order.NewTimeOrderedID("evt_"))
		if aerr != nil {
			return nil, aerr
		}
		prebuilt, key = ev, keylessPrefix+ev.OrderID
	}
	{
		// One request per key at a time in this process: a concurrent
		// duplicate waits here, then finds the row published and replays it.
		// A keyless request's new key is free at once; it is held too, so
		// that a retry with the key issued to it waits for its produce.
		wctx, cancel := context.WithTimeout(ctx, s.cfg.ProduceTimeout)
		unlock, err := s.keys.lock(wctx, key)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, clientGone(ctx.Err())
			}
			return nil, reject(http.StatusServiceUnavailable, CodeBrokerUnavailable,
				fmt.Sprintf("another request with this Idempotency-Key is still being published after %v; retry with the same key", s.cfg.ProduceTimeout))
		}
		release = unlock
	}
	handedOff := false
	defer func() {
		if !handedOff {
			release()
		}
	}()

	issuedOnly := strings.HasPrefix(clientKey, keylessPrefix)
	c, aerr := s.claim(ctx, key, legacyKey, hash, req, prebuilt, issuedOnly, legacyKey != "")
	if aerr != nil {
		return nil, aerr
	}
	if c.replay != nil {
		s.metrics.replays.Inc()
		return c.replay, nil
	}
	if c.event == nil {
		ev := new(order.OrderCreated)
		if _, err := s.serde.DecodeContext(ctx, order.TopicOrderCreated, c.payload, ev); err != nil {
			s.log.Error("checkout: stored payload of a pending request does not decode",
				slog.String("idempotency_key", key), slog.String("order_id", c.orderID), slog.Any("error", err))
			return nil, reject(http.StatusInternalServerError, CodeInternal,
				"the stored event of this Idempotency-Key cannot be decoded; see the service log")
		}
		c.event = ev
	}
	c.retryKey = clientKey
	if clientKey == "" {
		c.retryKey = key
	}
	handedOff = true
	return s.publish(ctx, c, release)
}

// newEvent prices req into the event of a new order with the given ids.
func (s *Service) newEvent(req *order.PlaceOrderRequest, orderID, eventID string) (*order.OrderCreated, *apiError) {
	return (*s.catalog.Load()).price(req, orderID, eventID, s.now())
}

// encode encodes ev for the orderCreated topic; a failure is a bug (the
// event breaks its own contract) and answers 500.
func (s *Service) encode(ev *order.OrderCreated) ([]byte, *apiError) {
	payload, err := s.serde.Encode(order.TopicOrderCreated, ev)
	if err != nil {
		s.log.Error("checkout: orderCreated event does not encode", slog.String("order_id", ev.OrderID), slog.Any("error", err))
		return nil, reject(http.StatusInternalServerError, CodeInternal, "the order event could not be encoded: "+err.Error())
	}
	return payload, nil
}

// claim looks key up and decides what place does: replay a published row,
// re-publish a pending one, or insert a new pending row (priced from the
// catalog, or prebuilt for a keyless request) and publish it. A row with
// another hash is 422 idempotency_key_reused. A request this instance cannot
// write (unwritable) is refused only where an event would be built: a
// published or pending row of the same request is replayed or re-published
// whatever the version this instance writes, and since the refusal is
// decided before the row would be inserted, no such request is ever stored
// by this instance.
//
// issuedOnly (a client key with the reserved keylessPrefix) accepts only an
// existing row: such keys are issued by checkout for a keyless request's
// row, and a client may not make up new ones (400 bad_idempotency_key).
//
// legacyKey, when not "", is the unscoped key of a customer's request: when
// key has no row, a row of legacyKey with this very hash (the customer's
// own request, stored before keys were scoped) is followed; any other row
// of legacyKey (a guest's, another customer's) is ignored. own says the
// key's scope is the caller's alone (a customer): only then does a 422 name
// the row's order; a guest's 422 does not name it, as another guest may
// have used the key.
//
// The claim is written in a batch with the other requests' claims waiting
// at the time (group commit: claimBatch); it blocks until its batch is
// written, at most about Config.DBTimeout after the batch starts. A claim
// whose request is gone or whose DBTimeout passed before its batch started
// writes nothing.
func (s *Service) claim(ctx context.Context, key, legacyKey, hash string, req *order.PlaceOrderRequest, prebuilt *order.OrderCreated, issuedOnly, own bool) (*decision, *apiError) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBTimeout)
	defer cancel()
	j := &claimJob{ctx: ctx, key: key, legacyKey: legacyKey, hash: hash, req: req,
		issuedOnly: issuedOnly, own: own, fresh: prebuilt, done: make(chan struct{})}
	if !issuedOnly {
		// Priced and encoded before the batch, in this request's
		// goroutine, so that the batch (on SQLite: the write lock) is
		// held for SQL only; used only if the key turns out to be new.
		j.prebuild(s)
	}
	start := time.Now()
	s.claims.submit(j)
	<-j.done
	s.metrics.dbWrite.WithLabelValues("claim").Observe(time.Since(start).Seconds())
	if j.err != nil {
		if parent.Err() != nil {
			s.log.Info("checkout: the client hung up before the request was recorded", slog.String("idempotency_key", key), slog.Any("error", j.err))
			return nil, clientGone(parent.Err())
		}
		return nil, s.dbFailed("recording the order", j.err, ctx.Err() != nil || errors.Is(j.err, context.DeadlineExceeded))
	}
	if j.aerr != nil {
		return nil, j.aerr
	}
	s.dbHealth.ok()
	return j.d, nil
}

// claimJob is one request's claim, written by claimBatch. Its fields are
// set by claim before it is submitted; its results by the runner, before
// done is closed.
type claimJob struct {
	ctx                  context.Context // the request's, bounded by DBTimeout
	key, legacyKey, hash string
	req                  *order.PlaceOrderRequest
	issuedOnly, own      bool

	// The event of a new row (prebuild), or why none can be built.
	fresh        *order.OrderCreated
	freshPayload []byte
	freshErr     *apiError

	d    *decision
	aerr *apiError // a refusal of this claim alone (422, 400, ...)
	err  error     // the write failed, or ctx was done before it started
	done chan struct{}
}

// prebuild prices (unless prebuilt), checks and encodes the event of a new
// row for j, with new ids, keeping the refusal for when it is needed.
func (j *claimJob) prebuild(s *Service) {
	if aerr := s.unwritable(j.req); aerr != nil {
		j.freshErr = aerr
		return
	}
	if j.fresh == nil {
		ev, aerr := s.newEvent(j.req, order.NewTimeOrderedID("ord_"), order.NewTimeOrderedID("evt_"))
		if aerr != nil {
			j.freshErr = aerr
			return
		}
		j.fresh = ev
	}
	p, aerr := s.encode(j.fresh)
	if aerr != nil {
		j.fresh, j.freshErr = nil, aerr
		return
	}
	j.freshPayload = p
}

// runClaims is the claims batcher's run: it answers the jobs whose request
// is gone or out of time without writing them, and writes the others in one
// batch.
func (s *Service) runClaims(jobs []*claimJob) {
	live := jobs[:0:0]
	for _, j := range jobs {
		if err := j.ctx.Err(); err != nil {
			j.err = err
			close(j.done)
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	runBatch(s, live, s.cfg.DBTimeout, s.claimBatch, func(j *claimJob, err error) { j.err = err })
	for _, j := range live {
		close(j.done)
	}
}

// claimBatch decides and writes the claims of jobs (distinct keys: keyLocks
// holds each key in one claim at a time per process): one SELECT of every
// key (and legacy key), then, for the keys without a row, one multi-row
// INSERT ... ON CONFLICT DO NOTHING RETURNING, in key order (on PostgreSQL
// both in one statement, readAndInsert) (two processes'
// batches then take the keys' index locks in one order and cannot
// deadlock), then one SELECT of the keys another writer inserted first,
// whose rows are followed as existing ones. A claim's refusal (422 reused
// key, 400 unissued key, a request this instance cannot write) is decided
// before anything is written for it and fails that claim alone; an SQL
// error fails the batch (runBatch then writes each claim alone). Results
// are assigned only when every statement succeeded: write may run it again
// (after a lost connection a claim finds the row its first attempt
// inserted, with its own new ids, and is still the new order).
func (s *Service) claimBatch(ctx context.Context, q execer, jobs []*claimJob) error {
	type result struct {
		d    *decision
		aerr *apiError
	}
	res := make([]result, len(jobs))
	keys := make([]string, 0, 2*len(jobs))
	for _, j := range jobs {
		keys = append(keys, j.key)
		if j.legacyKey != "" {
			keys = append(keys, j.legacyKey)
		}
	}
	var (
		rows     map[string]requestRow
		inserted map[string]bool // set when the read also inserted (PostgreSQL)
		err      error
	)
	if s.db.Dialect == sqldb.Postgres {
		if s.beforeInsert != nil {
			s.beforeInsert()
		}
		rows, inserted, err = s.readAndInsert(ctx, q, jobs, keys)
	} else {
		rows, err = s.getRequests(ctx, q, keys)
	}
	if err != nil {
		return err
	}
	var inserts []int // jobs whose new row is inserted
	for i, j := range jobs {
		key := j.key
		row, found := rows[key]
		if (!found || row.hash != j.hash) && j.legacyKey != "" {
			// The unscoped row of this very request wins over a scoped
			// row of another one (stored after the upgrade, when the
			// key was reused for a different order).
			if old, ok := rows[j.legacyKey]; ok && old.hash == j.hash {
				row, found, key = old, true, j.legacyKey
			}
		}
		switch {
		case found:
			d, aerr, err := s.follow(ctx, q, j, key, row)
			if err != nil {
				return err
			}
			res[i] = result{d, aerr}
		case j.issuedOnly:
			res[i].aerr = reject(http.StatusBadRequest, CodeBadIdempotencyKey, fmt.Sprintf(
				"Idempotency-Key header starts with %q, which is reserved for keys this server issued (in a 503 to a request sent without a key); this one was not issued: use a key of your own", keylessPrefix))
		case j.freshErr != nil:
			res[i].aerr = j.freshErr
		default:
			inserts = append(inserts, i)
		}
	}
	if len(inserts) > 0 {
		if inserted == nil {
			if s.beforeInsert != nil {
				s.beforeInsert()
			}
			slices.SortFunc(inserts, func(a, b int) int { return strings.Compare(jobs[a].key, jobs[b].key) })
			if inserted, err = s.insertRequests(ctx, q, jobs, inserts); err != nil {
				return err
			}
		}
		var lost []string
		for _, i := range inserts {
			if j := jobs[i]; inserted[j.key] {
				res[i].d = &decision{key: j.key, orderID: j.fresh.OrderID, payload: j.freshPayload, event: j.fresh, fresh: true}
			} else {
				lost = append(lost, j.key)
			}
		}
		if len(lost) > 0 {
			// Another transaction inserted these keys first: follow their rows.
			won, err := s.getRequests(ctx, q, lost)
			if err != nil {
				return err
			}
			for _, i := range inserts {
				j := jobs[i]
				if inserted[j.key] {
					continue
				}
				row, found := won[j.key]
				if !found {
					return fmt.Errorf("checkout request %q conflicted on insert but cannot be read", j.key)
				}
				d, aerr, err := s.follow(ctx, q, j, j.key, row)
				if err != nil {
					return err
				}
				res[i] = result{d, aerr}
			}
		}
	}
	for i, j := range jobs {
		j.d, j.aerr = res[i].d, res[i].aerr
	}
	return nil
}

// readAndInsert is getRequests and insertRequests in one statement
// (PostgreSQL): it reads the rows of keys (jobs' keys and legacy keys,
// duplicates allowed) and, in the same statement, inserts the pending row
// of each job that may be new (not issuedOnly, no freshErr) and whose key
// has no row and whose legacy key no row of the same request (as
// claimBatch decides from the rows read), in key order, ON CONFLICT DO
// NOTHING. It returns the rows read, as of the
// statement's start (the inserted rows are not among them), and the keys it
// inserted; a key another writer inserted after the statement's snapshot is
// in neither (claimBatch reads it again). One round trip and one
// transaction instead of two: checkout's claims are most of the order
// system's statements when they come one at a time.
func (s *Service) readAndInsert(ctx context.Context, q execer, jobs []*claimJob, keys []string) (map[string]requestRow, map[string]bool, error) {
	var b strings.Builder
	args := make([]any, 0, 8*len(jobs))
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`WITH found AS (SELECT idempotency_key, request_hash, order_id, event_id, status, payload, response_status, response_body
		FROM checkout_requests WHERE idempotency_key IN (`)
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(arg(k))
	}
	b.WriteString(`))`)
	var values []string
	for _, j := range jobs {
		if j.issuedOnly || j.freshErr != nil {
			continue
		}
		values = append(values, "("+arg(j.key)+"::text, "+arg(j.legacyKey)+"::text, "+arg(j.hash)+"::text, "+
			arg(j.fresh.OrderID)+"::text, "+arg(j.fresh.EventID)+"::text, "+arg(j.freshPayload)+"::bytea)")
	}
	if len(values) > 0 {
		b.WriteString(`, v (idempotency_key, legacy_key, request_hash, order_id, event_id, payload) AS (VALUES `)
		b.WriteString(strings.Join(values, ", "))
		b.WriteString(`), ins AS (INSERT INTO checkout_requests (idempotency_key, request_hash, order_id, event_id, status, payload, created_at)
			SELECT v.idempotency_key, v.request_hash, v.order_id, v.event_id, 'pending', v.payload, ` + arg(s.now().UnixMilli()) + `::bigint FROM v
			WHERE NOT EXISTS (SELECT 1 FROM found f WHERE f.idempotency_key = v.idempotency_key
				OR (v.legacy_key <> '' AND f.idempotency_key = v.legacy_key AND f.request_hash = v.request_hash))
			ORDER BY v.idempotency_key
			ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key)`)
	}
	b.WriteString(` SELECT false, idempotency_key, request_hash, order_id, event_id, status, payload, response_status, response_body FROM found`)
	if len(values) > 0 {
		b.WriteString(` UNION ALL SELECT true, idempotency_key, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM ins`)
	}
	rs, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim checkout requests: %w", err)
	}
	defer rs.Close()
	rows := make(map[string]requestRow, len(keys))
	inserted := make(map[string]bool, len(values))
	for rs.Next() {
		var (
			ins                            bool
			r                              requestRow
			hash, orderID, eventID, status sql.NullString
		)
		if err := rs.Scan(&ins, &r.key, &hash, &orderID, &eventID, &status, &r.payload, &r.responseStatus, &r.responseBody); err != nil {
			return nil, nil, fmt.Errorf("claim checkout requests: %w", err)
		}
		if ins {
			inserted[r.key] = true
			continue
		}
		r.hash, r.orderID, r.eventID, r.status = hash.String, orderID.String, eventID.String, status.String
		if len(r.payload) == 0 {
			r.payload = nil
		}
		rows[r.key] = r
	}
	if err := rs.Err(); err != nil {
		return nil, nil, fmt.Errorf("claim checkout requests: %w", err)
	}
	return rows, inserted, nil
}

// follow decides j's claim on the existing row of key: 422 for another
// request's row, the stored answer of a published one, the payload of a
// pending one to publish again (a pending row without its payload, written
// by hand or by an older build, gets the event rebuilt from this identical
// request with the row's ids, stored first). A pending row with j's own new
// ids is the row an earlier attempt of this batch inserted (its outcome was
// unknown): j is still the new order.
func (s *Service) follow(ctx context.Context, q execer, j *claimJob, key string, row requestRow) (*decision, *apiError, error) {
	if row.hash != j.hash {
		which := ""
		if j.own {
			which = " (your order " + row.orderID + ")"
		}
		return nil, unprocessable(order.ReasonIdempotencyMismatch,
			"this Idempotency-Key was used for a different request"+which+"; use a new key for a new order"), nil
	}
	if row.status == statusPublished {
		return &decision{replay: storedAnswer(row)}, nil, nil
	}
	if row.payload == nil {
		if aerr := s.unwritable(j.req); aerr != nil {
			return nil, aerr, nil
		}
		ev, aerr := s.newEvent(j.req, row.orderID, row.eventID)
		if aerr != nil {
			return nil, aerr, nil
		}
		payload, aerr := s.encode(ev)
		if aerr != nil {
			return nil, aerr, nil
		}
		if _, err := q.ExecContext(ctx, s.db.Rebind(`UPDATE checkout_requests SET payload = ?
			WHERE idempotency_key = ? AND status = 'pending'`), payload, key); err != nil {
			return nil, nil, fmt.Errorf("store payload of checkout request: %w", err)
		}
		return &decision{key: key, orderID: row.orderID, payload: payload, event: ev}, nil, nil
	}
	if f := j.fresh; f != nil && key == j.key && row.orderID == f.OrderID && row.eventID == f.EventID {
		return &decision{key: key, orderID: row.orderID, payload: row.payload, event: f, fresh: true}, nil, nil
	}
	return &decision{key: key, orderID: row.orderID, payload: row.payload}, nil, nil
}

// insertRequests inserts the pending rows of jobs[i] for i in idx (in that
// order) in one statement and returns the keys it inserted; a key another
// writer holds is skipped (ON CONFLICT DO NOTHING).
func (s *Service) insertRequests(ctx context.Context, q execer, jobs []*claimJob, idx []int) (map[string]bool, error) {
	var b strings.Builder
	b.WriteString(`INSERT INTO checkout_requests
		(idempotency_key, request_hash, order_id, event_id, status, payload, created_at) VALUES `)
	args := make([]any, 0, 6*len(idx))
	now := s.now().UnixMilli()
	for n, i := range idx {
		if n > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, 'pending', ?, ?)")
		j := jobs[i]
		args = append(args, j.key, j.hash, j.fresh.OrderID, j.fresh.EventID, j.freshPayload, now)
	}
	b.WriteString(" ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key")
	rs, err := q.QueryContext(ctx, s.db.Rebind(b.String()), args...)
	if err != nil {
		return nil, fmt.Errorf("insert checkout requests: %w", err)
	}
	defer rs.Close()
	out := make(map[string]bool, len(idx))
	for rs.Next() {
		var k string
		if err := rs.Scan(&k); err != nil {
			return nil, fmt.Errorf("insert checkout requests: %w", err)
		}
		out[k] = true
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("insert checkout requests: %w", err)
	}
	return out, nil
}

// storedAnswer is the replay of a published row: its stored response, or,
// for a row published without one (by hand), a 202 built from its ids.
func storedAnswer(row requestRow) *outcome {
	out := &outcome{status: http.StatusAccepted, orderID: row.orderID, replayed: true}
	if row.responseStatus.Valid {
		out.status = int(row.responseStatus.Int64)
	}
	if row.responseBody.Valid {
		out.body = []byte(row.responseBody.String)
	} else {
		out.body = marshal(order.PlaceOrderResponse{OrderID: row.orderID, Status: "accepted"})
	}
	return out
}

// getRequests reads the checkout_requests rows of keys (duplicates
// allowed) in one query, by key; a key without a row is absent.
func (s *Service) getRequests(ctx context.Context, q querier, keys []string) (map[string]requestRow, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	query := `SELECT idempotency_key, request_hash, order_id, event_id, status, payload, response_status, response_body
		FROM checkout_requests WHERE idempotency_key IN (?` + strings.Repeat(", ?", len(keys)-1) + `)`
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	rs, err := q.QueryContext(ctx, s.db.Rebind(query), args...)
	if err != nil {
		return nil, fmt.Errorf("read checkout requests: %w", err)
	}
	defer rs.Close()
	out := make(map[string]requestRow, len(keys))
	for rs.Next() {
		var r requestRow
		if err := rs.Scan(&r.key, &r.hash, &r.orderID, &r.eventID, &r.status, &r.payload, &r.responseStatus, &r.responseBody); err != nil {
			return nil, fmt.Errorf("read checkout requests: %w", err)
		}
		if len(r.payload) == 0 {
			r.payload = nil
		}
		out[r.key] = r
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read checkout requests: %w", err)
	}
	return out, nil
}

// querier is what *sql.DB and *sql.Tx share.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// keyLocks serialises the requests of one Idempotency-Key inside this
// process. Entries exist only while a key is held or waited for.
type keyLocks struct {
	mu sync.Mutex
	m  map[string]*keyLock
}

type keyLock struct {
	slot chan struct{} // one slot: held while full
	refs int           // holders and waiters; guarded by keyLocks.mu
}

// lock takes key's lock, waiting until it is free or ctx is done (then it
// returns ctx's error). The returned function releases it; call it once.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyLock)
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{slot: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()

	select {
	case l.slot <- struct{}{}:
		return func() {
			<-l.slot
			k.put(key, l)
		}, nil
	case <-ctx.Done():
		k.put(key, l)
		return nil, ctx.Err()
	}
}

func (k *keyLocks) put(key string, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.refs--; l.refs == 0 {
		delete(k.m, key)
	}
}
