// Package ctxtime holds the one context-aware sleep the runtime and the order
// system share.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d or until ctx is done, whichever comes first, and reports
// whether it waited the whole d (false: ctx ended first). A d of zero or less
// returns true at once unless ctx is already done. Safe for concurrent use.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
