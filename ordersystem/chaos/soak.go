package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SoakResult is one seed of a soak.
type SoakResult struct {
	Report  *Report
	Err     error         // the harness could not run this seed
	Elapsed time.Duration // the whole seed: setup, faults, drain, checks
}

// Soak runs the harness once per seed, each in DataDir/seed-N with cfg's
// other settings, and writes the Markdown table (SoakTable) to tablePath
// after every seed (so an interrupted soak keeps what it did). It goes on
// after a seed that fails or violates an invariant, and returns every
// result; it stops early only when ctx ends.
func Soak(ctx context.Context, cfg Config, seeds []int64, tablePath string) []SoakResult {
	var results []SoakResult
	base := cfg.DataDir
	for _, seed := range seeds {
		if ctx.Err() != nil {
			break
		}
		c := cfg
		c.Seed = seed
		c.DataDir = filepath.Join(base, fmt.Sprintf("seed-%d", seed))
		c.Faults = append([]string{}, cfg.Faults...)
		if cfg.Cluster != nil {
			cl := *cfg.Cluster
			c.Cluster = &cl
		}
		t0 := time.Now()
		rep, err := Run(ctx, c)
		results = append(results, SoakResult{Report: rep, Err: err, Elapsed: time.Since(t0)})
		if err != nil && c.Out != nil {
			fmt.Fprintf(c.Out, "chaos: seed %d: %v\n", seed, err)
		}
		if tablePath != "" {
			_ = os.WriteFile(tablePath, []byte(SoakTable(results)), 0o644)
		}
	}
	return results
}

// SoakTable renders soak results as a Markdown table: seed, minutes of
// faults and of the whole seed, faults injected by kind (and crash points
// hit), orders accepted/rejected, redeliveries (inbox duplicates, aborted
// transactions of fulfillment and of the relay), recovery times (median
// and max per fault kind, fault end to the slowest group caught up) and
// violations (the invariants that failed, or the harness's error).
func SoakTable(results []SoakResult) string {
	var b strings.Builder
	b.WriteString("| seed | backend | faults / whole (min) | faults injected | crash points hit | orders accepted / rejected | inbox duplicates | aborted txns (fulfillment / relay) | records made bad / in DLQs | recovery median / max (s) | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	totalViol := 0
	for _, r := range results {
		if r.Report == nil {
			fmt.Fprintf(&b, "| ? | | | | | | | | | | harness error: %s |\n", strings.ReplaceAll(fmt.Sprint(r.Err), "|", "/"))
			totalViol++
			continue
		}
		rep := r.Report
		acc, rej := 0, 0
		for _, c := range rep.OrdersByKind {
			acc += c.Accepted
			rej += c.Rejected
		}
		dups := 0
		for _, n := range rep.InboxDuplicates {
			dups += n
		}
		dlq := 0
		for _, n := range rep.DLQRecords {
			dlq += n
		}
		var rec []string
		for _, k := range sortedKeys(rep.RecoveryByFault) {
			s := rep.RecoveryByFault[k]
			rec = append(rec, fmt.Sprintf("%s %.0f/%.0f", k, s.Median, s.Max))
		}
		var viol []string
		for _, inv := range rep.Invariants {
			if !inv.OK {
				viol = append(viol, fmt.Sprintf("%s (%d)", inv.Name, inv.Violations))
				totalViol += inv.Violations
			}
		}
		v := "0"
		if len(viol) > 0 {
			v = strings.Join(viol, ", ")
		}
		fmt.Fprintf(&b, "| %d | %s | %.1f / %.1f | %s | %s | %d / %d | %d | %d / %d | %d / %d | %s | %s |\n",
			rep.Seed, rep.Backend, float64(rep.FaultSeconds)/60, r.Elapsed.Minutes(),
			nonZero(rep.Injected), nonZero(rep.CrashPointHits), acc, rej, dups, rep.TxnAborted, rep.RelayAborted,
			len(rep.BadRecords), dlq, strings.Join(rec, ", "), v)
	}
	fmt.Fprintf(&b, "\n%d seeds, %d violations.\n", len(results), totalViol)
	return b.String()
}

func nonZero(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}
