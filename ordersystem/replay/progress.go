package replay

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

const barWidth = 30

// startProgress starts the progress output of a run, if any, and returns the
// function that stops it after a final update.
func (r *Replayer) startProgress(st *runState, total int, start time.Time) (stop func()) {
	w, mode := r.opts.Progress, r.opts.ProgressMode
	if w == nil || mode == ProgressOff {
		return func() {}
	}
	if mode != ProgressBar && mode != ProgressLines {
		mode = ProgressLines
		if isTerminal(w) {
			mode = ProgressBar
		}
	}
	interval := r.opts.ProgressInterval
	if interval <= 0 {
		interval = 2 * time.Second
		if mode == ProgressBar {
			interval = 200 * time.Millisecond
		}
	}
	p := &progress{w: w, bar: mode == ProgressBar, total: total, start: start, st: st}
	st.p = p
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.render(false)
			case <-done:
				return
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		p.render(true)
	}
}

// isTerminal reports whether w is an *os.File on a character device.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress renders one run's progress and its notes; safe for concurrent
// use.
type progress struct {
	w     io.Writer
	bar   bool
	total int
	start time.Time
	st    *runState

	mu      sync.Mutex // guards w and lastLen
	lastLen int        // length of the last bar line, to blank it out
}

// note writes msg on a line of its own; the bar, if any, is blanked out
// first and redrawn at the next update.
func (p *progress) note(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar && p.lastLen > 0 {
		fmt.Fprintf(p.w, "\r%s\r", strings.Repeat(" ", p.lastLen))
		p.lastLen = 0
	}
	fmt.Fprintln(p.w, msg)
}

func (p *progress) render(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	acc, rej, fail := p.st.accepted.Load(), p.st.rejected.Load(), p.st.failed.Load()
	done := int(acc + rej + fail)
	elapsed := time.Since(p.start)
	pct := 100.0
	if p.total > 0 {
		pct = 100 * float64(done) / float64(p.total)
	}
	perSec := 0.0
	if s := elapsed.Seconds(); s > 0 {
		perSec = float64(done) / s
	}
	eta := "-"
	if perSec > 0 && !final {
		eta = fmtDuration(time.Duration(float64(p.total-done) / perSec * float64(time.Second)))
	}
	counts := fmt.Sprintf("accepted %s, rejected %s, failed %s, retries %s",
		fmtInt(int(acc)), fmtInt(int(rej)), fmtInt(int(fail)), fmtInt(int(p.st.retries.Load())))
	if !p.bar {
		state := "eta " + eta
		if final {
			state = "finished"
			if done < p.total {
				state = "stopped" // interrupted, or an unreachable or wrong --url
			}
		}
		fmt.Fprintf(p.w, "replay: %s/%s sales (%.1f%%): %s; %.1f orders/s, elapsed %s, %s\n",
			fmtInt(done), fmtInt(p.total), pct, counts, perSec, fmtDuration(elapsed), state)
		return
	}
	filled := barWidth
	if p.total > 0 {
		filled = barWidth * done / p.total
	}
	line := fmt.Sprintf("[%s%s] %5.1f%% %s/%s sales | %s | %.0f/s | %s ETA %s",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled), pct,
		fmtInt(done), fmtInt(p.total), counts, perSec, fmtDuration(elapsed), eta)
	pad := ""
	if n := p.lastLen - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lastLen = len(line)
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r%s%s%s", line, pad, end)
}

// String returns a human summary of the replay, several lines ending in a
// newline, such as:
//
//	replay: 143 invoices (3,108 rows) read in 1.2s
//	  sales:       136 (113.3 orders/s)
//	  accepted:    127
//	  rejected:    9 (unknown_stock_code 9)
//	  failed:      0
//	  unfinished:  0
//	  not orders:  7 (cancellation 6, write_off 1)
//	  row errors:  0
//	  retries:     0
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "replay: %s invoices (%s rows) read in %s\n", fmtInt(s.InvoicesRead), fmtInt(s.Lines), fmtDuration(s.Elapsed))
	perSec := 0.0
	if secs := s.Elapsed.Seconds(); secs > 0 {
		perSec = float64(s.OrdersAccepted+s.RejectedTotal()+s.Failed) / secs
	}
	fmt.Fprintf(&b, "  sales:       %s (%.1f orders/s)\n", fmtInt(s.Sales), perSec)
	fmt.Fprintf(&b, "  accepted:    %s\n", fmtInt(s.OrdersAccepted))
	fmt.Fprintf(&b, "  rejected:    %s\n", fmtCounts(s.Rejected))
	fmt.Fprintf(&b, "  failed:      %s\n", fmtInt(s.Failed))
	unfinished := fmtInt(s.Unfinished)
	if s.Unfinished > 0 && s.Stopped != "" {
		unfinished += " (" + s.Stopped + ")"
	}
	fmt.Fprintf(&b, "  unfinished:  %s\n", unfinished)
	fmt.Fprintf(&b, "  not orders:  %s\n", fmtCounts(s.NotOrders))
	fmt.Fprintf(&b, "  row errors:  %s\n", fmtCounts(s.RowErrors))
	fmt.Fprintf(&b, "  retries:     %s\n", fmtInt(s.Retries))
	if len(s.AttemptErrors) > 0 {
		fmt.Fprintf(&b, "  attempt errors: %s\n", fmtCounts(s.AttemptErrors))
	}
	return b.String()
}

// fmtCounts formats a count map as "total (a 3, b 1)", largest first.
func fmtCounts(m map[string]int) string {
	total := 0
	for _, v := range m {
		total += v
	}
	if total == 0 {
		return "0"
	}
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		return cmp.Or(cmp.Compare(m[b], m[a]), strings.Compare(a, b))
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if m[k] != 0 {
			parts = append(parts, k+" "+fmtInt(m[k]))
		}
	}
	return fmtInt(total) + " (" + strings.Join(parts, ", ") + ")"
}

// fmtInt formats n with thousands separators: 541909 -> "541,909".
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtDuration rounds d for display: tenths of a second below a minute,
// seconds above.
func fmtDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
