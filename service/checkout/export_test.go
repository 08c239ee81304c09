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
