package checkout

// RequestHash returns the canonical hash that POST /orders stores for body,
// for tests that write checkout_requests rows themselves.
func RequestHash(body []byte) (string, error) {
	req, aerr := parseRequest(body)
	if aerr != nil {
		return "", aerr
	}
	return requestHash(req), nil
}

// ActiveBodyReads is the number of request bodies being read.
func (s *Service) ActiveBodyReads() int {
	s.bodies.mu.Lock()
	defer s.bodies.mu.Unlock()
	return len(s.bodies.active)
}

// HoldClaims makes the claim batcher's runners wait before they take a
// batch, until the returned function is called (once): a test queues
// several claims (QueuedClaims) to have them written in one batch.
func (s *Service) HoldClaims() (release func()) {
	gate := make(chan struct{})
	s.claims.mu.Lock()
	s.claims.gate = gate
	s.claims.mu.Unlock()
	return func() {
		s.claims.mu.Lock()
		s.claims.gate = nil
		s.claims.mu.Unlock()
		close(gate)
	}
}

// QueuedClaims is the number of claims waiting for a runner.
func (s *Service) QueuedClaims() int { return s.claims.queued() }

// LargestClaimBatch is the size of the largest batch of claims taken.
func (s *Service) LargestClaimBatch() int { return int(s.claims.largest.Load()) }

// SetAfterWrite makes f run after each successful write of a batch (claims
// and marks alike), its error becoming the write's, as a connection lost in
// COMMIT would: the write applied, its caller told it failed. Set it
// before serving.
func (s *Service) SetAfterWrite(f func() error) { s.afterWrite = f }

// SetBeforeInsert makes f run in each claim batch between its SELECT and
// its INSERT (a window in which another instance may insert a key). Set it
// before serving.
func (s *Service) SetBeforeInsert(f func()) { s.beforeInsert = f }

// SourceKey is the rate limit bucket of a client address.
var SourceKey = sourceKey

// ScopedKey is the checkout_requests key of customer's Idempotency-Key
// clientKey.
func ScopedKey(customer, clientKey string) string {
	return scopedKey(principal{customer: customer}, clientKey)
}
