package checkout

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// dbReprobeAfter is how long a failed database state is kept before Ready
// checks the database itself again.
const dbReprobeAfter = 2 * time.Second

// dbHealth is the state of the database as checkout's requests last found
// it: the error of the last transaction if it failed, nil once one
// succeeded. Safe for concurrent use.
type dbHealth struct {
	mu  sync.Mutex
	err error
	at  time.Time
}

func (h *dbHealth) ok() {
	h.mu.Lock()
	h.err = nil
	h.mu.Unlock()
}

func (h *dbHealth) failed(err error) {
	h.mu.Lock()
	h.err, h.at = err, time.Now()
	h.mu.Unlock()
}

func (h *dbHealth) get() (error, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err, h.at
}

// dbFailed logs a failed database step and returns its 503
// database_unavailable; timedOut says the step ran out of DBTimeout.
func (s *Service) dbFailed(what string, err error, timedOut bool) *apiError {
	if timedOut {
		err = fmt.Errorf("no answer within %v (Config.DBTimeout; is the database locked by another process?): %w", s.cfg.DBTimeout, err)
	}
	s.dbHealth.failed(err)
	s.log.Error("checkout: "+what+" failed", slog.Any("error", err))
	return reject(http.StatusServiceUnavailable, CodeDatabaseUnavailable,
		what+" failed: "+err.Error()+"; nothing was recorded nor published, retry")
}

// Ready returns nil when checkout's last database transaction succeeded,
// or an error naming the database failure that made a request answer 503
// database_unavailable. A failure older than 2s is checked again first: an
// empty write transaction (taking SQLite's write lock, as POST does),
// bounded by DBTimeout, and nil when it commits. Safe for concurrent use;
// it blocks at most DBTimeout.
func (s *Service) Ready(ctx context.Context) error {
	err, at := s.dbHealth.get()
	if err == nil {
		return nil
	}
	if time.Since(at) >= dbReprobeAfter {
		pctx, cancel := context.WithTimeout(ctx, s.cfg.DBTimeout)
		defer cancel()
		perr := s.db.InTx(pctx, func(*sql.Tx) error { return nil })
		if perr == nil {
			s.dbHealth.ok()
			return nil
		}
		if pctx.Err() != nil && ctx.Err() == nil {
			perr = fmt.Errorf("no answer within %v (Config.DBTimeout; is the database locked by another process?): %w", s.cfg.DBTimeout, perr)
		}
		s.dbHealth.failed(perr)
		err = perr
	}
	return fmt.Errorf("checkout: database unavailable: %w", err)
}
