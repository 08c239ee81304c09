// Package checkout is Ordercast's checkout service: the HTTP API at which
// orders enter the system. It validates an order, prices it from the catalog
// table, publishes one orderCreated event per accepted order and answers 202
// only once the broker has acknowledged that event.
//
// # HTTP API
//
//	POST /orders        body order.PlaceOrderRequest, optional Idempotency-Key header
//	                    202 order.PlaceOrderResponse once the event is acknowledged
//	GET  /orders/{id}   200 OrderView: status, stage history, notifications
//	GET  /openapi.json  200 the OpenAPI 3.1 description of the API ([OpenAPI])
//
// The body of POST /orders is one JSON object with the members customerId
// (string; absent or null: a guest), country, reference, channel (strings,
// optional) and lines (an array of {stockCode: string, quantity: integer}),
// matched by exact name; any other member, at any level, is refused (a
// misspelt "customerID" must not become a guest order, a client's price
// must not look accepted). channel says where the order was placed: 1 to
// MaxChannelLen characters of a-z, 0-9, '_' and '-' starting with a letter
// ("web", "api", "replay"); it is carried in orderCreated (schema version
// 2) and shown by GET once the orders service stored it.
//
// Every error is an order.ErrorResponse{Code, Error} with Content-Type
// application/json; the codes are the order.Reason* constants and the Code*
// constants of this package, and the messages name members by their JSON
// path ("lines[2].quantity") and JSON types, never Go types. Status codes:
//
//	400  the request is malformed: malformed_json (not one JSON object, a
//	     member of the wrong JSON type, such as a string quantity, or a
//	     member twice in one object),
//	     unknown_field (a member the request does not have, named),
//	     bad_idempotency_key (the header)
//	404  not_found
//	405  method_not_allowed, with an Allow header
//	400  bad_text (a string member with a control character, invalid UTF-8
//	     or a lone surrogate, named)
//	413  body_too_large
//	415  unsupported_media_type, unsupported_content_encoding
//	422  a well-formed request whose values are refused: bad_customer_id,
//	     bad_channel, bad_country, bad_reference, no_lines, too_many_lines,
//	     bad_quantity (also a line without quantity), not_a_product,
//	     unknown_stock_code
//	     (also a line without stockCode), amount_overflow,
//	     idempotency_key_reused
//	401  unauthorized: a token needed and missing, or invalid (with a
//	     WWW-Authenticate Bearer challenge, RFC 6750; see Config.Auth)
//	400  bad_authorization (a repeated, empty or non-Bearer Authorization
//	     header, or Bearer without a token)
//	403  customer_mismatch (the body's customerId is not the token's
//	     customer), forbidden (GET of another customer's order)
//	429  rate_limited, with Retry-After (Config.RateLimit)
//	500  internal
//	503  broker_unavailable (outcome unknown: orderId, statusUrl and
//	     idempotencyKey say how to find out), database_unavailable (not
//	     recorded); both carry Retry-After
//
// The request must be sent as Content-Type application/json (or an
// application/*+json type; a charset, if named, must be utf-8) without a
// Content-Encoding other than identity: otherwise 415
// unsupported_media_type or unsupported_content_encoding. Every string
// member must be valid UTF-8 without control characters (U+0000 to U+001F,
// U+007F to U+009F) or lone surrogate escapes: otherwise 400 bad_text,
// naming the member (encoding/json would store U+FFFD silently). Stock codes
// of charges booked as invoice lines (order.FeeStockCodes: POST, DOT, M,
// BANK CHARGES, AMAZONFEE...) are not orderable: 422 not_a_product.
//
// # Pricing
//
// Prices come only from the catalog table, loaded into memory by [New] and
// replaced as a whole by [Service.ReloadCatalog]. Stock codes are normalized
// with order.NormalizeStockCode on both sides. A client that sends a price
// or a total is refused (400 unknown_field).
//
// # Publication and idempotency
//
// Every accepted order is a row of table checkout_requests, keyed by the
// client's Idempotency-Key (scoped to the token's customer: see scopedKey)
// or, without one, by "order:<orderId>"; the table
// is therefore the durable list of every order checkout accepted ([Service.Accepted]
// counts its published rows). A request is handled as follows:
//
//  1. Outside any transaction: decode and validate the body and hash its
//     canonical form (sha256 of the re-marshalled request with normalized
//     stock codes), so that whitespace, member order, null members and the
//     case of stock codes do not change the hash.
//  2. Look the key up. A row with another hash answers
//     422 idempotency_key_reused. A 'published' row is replayed: its stored
//     response_status and response_body, byte for byte, with the header
//     Idempotent-Replayed: true. A 'pending' row yields its stored payload,
//     the very event (same order id, same event id) to publish again. A new
//     key is priced, its event encoded, and inserted as 'pending' WITH that
//     payload (INSERT ... ON CONFLICT DO NOTHING; a lost race re-reads the
//     winner's row and follows the existing-key path). A refusal is decided
//     before anything of the request is written.
//  3. The payload is produced to order.TopicOrderCreated, keyed by
//     order.KeyFor(customerId, orderId), and waited for at most
//     Config.ProduceTimeout.
//  4. On the broker's acknowledgement the row is updated to 'published' with
//     the 202 response and published_at, and the 202 is sent. On a produce
//     error or timeout the answer is 503 broker_unavailable and the row stays
//     'pending': a retry with the same key publishes the same event again.
//
// Group commit. Steps 2 and 4 of concurrent requests are written together:
// each request hands its claim (step 2) or its mark (step 4) to a batcher,
// and a runner writes every one waiting, up to Config.MaxBatch, with one
// statement per step for the whole batch (one SELECT of every key, one
// multi-row INSERT ... ON CONFLICT DO NOTHING in key order, one UPDATE of
// every mark; on PostgreSQL the SELECT and the INSERT are one statement),
// so that a batch of N requests costs the round trips and the commit (the
// WAL flush) of one. A request that finds a runner free is
// written at once, alone; batches form only while runners are busy. One
// request's refusal (422, 400) fails only that request; an SQL error fails
// the batch, whose requests are then written each alone, so that it fails
// only the request it belongs to (503 database_unavailable, as before).
// On SQLite a batch is one transaction; on PostgreSQL each statement is its
// own (autocommit: no BEGIN and COMMIT round trips), which gives the same
// guarantees, since under READ COMMITTED a transaction would not make the
// SELECT and the INSERT atomic either: the key's unique index and ON
// CONFLICT decide every race. Every write is idempotent (a claim re-reads
// its key and recognises the row it inserted by its new order and event
// ids; a mark updates pending rows only), so a write whose connection was
// lost, even in its commit, is written again. The mark is written before
// the 202, not after: the published rows are the durable list of accepted
// orders (Service.Accepted, the audit), and a crash between a 202 and a
// later mark would leave an accepted order out of it.
//
// Because the row and its payload are written before producing, a crash
// anywhere leads at worst to the same event being published twice, never to
// a second order; consumers deduplicate on the event id (their inboxes).
//
// Concurrent requests with the same key. Inside one process they are
// serialised on a per-key lock: the second waits (at most ProduceTimeout) for
// the first to finish, then finds the row published and replays it, so no
// duplicate record is produced. Across processes (several checkout
// instances) nothing waits: an instance that finds a 'pending' row re-publishes
// its payload at once. That can put the same event on the topic twice, which
// the consumers' inboxes absorb; polling instead would delay every retry after
// a failed produce (the common case of a pending row) for a reason that is
// rare, and a duplicate of the same event id is harmless by design.
//
// A produce that outlives ProduceTimeout (the idempotent producer cannot
// always fail a record that was already sent) is still followed in the
// background: the 503 has been sent, but if the broker acknowledges later the
// row is marked 'published' then, so a retry replays the 202. [Service.Close]
// waits for these.
//
// A 503 broker_unavailable therefore means "outcome unknown", never "not
// accepted": the order is recorded and its event may still be written. The
// answer names the order (orderId, statusUrl and the Location header) and
// the key to retry with (idempotencyKey and the Idempotency-Key response
// header). A request sent without a key is given the key of its row,
// "order:<orderId>", issued by the server; a client may send such a key only
// back for its row (a made-up one is 400 bad_idempotency_key). A retry with
// the key publishes the same event again (same event id), which consumers
// absorb, so it is never a second order; GET statusUrl shows "pending" until
// the acknowledgement is recorded. A 503 database_unavailable means the
// opposite: nothing was recorded nor published.
//
// # Concurrency
//
// A [Service] is safe for concurrent use by any number of goroutines and
// HTTP requests. It does not own the DB, the Serde or the producer client:
// the caller closes them, after [Service.Close].
package checkout
