package checkout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/ordercast/ordercast/order"
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
		ev, aerr := s.newEvent(req, order.NewID("ord_"), order.NewID("evt_"))
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

// txError carries an *apiError out of store.DB.InTx.
type txError struct{ *apiError }

// claim looks key up and decides, in one transaction, what place does:
// replay a published row, re-publish a pending one, or insert a new pending
// row (priced from the catalog, or prebuilt for a keyless request) and
// publish it. A row with another hash is 422 idempotency_key_reused. A
// request this instance cannot write (unwritable) is refused only where an
// event would be built: a published or pending row of the same request is
// replayed or re-published whatever the version this instance writes, and
// since the refusal is decided in the transaction that would insert the
// row, no such request is ever stored by this instance.
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
func (s *Service) claim(ctx context.Context, key, legacyKey, hash string, req *order.PlaceOrderRequest, prebuilt *order.OrderCreated, issuedOnly, own bool) (*decision, *apiError) {
	// Built at most once, outside any retry of the transaction.
	fresh := prebuilt
	var freshPayload []byte
	build := func(orderID, eventID string) (*order.OrderCreated, []byte, error) {
		if aerr := s.unwritable(req); aerr != nil {
			return nil, nil, txError{aerr}
		}
		if fresh == nil || fresh.OrderID != orderID {
			ev, aerr := s.newEvent(req, orderID, eventID)
			if aerr != nil {
				return nil, nil, txError{aerr}
			}
			fresh, freshPayload = ev, nil
		}
		if freshPayload == nil {
			p, aerr := s.encode(fresh)
			if aerr != nil {
				return nil, nil, txError{aerr}
			}
			freshPayload = p
		}
		return fresh, freshPayload, nil
	}
	newIDs := func() (string, string) {
		if fresh != nil {
			return fresh.OrderID, fresh.EventID
		}
		return order.NewID("ord_"), order.NewID("evt_")
	}

	var c *decision
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.cfg.DBTimeout)
	defer cancel()
	scoped := key
	err := s.db.InTx(ctx, func(tx *sql.Tx) error {
		c, key = nil, scoped
		row, found, err := s.getRequest(ctx, tx, key)
		if err != nil {
			return err
		}
		if !found && legacyKey != "" {
			old, oldFound, err := s.getRequest(ctx, tx, legacyKey)
			if err != nil {
				return err
			}
			if oldFound && old.hash == hash {
				row, found, key = old, true, legacyKey
			}
		}
		if !found && issuedOnly {
			return txError{reject(http.StatusBadRequest, CodeBadIdempotencyKey, fmt.Sprintf(
				"Idempotency-Key header starts with %q, which is reserved for keys this server issued (in a 503 to a request sent without a key); this one was not issued: use a key of your own", keylessPrefix))}
		}
		if !found {
			orderID, eventID := newIDs()
			ev, payload, err := build(orderID, eventID)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, s.db.Rebind(`INSERT INTO checkout_requests
				(idempotency_key, request_hash, order_id, event_id, status, payload, created_at)
				VALUES (?, ?, ?, ?, 'pending', ?, ?)
				ON CONFLICT (idempotency_key) DO NOTHING`),
				key, hash, ev.OrderID, ev.EventID, payload, s.now().UnixMilli())
			if err != nil {
				return fmt.Errorf("insert checkout request: %w", err)
			}
			if n, err := res.RowsAffected(); err != nil {
				return fmt.Errorf("insert checkout request: %w", err)
			} else if n == 1 {
				c = &decision{key: key, orderID: ev.OrderID, payload: payload, event: ev, fresh: true}
				return nil
			}
			// Another transaction inserted the key first: follow its row.
			if row, found, err = s.getRequest(ctx, tx, key); err != nil {
				return err
			} else if !found {
				return fmt.Errorf("checkout request %q conflicted on insert but cannot be read", key)
			}
		}
		if row.hash != hash {
			which := ""
			if own {
				which = " (your order " + row.orderID + ")"
			}
			return txError{unprocessable(order.ReasonIdempotencyMismatch,
				"this Idempotency-Key was used for a different request"+which+"; use a new key for a new order")}
		}
		if row.status == statusPublished {
			c = &decision{replay: storedAnswer(row)}
			return nil
		}
		if row.payload == nil {
			// A pending row without its payload (written by hand or by an
			// older build): rebuild the event from this identical request
			// with the row's ids and store it first.
			ev, payload, err := build(row.orderID, row.eventID)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.db.Rebind(`UPDATE checkout_requests SET payload = ?
				WHERE idempotency_key = ? AND status = 'pending'`), payload, key); err != nil {
				return fmt.Errorf("store payload of checkout request: %w", err)
			}
			c = &decision{key: key, orderID: row.orderID, payload: payload, event: ev}
			return nil
		}
		c = &decision{key: key, orderID: row.orderID, payload: row.payload}
		return nil
	})
	if err != nil {
		if te, ok := errors.AsType[txError](err); ok {
			return nil, te.apiError
		}
		if parent.Err() != nil {
			s.log.Info("checkout: the client hung up before the request was recorded", slog.String("idempotency_key", key), slog.Any("error", err))
			return nil, clientGone(parent.Err())
		}
		return nil, s.dbFailed("recording the order", err, ctx.Err() != nil)
	}
	s.dbHealth.ok()
	return c, nil
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

// getRequest reads the checkout_requests row of key.
func (s *Service) getRequest(ctx context.Context, q querier, key string) (requestRow, bool, error) {
	r := requestRow{key: key}
	err := q.QueryRowContext(ctx, s.db.Rebind(`SELECT request_hash, order_id, event_id, status, payload, response_status, response_body
		FROM checkout_requests WHERE idempotency_key = ?`), key).
		Scan(&r.hash, &r.orderID, &r.eventID, &r.status, &r.payload, &r.responseStatus, &r.responseBody)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("read checkout request: %w", err)
	}
	if len(r.payload) == 0 {
		r.payload = nil
	}
	return r, true, nil
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
